"""shmrc.ShmBuf, handles, strategies, ls/sweep, errors and the manager, with real
processes."""
import errno
import multiprocessing as mp
import os
import pickle
import resource

import numpy as np
import pytest

import shmrc

STRATEGIES = ["file_descriptor", "file_system"]


def test_strategies_are_torchs_names():
    torch_mp = pytest.importorskip("torch.multiprocessing")
    assert shmrc.get_all_sharing_strategies() == set(torch_mp.get_all_sharing_strategies())
    before = shmrc.get_sharing_strategy()
    try:
        shmrc.set_sharing_strategy("file_system")
        assert shmrc.get_sharing_strategy() == "file_system"
        with pytest.raises(shmrc.UnknownStrategyError, match="file_descriptor, file_system"):
            shmrc.set_sharing_strategy("shm")
    finally:
        shmrc.set_sharing_strategy(before)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_buffer_protocol_is_writable_and_numpy_is_zero_copy(ns, strategy):
    buf = shmrc.ShmBuf(4096, strategy, ns)
    assert len(buf) == 4096 and buf.strategy == strategy
    view = buf.view()
    assert not view.readonly and view.nbytes == 4096
    view[0:3] = b"abc"
    array = np.frombuffer(buf, dtype=np.uint8)
    assert bytes(array[:3]) == b"abc"
    array[3] = 100  # numpy writes the very same memory
    assert view[3] == 100
    assert array.ctypes.data == buf.address
    del view, array, buf


def _attach_and_reply(queue, replies):
    handle = queue.get()
    buf = shmrc.ShmBuf.attach(handle)
    replies.put((bytes(buf.view()[:5]), len(buf)))
    buf.view()[0:5] = b"HELLO"
    replies.put("written")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_handle_pickles_through_a_queue_to_another_process(ns, strategy, method):
    ctx = mp.get_context(method)
    queue, replies = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_attach_and_reply, args=(queue, replies))
    child.start()
    buf = shmrc.ShmBuf(1 << 20, strategy, ns)
    buf.view()[0:5] = b"hello"
    queue.put(buf.share())
    assert replies.get(timeout=30) == (b"hello", 1 << 20)
    assert replies.get(timeout=30) == "written"
    assert bytes(buf.view()[0:5]) == b"HELLO"
    child.join(30)
    assert child.exitcode == 0
    del buf


def _read_buf(queue, replies):
    buf = queue.get()  # a ShmBuf, unpickled: attached here
    replies.put((type(buf).__name__, isinstance(buf, shmrc.ShmBuf), bytes(buf.view()[:4])))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_shmbuf_itself_pickles_as_share_and_attach(ns, strategy):
    ctx = mp.get_context("fork")
    queue, replies = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_read_buf, args=(queue, replies))
    child.start()
    buf = shmrc.ShmBuf(64, strategy, ns)
    buf.view()[0:4] = b"pick"
    queue.put(buf)
    assert replies.get(timeout=30) == ("ShmBuf", True, b"pick")
    child.join(30)
    assert child.exitcode == 0
    del buf


def test_a_handle_attaches_once(ns):
    buf = shmrc.ShmBuf(64, "file_system", ns)
    handle = buf.share()
    again = handle.attach()
    assert again.address == buf.address
    with pytest.raises(shmrc.InvalidArgumentError, match="already attached"):
        handle.attach()
    del again, buf


def _share_and_exit(conn, ns):
    buf = shmrc.ShmBuf(64, "file_system", ns)
    conn.send_bytes(pickle.dumps(buf.share()))
    conn.close()


@pytest.mark.timeout(60)
def test_a_handle_whose_sender_died_is_gone(ns):
    ctx = mp.get_context("fork")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_share_and_exit, args=(theirs, ns))
    child.start()
    data = ours.recv_bytes()
    child.join(30)
    shmrc.sweep(ns)  # the manager does it too; make it certain before attaching
    with pytest.raises(shmrc.GoneError):
        shmrc.ShmBuf.attach(pickle.loads(data))


