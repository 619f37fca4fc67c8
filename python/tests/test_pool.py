"""shmrc.ShmPool with real processes: a segment is reused once nobody holds it, never
while another process does (it is lent meanwhile, then idle), and a handle of its
earlier use is stale; shmrc.torch's pool=True recycles DataLoader batches."""
import multiprocessing as mp
import os

import pytest

import shmrc

from conftest import shm_names


def test_a_buffer_let_go_is_reused_and_a_held_one_is_not(ns):
    pool = shmrc.ShmPool(ns)
    a = pool.get(4096)
    b = pool.get(4096)
    assert a.name != b.name, "a is in use: another segment"
    name = a.name
    a.view()[:5] = b"hello"
    del a
    again = pool.get(4096)
    assert again.name == name
    assert bytes(again.view()[:5]) == b"hello", "a recycled buffer keeps its bytes"
    zeroed = pool.get(4096, zero=True)
    assert bytes(zeroed.view()) == bytes(4096)
    stats = pool.stats()
    assert (stats["created"], stats["recycled"], stats["in_use"]) == (3, 1, 3), stats
    del again, zeroed, b
    assert pool.stats()["idle"] == 3
    del pool
    assert shm_names(ns) == []


def _hold_then_release(queue, replies, release):
    # Every wait is bounded: a parent that fails early leaves no child waiting forever.
    buf = queue.get(timeout=30).attach()
    replies.put(bytes(buf.view()[:3]))
    release.wait(30)
    del buf
    replies.put("released")


def _start_holder():
    """A forked child that attaches the handle put on ``queue``, replies with its first
    three bytes, and releases it once ``release`` is set; returns (child, queue,
    replies, release)."""
    ctx = mp.get_context("fork")
    queue, replies, release = ctx.Queue(), ctx.Queue(), ctx.Event()
    # daemon: killed (by pid) when the test's process exits, should an assertion fail
    # before the child is released.
    child = ctx.Process(target=_hold_then_release, args=(queue, replies, release), daemon=True)
    child.start()
    return child, queue, replies, release


@pytest.mark.parametrize("strategy", ["file_system", "file_descriptor"])
def test_a_buffer_another_process_holds_is_lent_not_reused_and_its_old_handle_is_stale(
    ns, strategy
):
    child, queue, replies, release = _start_holder()
    pool = shmrc.ShmPool(ns, strategy=strategy)
    buf = pool.get(4096)
    assert (buf.strategy, buf.generation) == (strategy, 0)
    assert (buf.name is None) == (strategy == "file_descriptor")
    buf.view()[:3] = b"one"
    handle = buf.share()
    # The same handle kept (its bytes, and a duplicate of a memfd): replayed after the
    # reuse.
    replayed = (handle._bytes, os.dup(handle._fd) if handle._fd is not None else None)
    queue.put(handle)
    assert replies.get(timeout=30) == b"one"
    del buf, handle
    stats = pool.stats()
    assert (stats["lent"], stats["idle"], stats["in_use"]) == (1, 0, 0), stats
    held_elsewhere = pool.get(4096)
    assert held_elsewhere.generation == 0, "the child still holds it: a new one"
    release.set()
    assert replies.get(timeout=30) == "released"
    child.join(30)
    assert child.exitcode == 0
    stats = pool.stats()
    assert (stats["lent"], stats["idle"], stats["in_use"]) == (0, 1, 1), stats
    reused = pool.get(4096)
    assert reused.generation == 1, "the one the child let go of"
    assert bytes(reused.view()[:3]) == b"one"
    with pytest.raises(shmrc.StaleError):
        shmrc.ShareHandle._of(strategy, 4096, replayed[0], fd=replayed[1]).attach()
    stats = pool.stats()
    assert (stats["created"], stats["recycled"]) == (2, 1), stats
    del reused, held_elsewhere, pool
    assert shm_names(ns) == []


def test_the_default_limits_keep_64_idle_buffers(ns):
    pool = shmrc.ShmPool(ns)
    bufs = [pool.get(4096) for _ in range(65)]
    del bufs
    assert pool.trim() == 1, "65 idle: the one handed out first goes"
    stats = pool.stats()
    assert (stats["idle"], stats["given_back"]) == (64, 1), stats
    del pool
    assert shm_names(ns) == []


def test_limits_and_strategies_are_checked(ns):
    import shmrc.torch

    with pytest.raises(shmrc.UnknownStrategyError):
        shmrc.ShmPool(ns, strategy="carrier pigeon")
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc.ShmPool(ns, idle_timeout=-1.0)
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc.ShmPool(ns).get(0)
    with pytest.raises(shmrc.UnknownStrategyError):
        shmrc.torch.install("carrier pigeon", ns, pool=True)
    assert not shmrc.torch.installed()


def test_an_unsent_file_descriptor_handle_gives_its_reference_back():
    pool = shmrc.ShmPool(strategy="file_descriptor")
    buf = pool.get(64)
    handle = buf.share()
    del buf
    assert pool.stats()["lent"] == 1, "the handle's in-flight reference"
    del handle
    assert pool.stats()["idle"] == 1
    assert pool.get(64).generation == 1
    # What `ShareHandle.__del__` calls, with what it must refuse (and still close).
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc._shmrc.Buf.drop_fd(b"", -1)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(shmrc.MalformedError):
        shmrc._shmrc.Buf.drop_fd(b"not a handle", r)
    with pytest.raises(OSError):
        os.close(r)  # already closed by drop_fd


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["file_system", "file_descriptor"])
def test_dataloader_batches_are_recycled_with_pool(ns, strategy):
    torch = pytest.importorskip("torch")
    import shmrc.torch
    from torch.utils.data import DataLoader, Dataset

    class Items(Dataset):
        def __len__(self):
            return 1024

        def __getitem__(self, i):
            return torch.full((1024,), float(i)), i

    shmrc.torch.install(strategy, ns, pool=True)
    try:
        generations, seen = [], []
        for features, index in DataLoader(Items(), batch_size=16, num_workers=2):
            buf = shmrc.torch.buffer_of(features.untyped_storage())
            assert buf is not None and buf.strategy == strategy
            if strategy == "file_system":
                assert buf.name.startswith(ns + ".")
            assert torch.equal(features[:, 0], index.to(features.dtype))
            assert torch.equal(features[:, -1], index.to(features.dtype))
            generations.append(buf.generation)
            seen.extend(index.tolist())
            del buf, features, index
        assert sorted(seen) == list(range(1024))
        # 64 batches; each worker keeps a few in flight, the rest reuse let-go ones.
        reused = sum(1 for g in generations if g > 0)
        assert reused > len(generations) // 2, "%d of %d batches in a recycled buffer" % (
            reused,
            len(generations),
        )
    finally:
        shmrc.torch.uninstall()
