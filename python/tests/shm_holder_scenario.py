"""A process that holds COUNT shared memory blocks of 4 KiB and keeps writing to them
until it is killed: ``shmrc`` (shmrc.shared_memory in namespace NS) or ``stdlib``
(multiprocessing.shared_memory). Block i starts with i as 8 little-endian bytes; byte
8 of each is a counter it keeps bumping (the blocks are in use when the kill comes).
Prints one JSON line once all are made: {"names": [...], "files": [...]}, the names
that attach them and their files in /dev/shm. Used by test_shared_memory.py and
python/bench/bench_shared_memory.py (the crash table of docs/PYTHON.md)."""
import json
import os
import sys
import time

MODE, NS, COUNT = sys.argv[1], sys.argv[2], int(sys.argv[3])

if MODE == "shmrc":
    os.environ["SHMRC_SHARED_MEMORY_NAMESPACE"] = NS
    from shmrc.shared_memory import SharedMemory
else:
    from multiprocessing.shared_memory import SharedMemory

blocks = [SharedMemory(create=True, size=4096) for _ in range(COUNT)]
for i, block in enumerate(blocks):
    block.buf[:8] = i.to_bytes(8, "little")
if MODE == "shmrc":
    files = [block._raw.name for block in blocks]
else:
    files = [block.name for block in blocks]
print(json.dumps({"names": [b.name for b in blocks], "files": files}), flush=True)
while True:
    for block in blocks:
        block.buf[8] = (block.buf[8] + 1) % 256
    time.sleep(0.001)
