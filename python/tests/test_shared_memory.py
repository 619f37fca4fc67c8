"""shmrc.shared_memory (the crash-safe multiprocessing.shared_memory), ShareableList,
shmrc.managers.SharedMemoryManager and the name index, with real processes and real
SIGKILLs. CPython's own tests run against the module too: python/conformance/."""
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import shmrc
from shmrc import managers, shared_memory
from shmrc.shared_memory import ShareableList, SharedMemory

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def sm(ns, monkeypatch):
    """The namespace of the test's blocks and name index; the index must be empty at
    the end (then it is removed)."""
    monkeypatch.setenv(shared_memory.NAMESPACE_ENV, ns)
    yield ns
    directory = shared_memory._index_dir(ns)
    if not os.path.exists(directory):
        return
    left = [n for n in os.listdir(directory) if n != ".lock"]
    for name in left:
        os.unlink(os.path.join(directory, name))
    if os.path.exists(os.path.join(directory, ".lock")):
        os.unlink(os.path.join(directory, ".lock"))
    os.rmdir(directory)
    assert not left, "left in the name index: %s" % left


def dev_shm(name):
    return os.path.exists(os.path.join("/dev/shm", name))


def gone_within(files, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(dev_shm(f) for f in files):
            return True
        time.sleep(0.01)
    return False


def test_create_attach_close_unlink(sm):
    a = SharedMemory(create=True, size=4096)
    assert a.name.startswith("psm_") and a.size == 4096 and len(a.buf) == 4096
    index = shared_memory._index_dir(sm)
    for directory in (index, os.path.dirname(index)):
        assert os.stat(directory).st_mode & 0o777 == 0o700, directory
    assert isinstance(a.buf, memoryview) and a.buf.format == "B"
    assert repr(a) == "SharedMemory(%r, size=4096)" % a.name
    assert bytes(a.buf[:4]) == b"\0\0\0\0"
    a.buf[:5] = b"hello"
    b = SharedMemory(a.name, size=1 << 30)  # size is ignored on attach
    assert b.size == 4096 and bytes(b.buf[:5]) == b"hello"
    b.buf[0] = ord("j")
    assert bytes(a.buf[:5]) == b"jello"
    b.close()
    b.close()  # twice is fine, as with the stdlib
    assert b.buf is None
    a.unlink()
    a.close()


def test_a_chosen_name_with_or_without_the_leading_slash(sm):
    a = SharedMemory("my-block", create=True, size=10)
    assert a.name == "my-block" and a._name == "/my-block"
    b = SharedMemory("/my-block")
    assert b.name == "my-block"
    b.close()
    a.unlink()
    a.close()


def test_errors_are_the_stdlibs(sm):
    with pytest.raises(FileNotFoundError) as missing:
        SharedMemory("not-there")
    assert missing.value.errno == 2 and "not-there" in str(missing.value)
    a = SharedMemory("taken", create=True, size=8)
    with pytest.raises(FileExistsError) as taken:
        SharedMemory("taken", create=True, size=8)
    assert taken.value.errno == 17 and "taken" in str(taken.value)
    for size in (-1, 0):
        with pytest.raises(ValueError, match="size"):
            SharedMemory(create=True, size=size)
    with pytest.raises(ValueError, match="size"):
        SharedMemory(create=True)
    with pytest.raises(ValueError, match="'name' can only be None"):
        SharedMemory()
    with pytest.raises(TypeError, match="'size' must be an int"):
        SharedMemory(create=True, size="8")
    with pytest.raises(TypeError, match="'size' must be an int"):
        SharedMemory(create=True, size=True)
    with pytest.raises(TypeError, match="name must be a str"):
        SharedMemory(42)
    for bad in ("", "/", "a/b", ".", "..", "a\0b"):
        with pytest.raises(ValueError, match="invalid shared memory name"):
            SharedMemory(bad, create=True, size=8)
    with pytest.raises(ValueError, match="longer than 255 bytes"):
        SharedMemory("x" * 256, create=True, size=8)
    a.unlink()
    a.close()


def test_a_bad_namespace_is_refused(sm, monkeypatch):
    monkeypatch.setenv(shared_memory.NAMESPACE_ENV, "not-shmrc")
    with pytest.raises(shmrc.BadNamespaceError):
        SharedMemory(create=True, size=8)


@pytest.mark.parametrize("entry", ["file", "other link", "bad hex", "bad locator"])
def test_a_corrupt_index_entry_names_itself(sm, entry):
    path = os.path.join(shared_memory._index_dir(sm, make=True), "junk")
    if entry == "file":
        with open(path, "wb") as f:
            f.write(b"not a locator")
    else:
        target = {
            "other link": "/etc/passwd",
            "bad hex": "shmrc-locator:zz",
            "bad locator": "shmrc-locator:" + b"SHRH but no more".hex(),
        }[entry]
        os.symlink(target, path)
    with pytest.raises(shmrc.MalformedError, match="name index entry .*junk"):
        SharedMemory("junk")
    # Nobody else's entry is removed or replaced by a create or an unlink.
    with pytest.raises(FileExistsError):
        SharedMemory("junk", create=True, size=8)
    os.unlink(path)


def test_unlink_removes_the_name_but_holders_keep_their_memory(sm):
    a = SharedMemory("kept", create=True, size=64)
    b = SharedMemory("kept")
    a.buf[:3] = b"abc"
    a.unlink()
    with pytest.raises(FileNotFoundError):
        SharedMemory("kept")
    with pytest.raises(FileNotFoundError):
        a.unlink()  # a second unlink, as a second shm_unlink
    assert bytes(b.buf[:3]) == b"abc"
    b.buf[:3] = b"xyz"
    assert bytes(a.buf[:3]) == b"xyz"
    # The name is free for a new block, which is another one.
    c = SharedMemory("kept", create=True, size=64)
    assert bytes(c.buf[:3]) == b"\0\0\0"
    with pytest.raises(FileNotFoundError):
        b.unlink()  # the name is c's now: b's unlink must not remove it
    d = SharedMemory("kept")
    assert bytes(d.buf[:3]) == b"\0\0\0"
    for block in (a, b, d):
        block.close()
    c.unlink()
    c.close()


def test_the_last_close_frees_the_block_and_its_name(sm):
    a = SharedMemory("short-lived", create=True, size=4096)
    file = a._raw.name
    assert dev_shm(file)
    a.close()
    assert not dev_shm(file)
    with pytest.raises(FileNotFoundError):
        SharedMemory("short-lived")
    # The lookup removed the stale entry; the name can be created again.
    assert os.listdir(shared_memory._index_dir(sm)) == [".lock"]
    b = SharedMemory("short-lived", create=True, size=16)
    b.unlink()
    b.close()


def test_create_over_a_stale_name_and_prune(sm):
    # A create's temporary file left by a dead process (one of a live process stays).
    dead = subprocess.Popen(["true"])
    dead.wait()
    directory = shared_memory._index_dir(sm, make=True)
    leftover = os.path.join(directory, ".tmp-%d-0123" % dead.pid)
    busy = os.path.join(directory, ".tmp-%d-4567" % os.getpid())
    for path in (leftover, busy):
        open(path, "wb").close()
    a = SharedMemory("stale-1", create=True, size=8)
    b = SharedMemory("stale-2", create=True, size=8)
    live = SharedMemory("live", create=True, size=8)
    a.close()
    b.close()
    c = SharedMemory("stale-1", create=True, size=8)  # over a stale entry
    assert shared_memory.prune() == ["stale-2"]
    assert sorted(os.listdir(directory)) == [".lock", os.path.basename(busy), "live", "stale-1"]
    os.unlink(busy)
    for block in (c, live):
        block.unlink()
        block.close()


@pytest.mark.parametrize("kind", ["slice", "numpy"])
def test_a_view_of_buf_outlives_close_safely(sm, kind):
    """The stdlib's close() unmaps the memory under a numpy array made over buf (a
    segmentation fault at its next use) and raises BufferError while a slice of buf
    lives; here such views keep the memory mapped until they go."""
    a = SharedMemory(create=True, size=64)
    file = a._raw.name
    view = a.buf[:8] if kind == "slice" else np.ndarray((8,), dtype=np.uint8, buffer=a.buf)
    a.close()
    a.unlink()
    assert a.buf is None
    view[:3] = b"abc" if kind == "slice" else [97, 98, 99]
    assert bytes(view[:3]) == b"abc" and dev_shm(file)
    del view
    assert not dev_shm(file)


def test_numpy_over_buf_as_with_the_stdlib(sm):
    a = SharedMemory(create=True, size=8 * 1000)
    x = np.ndarray((10, 100), dtype=np.float64, buffer=a.buf)
    x[:] = np.arange(1000).reshape(10, 100)
    b = SharedMemory(a.name)
    y = np.ndarray((10, 100), dtype=np.float64, buffer=b.buf)
    assert y[9, 99] == 999.0
    y[0, 0] = -1
    assert x[0, 0] == -1
    del x, y
    b.close()
    a.unlink()
    a.close()


def _child_attach_and_write(name_or_block, namespace, data):
    os.environ[shared_memory.NAMESPACE_ENV] = namespace
    if isinstance(name_or_block, str):
        block = SharedMemory(name_or_block)
    else:
        block = name_or_block
    block.buf[: len(data)] = data
    block.close()


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_attach_by_name_and_by_pickle_in_another_process(sm, method):
    a = SharedMemory(create=True, size=64)
    ctx = multiprocessing.get_context(method)
    p = ctx.Process(target=_child_attach_and_write, args=(a.name, sm, b"by name"))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert bytes(a.buf[:7]) == b"by name"
    p = ctx.Process(target=_child_attach_and_write, args=(a, sm, b"pickled"))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert bytes(a.buf[:7]) == b"pickled"
    a.unlink()
    a.close()


def test_a_plain_script_attaches_by_name(sm):
    a = SharedMemory("for-a-script", create=True, size=16)
    code = textwrap.dedent(
        """
        from shmrc.shared_memory import SharedMemory
        b = SharedMemory("for-a-script")
        b.buf[:6] = b"script"
        b.close()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert bytes(a.buf[:6]) == b"script"
    a.unlink()
    a.close()


def test_a_pickle_attaches_in_the_senders_namespace(sm, monkeypatch):
    a = SharedMemory(create=True, size=32)
    data = pickle.dumps(a)
    monkeypatch.setenv(shared_memory.NAMESPACE_ENV, "shmrc-elsewhere")
    with pytest.raises(FileNotFoundError):
        SharedMemory(a.name)  # not in this namespace
    b = pickle.loads(data)
    assert b.name == a.name and os.environ[shared_memory.NAMESPACE_ENV] == "shmrc-elsewhere"
    b.close()
    monkeypatch.setenv(shared_memory.NAMESPACE_ENV, sm)
    a.unlink()
    a.close()


def test_pickle_round_trip_and_dead_object(sm):
    a = SharedMemory(create=True, size=32)
    a.buf[:6] = b"pickle"
    b = pickle.loads(pickle.dumps(a))
    assert isinstance(b, SharedMemory) and b.name == a.name
    assert bytes(b.buf[:6]) == b"pickle"
    data = pickle.dumps(a)
    b.close()
    a.close()
    a.unlink()
    with pytest.raises(FileNotFoundError):
        pickle.loads(data)


def test_shareable_list(sm):
    sl = ShareableList(["howdy", b"HoWdY", -273.154, 100, None, True, 42])
    assert type(sl).__module__ == "shmrc.shared_memory"
    assert isinstance(sl.shm, SharedMemory)
    other = ShareableList(name=sl.shm.name)
    other[3] = 7
    assert sl[3] == 7 and list(other) == ["howdy", b"HoWdY", -273.154, 7, None, True, 42]
    copied = pickle.loads(pickle.dumps(sl))
    assert copied[0] == "howdy"
    for each in (copied, other):
        each.shm.close()
    sl.shm.unlink()
    sl.shm.close()


def test_shared_memory_manager_removes_names_at_shutdown(sm):
    with managers.SharedMemoryManager() as smm:
        block = smm.SharedMemory(size=128)
        sl = smm.ShareableList(range(5))
        names = [block.name, sl.shm.name]
        SharedMemory(names[0]).close()
    for name in names:
        with pytest.raises(FileNotFoundError):
            SharedMemory(name)
    assert sl[4] == 4  # still held here
    block.close()
    sl.shm.close()
    smm2 = managers.SharedMemoryManager()
    with pytest.raises(ValueError):
        smm2.SharedMemory(size=9)  # not started


def test_no_resource_tracker_and_nothing_on_stderr(sm):
    code = textwrap.dedent(
        """
        from multiprocessing import resource_tracker
        from shmrc.managers import SharedMemoryManager
        from shmrc.shared_memory import SharedMemory, ShareableList

        smm = SharedMemoryManager()
        smm.start()
        sl = smm.ShareableList(range(10))
        smm.shutdown()
        block = SharedMemory(create=True, size=10)
        assert resource_tracker._resource_tracker._pid is None, "a resource tracker ran"
        sl.shm.close()
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    # The script's block (never unlinked) went with the script's exit: its name is
    # stale, and prune removes it (the manager may still be sweeping: retry).
    removed = []
    deadline = time.monotonic() + 10
    while not removed and time.monotonic() < deadline:
        removed = shared_memory.prune()
        time.sleep(0.01)
    assert len(removed) == 1 and removed[0].startswith("psm_")


def test_a_sigkilled_holder_frees_what_nobody_else_holds(sm, tmp_path):
    """100 blocks; the test attaches half of them; the holder is SIGKILLed mid-use.
    The other half go from /dev/shm (the manager's sweep); the attached ones stay,
    with their bytes, until the test closes them."""
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "shm_holder_scenario.py"), "shmrc", sm, "100"],
        stdout=subprocess.PIPE,
    )
    try:
        made = json.loads(child.stdout.readline())
        held = [SharedMemory(name) for name in made["names"][::2]]
        unheld_files = made["files"][1::2]
        assert all(dev_shm(f) for f in made["files"])
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        child.stdout.close()
    assert gone_within(unheld_files, 10), [f for f in unheld_files if dev_shm(f)]
    for i, block in enumerate(held):
        assert int.from_bytes(block.buf[:8], "little") == 2 * i
        assert dev_shm(made["files"][2 * i])
    held_files = made["files"][::2]
    for block in held:
        block.close()
    assert gone_within(held_files, 10)
    assert sorted(shared_memory.prune()) == sorted(made["names"])


def test_a_subclass_with_o_creat_alone_attaches_or_creates(sm):
    class AttachOrCreate(SharedMemory):
        _flags = os.O_CREAT | os.O_RDWR

    made = AttachOrCreate("either", size=32)  # nothing there: created
    made.buf[0] = 5
    again = AttachOrCreate("either", size=32)  # there: attached
    assert again.buf[0] == 5 and again.size == 32
    with pytest.raises(FileNotFoundError):
        AttachOrCreate("neither")  # nothing there and no size to create it with
    again.close()
    made.unlink()
    made.close()
