"""The child side of `crawler_node.runtime.workers.ProcessWorker`:

    python -m crawler_node.runtime.worker_main NAME

Reads length-prefixed pickle frames from stdin and answers each on stdout, in order. The first
frame is `(sys.path, pickled (init, init_args))`: the node's import path comes first, as with
multiprocessing's spawn, so that what the node can import the worker can too. The result of
`init` is the context handed to every later `(fn, args)` as `fn(context, *args)`. The answer
is `(True, result)` or `(False, exception)`. End of input (the node closed the pipe, or died)
ends the worker, so it never outlives its node.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, BinaryIO

from crawler_node.runtime.malloctune import keep_heap_for_reuse
from crawler_node.runtime.workers import FRAME_HEADER, encode

# Frames up to this size are read into one buffer, kept for the next (a batch of pages is
# 70 KB to a few MB): a fresh bytes object per frame came from a fresh mmap past glibc's
# threshold, zeroed page by page. Reading and unpickling a store batch of ~70 real pages
# (~1.3 MB) took 16-22 µs a page of the worker's CPU so, 12 µs into the kept buffer. Larger
# frames (big bodies) get a buffer of their own, as before: the kept one stays this small.
KEPT_FRAME_BYTES = 8 << 20


class _FrameReader:
    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._buffer = bytearray()

    def read(self, size: int) -> bytes | memoryview | None:
        """The next `size` bytes, or None at the end of input. A memoryview is valid until the
        next read (`pickle.loads` copies what it keeps)."""
        if size > KEPT_FRAME_BYTES:
            data = self._stream.read(size)
            return data if len(data) == size else None
        if len(self._buffer) < size:
            self._buffer = bytearray(size)
        view = memoryview(self._buffer)[:size]
        got = 0
        while got < size:
            count = self._stream.readinto(view[got:])  # type: ignore[attr-defined]  # a buffered binary stream
            if not count:
                return None
            got += count
        return view


def _answer(request: bytes | memoryview, context: Any = None, *, first: bool = False) -> tuple[bool, Any]:
    try:
        fn, args = pickle.loads(request)
        if first:
            return True, fn(*args) if fn is not None else None
        return True, fn(context, *args)
    except Exception as exc:  # noqa: BLE001 - the caller decides what an error means
        return False, exc


def _encoded(answer: tuple[bool, Any]) -> list[bytes]:
    try:
        return encode(answer)
    except Exception as exc:  # noqa: BLE001 - an unpicklable result or exception
        return encode((False, RuntimeError(f"unpicklable answer: {type(exc).__name__}: {exc}")))


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    context: Any = None
    first = True
    frames = _FrameReader(requests)
    while True:
        header = requests.read(FRAME_HEADER.size)
        if len(header) < FRAME_HEADER.size:
            return
        (size,) = FRAME_HEADER.unpack(header)
        body = frames.read(size)
        if body is None:
            return
        if first:
            first = False
            path, body = pickle.loads(body)
            sys.path[:] = path
            ok, value = _answer(body, first=True)
            context = value if ok else None
            answer = (ok, None if ok else value)
        else:
            answer = _answer(body, context)
        answers.writelines(_encoded(answer))
        answers.flush()


def main() -> int:
    # The node handles Ctrl-C and SIGTERM and then closes our input: a worker that died on
    # the same signal could not finish the work (the store's last batch) the node waits for.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if len(sys.argv) > 2 and int(sys.argv[2]) > 0:
        os.nice(int(sys.argv[2]))  # the node asked its CPU workers to yield to its event loop
    keep_heap_for_reuse()  # batch after batch, the same memory: no page faults to get it back
    # Answers go out on the original stdout; anything else printed goes to stderr instead
    # of corrupting the frames.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
