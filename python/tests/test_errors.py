"""shmrc's exceptions as Python code meets them (issue 27): importable from `shmrc`,
picklable in any process, with builtin bases, and surfacing from a DataLoader worker
for real causes; every argument checked at the call that takes it."""
import errno
import json
import math
import os
import pickle
import shutil
import subprocess
import sys

import pytest

import shmrc

HERE = os.path.dirname(os.path.abspath(__file__))


def _exception_classes():
    return sorted(
        (getattr(shmrc, name) for name in dir(shmrc) if name.endswith("Error")),
        key=lambda cls: cls.__name__,
    )


def _instance(cls):
    if issubclass(cls, OSError):
        return cls(errno.EIO, "made by the test")
    return cls("made by the test")


UNPICKLE = """
import json, pickle, sys
import shmrc
out = []
for cls_name, data in json.load(sys.stdin):
    e = pickle.loads(bytes.fromhex(data))
    out.append([cls_name, type(e).__name__, type(e).__module__, type(e) is getattr(shmrc, cls_name),
                isinstance(e, shmrc.ShmrcError), str(e), getattr(e, "errno", None)])
print(json.dumps(out))
"""


def test_every_exception_class_round_trips_through_pickle_in_a_fresh_interpreter():
    classes = _exception_classes()
    assert len(classes) >= 28
    pickled = [[cls.__name__, pickle.dumps(_instance(cls)).hex()] for cls in classes]
    out = subprocess.run(
        [sys.executable, "-c", UNPICKLE],
        input=json.dumps(pickled),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    for name, got_name, module, same_class, is_shmrc, message, got_errno in json.loads(out.stdout):
        assert (got_name, module, same_class, is_shmrc) == (name, "shmrc", True, True), name
        assert "made by the test" in message
        assert got_errno == (errno.EIO if issubclass(getattr(shmrc, name), OSError) else None)


def test_exceptions_have_the_builtin_bases_python_code_expects():
    expected = {
        "NoSpaceError": (OSError, errno.ENOSPC),
        "TooManyFdsError": (OSError, errno.EMFILE),
        "OtherUserError": (PermissionError, errno.EACCES),
        "TimedOutError": (TimeoutError, errno.ETIMEDOUT),
    }
    for name, (base, number) in expected.items():
        cls = getattr(shmrc, name)
        assert issubclass(cls, base) and issubclass(cls, shmrc.ShmrcError)
        made = shmrc._errors.make(name, "why")
        assert type(made) is cls and made.errno == number and made.strerror == "why"
    # The OS error class carries the failed call's errno.
    made = shmrc._errors.make("OsError", "shm_open failed", errno.EACCES)
    assert isinstance(made, OSError) and made.errno == errno.EACCES
    for name in (
        "InvalidArgumentError",
        "UnknownStrategyError",
        "BadNamespaceError",
        "OutsideNamespaceError",
        "MalformedError",
        "WrongStrategyError",
    ):
        assert issubclass(getattr(shmrc, name), ValueError), name
    assert issubclass(shmrc.OutOfBoundsError, IndexError)
    assert issubclass(shmrc.DisconnectedError, ConnectionError)
    # Causes with no builtin counterpart are not OSErrors (an `except OSError` around
    # file reading must not swallow a stale handle).
    for name in ("GoneError", "StaleError", "HoldersFullError", "NoManagerError"):
        assert not issubclass(getattr(shmrc, name), OSError), name
    assert set(shmrc.ERRORS) == {cls.__name__ for cls in _exception_classes()}
    # Raised for real by the Rust library, through the same classes.
    with pytest.raises(shmrc.MalformedError) as raised:
        shmrc._shmrc.Buf.attach_bytes(b"not a handle")
    assert isinstance(raised.value, ValueError) and type(raised.value).__module__ == "shmrc"


def _require_root(what):
    if os.geteuid() == 0 and shutil.which("unshare") is not None:
        return
    message = "cannot set up %s: needs root and unshare(1)" % what
    if os.environ.get("SHMRC_REQUIRE_ROOT") == "1":
        pytest.fail(message + " (SHMRC_REQUIRE_ROOT=1)")
    pytest.skip(message)


def _worker_error(cause, ns, tiny_dev_shm):
    scenario = [sys.executable, os.path.join(HERE, "worker_error_scenario.py"), cause, ns]
    env = dict(os.environ)
    if tiny_dev_shm:
        # A mount namespace of its own whose /dev/shm is a 1 MiB tmpfs (gone with it);
        # no manager (it would run in the namespace with the job).
        import shlex

        script = "mount -t tmpfs -o size=1M tmpfs /dev/shm && exec %s" % " ".join(
            shlex.quote(part) for part in scenario
        )
        scenario = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
        env["SHMRC_MANAGER"] = "off"
    out = subprocess.run(scenario, capture_output=True, text=True, timeout=90, env=env, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(120)
def test_no_space_in_a_dataloader_worker_reaches_the_main_process(ns):
    _require_root("a mount namespace with a 1 MiB /dev/shm")
    got = _worker_error("no_space", ns, tiny_dev_shm=True)
    assert got["type"] == "NoSpaceError", got
    assert got["module"] == "shmrc" and got["shmrc"] and got["oserror"], got
    assert "Caught NoSpaceError in DataLoader worker process 0" in got["message"], got
    assert got["seconds"] < 10, got


@pytest.mark.timeout(120)
def test_a_bad_handle_in_a_dataloader_worker_reaches_the_main_process(ns):
    got = _worker_error("bad_handle", ns, tiny_dev_shm=False)
    assert got["type"] == "MalformedError", got
    assert got["module"] == "shmrc" and got["shmrc"] and got["valueerror"], got
    assert "Caught MalformedError in DataLoader worker process 0" in got["message"], got
    assert got["seconds"] < 10, got


# --- Arguments are checked at the call that takes them (issue 27, item 2). ---


def test_buffer_and_pool_arguments_are_checked_in_pythons_terms(ns):
    with pytest.raises(shmrc.InvalidArgumentError, match="nbytes must be at least 1, not -1"):
        shmrc.ShmBuf(-1, "file_system", ns)
    with pytest.raises(TypeError, match="nbytes must be an int, not float"):
        shmrc.ShmBuf(1.5, "file_system", ns)
    with pytest.raises(TypeError, match="strategy must be a str or None, not int"):
        shmrc.ShmBuf(16, 3, ns)
    with pytest.raises(TypeError, match="namespace must be a str or None, not bytes"):
        shmrc.ShmBuf(16, "file_system", b"shmrc-x")
    with pytest.raises(shmrc.BadNamespaceError, match='must start with "shmrc"'):
        shmrc.ShmBuf(16, "file_descriptor", "myjob")  # checked even where unused
    with pytest.raises(shmrc.InvalidArgumentError, match="max_idle_buffers must be at least 0, not -1"):
        shmrc.ShmPool(ns, max_idle_buffers=-1)
    with pytest.raises(shmrc.InvalidArgumentError, match="max_idle_bytes must be at least 0"):
        shmrc.ShmPool(ns, max_idle_bytes=-5)
    with pytest.raises(TypeError, match="max_idle_bytes must be an int, not str"):
        shmrc.ShmPool(ns, max_idle_bytes="1")
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(shmrc.InvalidArgumentError, match="idle_timeout must be a finite number of seconds >= 0") as raised:
            shmrc.ShmPool(ns, idle_timeout=bad)
        assert "Duration" not in str(raised.value)
    with pytest.raises(TypeError, match="idle_timeout must be a number of seconds, not str"):
        shmrc.ShmPool(ns, idle_timeout="10")
    with pytest.raises(shmrc.BadNamespaceError):
        shmrc.ShmPool("myjob")
    pool = shmrc.ShmPool(ns, idle_timeout=0)
    with pytest.raises(shmrc.InvalidArgumentError, match="nbytes must be at least 1, not 0"):
        pool.get(0)
    with pytest.raises(TypeError, match="zero must be True or False, not 'yes'"):
        pool.get(16, zero="yes")
    with pytest.raises(TypeError, match="dry_run must be True or False"):
        shmrc.sweep(ns, dry_run="no")
    with pytest.raises(TypeError, match="strategy must be a str, not NoneType"):
        shmrc.set_sharing_strategy(None)
    with pytest.raises(shmrc.BadNamespaceError):
        shmrc.ls("myjob")


def test_install_checks_every_argument_before_changing_anything():
    torch_shmrc = pytest.importorskip("shmrc.torch")
    with pytest.raises(shmrc.BadNamespaceError, match='"myjob".*must start with "shmrc"'):
        torch_shmrc.install("file_system", namespace="myjob")
    assert not torch_shmrc.installed()
    with pytest.raises(TypeError, match="pool must be True or False, not 'no'"):
        torch_shmrc.install("file_system", pool="no")
    assert not torch_shmrc.installed()
    with pytest.raises(shmrc.UnknownStrategyError, match="file_descriptor, file_system"):
        torch_shmrc.install("shm")
    with pytest.raises(TypeError, match="strategy must be a str or None"):
        torch_shmrc.install(1)
    assert not torch_shmrc.installed()