def test_ls_and_sweep_are_the_cli_json(ns):
    buf = shmrc.ShmBuf(4096, "file_system", ns)
    listing = shmrc.ls(ns)
    assert set(listing) == {"manager", "namespaces"}
    (segment,) = listing["namespaces"][0]["segments"]
    assert segment["name"] == buf.name
    assert segment["size"] == 4096
    assert segment["holders"]["live"] == 1
    assert segment["creator"] == {"pid": os.getpid(), "alive": True}
    assert segment["action"] == "kept"
    swept = shmrc.sweep(ns)
    assert (swept["reclaimed"], swept["unlinked"], swept["dry_run"]) == (0, 0, False)
    del buf
    assert shmrc.ls(ns)["namespaces"][0]["segments"] == []


def test_the_manager_runs_from_the_package(ns):
    buf = shmrc.ShmBuf(64, "file_system", ns)
    status = shmrc.manager_status()
    with open("/proc/%d/cmdline" % status["pid"], "rb") as f:
        cmdline = f.read().split(b"\0")
    assert any(b"shmrc._manager" in part for part in cmdline), cmdline
    assert b"--foreground" in cmdline
    assert status["clients"] >= 1
    del buf


def test_bad_input_raises_by_cause(ns):
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc.ShmBuf(0, "file_system", ns)
    with pytest.raises(shmrc.UnknownStrategyError):
        shmrc.ShmBuf(64, "shm", ns)
    with pytest.raises(shmrc.MalformedError):
        shmrc._shmrc.Buf.attach_bytes(b"not a handle")
    with pytest.raises(shmrc.BadNamespaceError):
        shmrc.ShmBuf(64, "file_system", "no/slash")
    assert issubclass(shmrc.NoSpaceError, shmrc.ShmrcError)


def _receive_at_fd_limit(queue, replies):
    handle = queue.get()
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    hoard = []
    try:
        while True:
            hoard.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    try:
        shmrc.ShmBuf.attach(handle)
        replies.put("attached")
    except shmrc.TooManyFdsError as e:
        replies.put("TooManyFdsError: errno %s: %s" % (e.errno, e))
    except Exception as e:  # noqa: BLE001 (reported to the test)
        replies.put("%s: %s" % (type(e).__name__, e))


@pytest.mark.timeout(60)
def test_a_receiver_at_its_fd_limit_gets_a_clear_error(ns):
    ctx = mp.get_context("fork")
    queue, replies = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_receive_at_fd_limit, args=(queue, replies))
    child.start()
    buf = shmrc.ShmBuf(4096, "file_descriptor", ns)
    queue.put(buf.share())
    said = replies.get(timeout=30)
    child.join(30)
    assert said.startswith("TooManyFdsError: errno %d" % errno.EMFILE), said
    assert "open-file limit" in said and "ancdata" not in said.split("(")[0]


NO_SPACE = """
import shmrc
try:
    shmrc.ShmBuf(8 << 20, "file_system", %r)
except OSError as e:  # NoSpaceError is an OSError with errno ENOSPC
    print(type(e).__name__ + ": errno " + str(e.errno) + ": " + str(e))
"""


@pytest.mark.timeout(60)
def test_a_full_dev_shm_raises_no_space(ns):
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        if os.environ.get("SHMRC_REQUIRE_ROOT") == "1":
            pytest.fail("needs root and unshare(1) for a mount namespace (SHMRC_REQUIRE_ROOT=1)")
        pytest.skip("needs root and unshare(1) for a mount namespace")
    script = "mount -t tmpfs -o size=1M tmpfs /dev/shm && exec %s -c %s" % (
        sys.executable,
        _quote(NO_SPACE % ns),
    )
    env = dict(os.environ, SHMRC_MANAGER="off")
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("NoSpaceError: errno %d" % errno.ENOSPC), (out.stdout, out.stderr)


def _quote(text):
    import shlex

    return shlex.quote(text)
