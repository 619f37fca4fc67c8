"""Each test gets a namespace of its own and must leave nothing of it in /dev/shm."""
import os
import time

import pytest

import shmrc


def shm_names(prefix):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix + "."))


@pytest.fixture
def ns(request):
    import zlib

    tag = zlib.crc32(request.node.nodeid.encode()) & 0xFFFFFF
    prefix = "shmrc-py-%06x-%d" % (tag, os.getpid())
    yield prefix
    deadline = time.monotonic() + 3
    while shm_names(prefix) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = shm_names(prefix)
    if left:
        shmrc.sweep(prefix)
    assert not left, "left in /dev/shm: %s" % left
