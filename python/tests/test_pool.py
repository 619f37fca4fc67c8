"""shmrc.ShmPool with real processes: a segment is reused once nobody holds it, never
while another process does (it is lent meanwhile, then idle), and a handle of its
earlier use is stale; shmrc.torch's pool=True recycles DataLoader batches."""
import multiprocessing as mp

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


def test_a_buffer_another_process_holds_is_lent_not_reused_and_its_old_handle_is_stale(ns):
    ctx = mp.get_context("fork")
    queue, replies, release = ctx.Queue(), ctx.Queue(), ctx.Event()
    # daemon: killed (by pid) when the test's process exits, should an assertion fail
    # before the child is released.
    child = ctx.Process(target=_hold_then_release, args=(queue, replies, release), daemon=True)
    child.start()
    pool = shmrc.ShmPool(ns)
    buf = pool.get(4096)
    buf.view()[:3] = b"one"
    name = buf.name
    handle = buf.share()
    replayed = handle._bytes  # the same handle bytes, kept: replayed after the reuse
    queue.put(handle)
    assert replies.get(timeout=30) == b"one"
    del buf, handle
    stats = pool.stats()
    assert (stats["lent"], stats["idle"], stats["in_use"]) == (1, 0, 0), stats
    held_elsewhere = pool.get(4096)
    assert held_elsewhere.name != name, "the child still holds it: a new segment"
    release.set()
    assert replies.get(timeout=30) == "released"
    child.join(30)
    assert child.exitcode == 0
    stats = pool.stats()
    assert (stats["lent"], stats["idle"], stats["in_use"]) == (0, 1, 1), stats
    reused = pool.get(4096)
    assert reused.name == name
    with pytest.raises(shmrc.StaleError):
        shmrc.ShareHandle("file_system", 4096, replayed).attach()
    del reused, held_elsewhere, pool


def test_the_default_limits_keep_64_idle_buffers(ns):
    pool = shmrc.ShmPool(ns)
    bufs = [pool.get(4096) for _ in range(65)]
    del bufs
    assert pool.trim() == 1, "65 idle: the one handed out first goes"
    stats = pool.stats()
    assert (stats["idle"], stats["given_back"]) == (64, 1), stats
    del pool
    assert shm_names(ns) == []


def test_a_pool_is_file_system_only_and_limits_are_checked(ns):
    import shmrc.torch

    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc._shmrc.Pool("file_descriptor", ns, 16, 1 << 30, 10.0)
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc.ShmPool(ns, idle_timeout=-1.0)
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc.ShmPool(ns).get(0)
    with pytest.raises(shmrc.InvalidArgumentError):
        shmrc.torch.install("file_descriptor", ns, pool=True)
    assert not shmrc.torch.installed()


@pytest.mark.timeout(120)
def test_dataloader_batches_are_recycled_with_pool(ns):
    torch = pytest.importorskip("torch")
    import shmrc.torch
    from torch.utils.data import DataLoader, Dataset

    class Items(Dataset):
        def __len__(self):
            return 1024

        def __getitem__(self, i):
            return torch.full((1024,), float(i)), i

    shmrc.torch.install("file_system", ns, pool=True)
    try:
        names, seen = [], []
        for features, index in DataLoader(Items(), batch_size=16, num_workers=2):
            buf = shmrc.torch.buffer_of(features.untyped_storage())
            assert buf is not None and buf.name.startswith(ns + ".")
            assert torch.equal(features[:, 0], index.to(features.dtype))
            assert torch.equal(features[:, -1], index.to(features.dtype))
            names.append(buf.name)
            seen.extend(index.tolist())
            del buf, features, index
        assert sorted(seen) == list(range(1024))
        # 64 batches; each worker keeps a few in flight, the rest reuse let-go ones.
        assert len(set(names)) < len(names) // 2, "%d segments for %d batches" % (
            len(set(names)),
            len(names),
        )
    finally:
        shmrc.torch.uninstall()
