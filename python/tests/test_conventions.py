"""Python conventions of the package (issue 27, item 5): the version, the type stubs
shipped with the package and true to it, a readable help(shmrc), and what type() of a
buffer is."""
import ast
import ctypes
import importlib.metadata
import os
import pydoc
import re

import pytest

import shmrc

PACKAGE = os.path.dirname(os.path.abspath(shmrc.__file__))
HERE = os.path.dirname(os.path.abspath(__file__))


def test_version_is_the_crates():
    assert shmrc.__version__ == importlib.metadata.version("shmrc")
    cargo = os.path.join(HERE, "..", "Cargo.toml")
    if os.path.exists(cargo):  # run from the source tree, as CI does
        with open(cargo) as f:
            crate = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
        assert shmrc.__version__ == crate


def _stub_names(path):
    with open(path) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets)
    return names


def test_the_package_ships_stubs_that_match_it():
    for name in ("py.typed", "__init__.pyi", "torch.pyi"):
        assert os.path.exists(os.path.join(PACKAGE, name)), name
    stub = _stub_names(os.path.join(PACKAGE, "__init__.pyi"))
    public = set(shmrc.__all__) | set(shmrc.ERRORS) | {"__version__", "Strategy"}
    assert public - stub == set(), "not in the stub"
    assert {n for n in stub - public if not hasattr(shmrc, n)} == set(), "stubbed, absent"
    import typing

    assert typing.get_args(shmrc.Strategy) == ("file_descriptor", "file_system")
    assert set(typing.get_args(shmrc.Strategy)) == shmrc.get_all_sharing_strategies()
    torch_stub = _stub_names(os.path.join(PACKAGE, "torch.pyi"))
    try:
        import shmrc.torch as shmrc_torch
    except ImportError:  # no torch: the stub is still checked against the file's __all__
        return
    assert set(shmrc_torch.__all__) <= torch_stub
    assert all(hasattr(shmrc_torch, n) for n in torch_stub if not n.startswith("_"))


def test_help_is_readable():
    text = pydoc.render_doc(shmrc, renderer=pydoc.plaintext)
    lines = text.splitlines()
    # 2,348 lines before issue 27, mostly the inherited methods of 28 exception classes.
    assert len(lines) < 500, len(lines)
    for name in shmrc.ERRORS:  # every exception is still named, with its builtin base
        assert name in text, name
    assert "NoSpaceError (OSError)" in text and "starts with ``shmrc``" in text


def test_a_buffer_is_a_shmbuf_of_its_size():
    buf = shmrc.ShmBuf(16, "file_descriptor")
    # Not `type(buf) is shmrc.ShmBuf`: each size has a subclass that is also a ctypes
    # array of that size (the buffer protocol on every CPython >= 3.9 under the stable
    # ABI; docs/PYTHON.md). It is named and placed as ShmBuf.
    assert isinstance(buf, shmrc.ShmBuf)
    assert type(buf).__bases__ == (shmrc.ShmBuf, ctypes.c_ubyte * 16)
    assert (type(buf).__name__, type(buf).__module__) == ("ShmBuf", "shmrc")
    assert type(shmrc.ShmBuf(16, "file_descriptor")) is type(buf)  # one class per size


def test_a_share_handle_is_not_made_from_a_callers_values_and_closes_nothing():
    # Built from a caller's descriptor, a handle would close it on a failed attach
    # (issue 29, item 7): the constructor is not public.
    r, w = os.pipe()
    try:
        with pytest.raises(TypeError, match="ShmBuf.share"):
            shmrc.ShareHandle("file_descriptor", 16, b"\0" * 74, fd=r)
        os.fstat(r)  # still open: nothing of the caller's was closed
    finally:
        os.close(r)
        os.close(w)


def test_the_shared_memory_stubs_match_the_modules():
    import shmrc.managers
    import shmrc.shared_memory

    for module in (shmrc.shared_memory, shmrc.managers):
        stub = _stub_names(os.path.join(PACKAGE, module.__name__.split(".")[-1] + ".pyi"))
        assert set(module.__all__) <= stub, module.__name__
        assert all(hasattr(module, n) for n in stub if not n.startswith("_")), module.__name__
