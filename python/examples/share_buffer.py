"""A shmrc buffer shared with a child process through a multiprocessing queue: the
child writes into it, the parent reads what it wrote. Run: python share_buffer.py
(CI runs it, and checks it with mypy --strict)."""
import multiprocessing as mp
from multiprocessing.queues import Queue

import shmrc


def child(inbox: "Queue[shmrc.ShareHandle]", replies: "Queue[str]") -> None:
    buf = shmrc.ShmBuf.attach(inbox.get())
    buf.view()[0:5] = b"hello"
    replies.put("written")


def main() -> None:
    ctx = mp.get_context("spawn")
    inbox: "Queue[shmrc.ShareHandle]" = ctx.Queue()
    replies: "Queue[str]" = ctx.Queue()
    worker = ctx.Process(target=child, args=(inbox, replies))
    worker.start()
    strategy: shmrc.Strategy = "file_system"
    buf = shmrc.ShmBuf(4096, strategy)
    inbox.put(buf.share())
    assert replies.get(timeout=60) == "written"
    worker.join(30)
    print("read back:", bytes(buf.view()[0:5]).decode(), "| shmrc", shmrc.__version__)
    try:
        shmrc.ShmPool(max_idle_buffers=-1)
    except ValueError as e:  # shmrc.InvalidArgumentError is a ValueError
        print("refused at once:", e)


if __name__ == "__main__":
    main()
