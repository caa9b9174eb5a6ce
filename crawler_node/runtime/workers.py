"""Worker processes driven straight from the event loop (and a thread twin for tests and
small machines).

`concurrent.futures.ProcessPoolExecutor` moves every call through a wakeup pipe and two
helper threads, a queue feeder and a result manager. In a process whose event loop is busy
fetching, each of those hops first waits for the GIL, so a round trip took milliseconds
while the work itself took a fraction of one, and the parse stage, not the CPU, set the
crawl's pace. A `ProcessWorker` is one child (`python -m crawler_node.runtime.worker_main`) fed over
its stdin and stdout with length-prefixed pickle frames: the event loop writes a request and
reads the answer itself, with no thread in between, and a worker may hold several requests
(the next batch is already waiting when one finishes).

A worker has a *context*: `init(*init_args)` runs once in the worker and its result is passed
as the first argument of every call, `fn(context, *args)`. Calls are answered in order.
Functions are pickled by reference, so they must be module-level.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import fcntl
import pickle
import signal
import struct
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")

FRAME_HEADER = struct.Struct("!Q")  # the length of the pickle that follows
PROTOCOL = pickle.HIGHEST_PROTOCOL


class WorkerDied(RuntimeError):
    """The worker process is gone; calls waiting on it will never be answered."""


PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged process (pipe-max-size)


def _widen_pipe(stream: asyncio.StreamWriter) -> None:
    """A batch of pages is often larger than a pipe's default 64 KiB: widened, the loop hands
    it over in one write instead of many partial ones."""
    try:
        fcntl.fcntl(stream.transport.get_extra_info("pipe").fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass  # not Linux, or over the limit: the default works, only with more writes


class _Pieces(list[bytes]):
    """A file for `pickle.Pickler`: what it writes, kept as the pieces it wrote."""

    write = list.append


def encode(message: Any) -> list[bytes]:
    """`message` as a frame (its length, then its pickle) in pieces of ~64 KiB, to be written
    in order (`writelines`). A Pickler given a file hands it each ~64 KiB frame of protocol 4
    as it fills, so a batch of pages is never one buffer: `pickle.dumps` of a store batch
    (~70 pages, ~1 MB) grew a buffer past glibc's mmap threshold, reallocated and faulted it
    in page by page, then the length was prepended by copying it all once more; in pieces it
    costs half (8 against 16 µs a page of PostgreSQL's documentation, in isolation)."""
    pieces = _Pieces()
    pieces.append(b"")
    pickle.Pickler(pieces, protocol=PROTOCOL).dump(message)
    pieces[0] = FRAME_HEADER.pack(sum(map(len, pieces)))
    return pieces


class ProcessWorker:
    def __init__(self, name: str, init: Callable[..., Any] | None = None, init_args: tuple[Any, ...] = (),
                 nice: int = 0) -> None:
        self.name = name
        self.nice = nice  # added to the child's niceness: a CPU worker yields to the event loop
        self._init = (init, init_args)
        self._process: asyncio.subprocess.Process | None = None
        self._waiting: collections.deque[asyncio.Future[tuple[bool, Any]]] = collections.deque()
        self._reader: asyncio.Task[None] | None = None
        self._dead: WorkerDied | None = None
        self._answered_at = time.monotonic()  # the last answer, or the first request after idling
        self._killed_because = ""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler_node.runtime.worker_main", self.name, str(self.nice),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        assert self._process.stdin is not None  # a PIPE, as asked
        _widen_pipe(self._process.stdin)
        self._reader = asyncio.get_running_loop().create_task(self._read_answers(), name=f"worker:{self.name}")
        # The node's import path first (as multiprocessing's spawn does), then the context is
        # built, or its error surfaces here.
        await self._send((sys.path, pickle.dumps(self._init, protocol=PROTOCOL)))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._send((fn, args))

    async def _send(self, request: tuple[Any, ...]) -> Any:
        if self._dead is not None:
            raise self._dead
        assert self._process is not None and self._process.stdin is not None, "start() the worker first"
        stdin = self._process.stdin
        frame = encode(request)  # first: a request that cannot be pickled is never half-sent
        future: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        # Queued before the first await: answers come back in the order requests were written.
        if not self._waiting:
            self._answered_at = time.monotonic()  # the wait for an answer starts now
        self._waiting.append(future)
        # A worker that died broke its pipe, and the loop may have closed it before the reader
        # saw the exit: then the request is not written (uvloop raises RuntimeError on a write
        # to a closed pipe) and the reader fails the future, as it fails every waiting one.
        if not stdin.is_closing():
            stdin.writelines(frame)  # no await since the check: the pipe is still open
            try:
                await stdin.drain()  # the pipe's flow control: a slow worker slows us
            except ConnectionError:
                pass  # the pipe broke meanwhile: the reader sees the exit and fails the future
        ok, value = await future
        if not ok:
            raise value
        return value

    async def _read_answers(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None  # started by start(), stdout a PIPE
        stdout = process.stdout
        try:
            while True:
                (size,) = FRAME_HEADER.unpack(await stdout.readexactly(FRAME_HEADER.size))
                answer = pickle.loads(await stdout.readexactly(size))
                future = self._waiting.popleft()
                self._answered_at = time.monotonic()
                if not future.done():
                    future.set_result(answer)
        except asyncio.IncompleteReadError:
            code = await process.wait()
            self._dead = WorkerDied(f"worker {self.name} (pid {process.pid}) {exit_cause(code)}"
                                    f"{self._killed_because}")
        except BaseException as exc:  # noqa: BLE001 - any failure here leaves the callers hanging
            self._dead = WorkerDied(f"worker {self.name}: lost its answers ({exc!r})")
            if not isinstance(exc, Exception):
                raise
        finally:
            dead = self._dead or WorkerDied(f"worker {self.name} stopped")
            self._dead = dead
            while self._waiting:
                future = self._waiting.popleft()
                if not future.done():
                    future.set_exception(dead)

    @property
    def dead(self) -> bool:
        return self._dead is not None

    def unanswered_for(self, now: float) -> float:
        """Seconds the oldest request has waited without any answer coming back (0 when none
        waits): a worker that answers nothing for long is stopped or stuck."""
        return now - self._answered_at if self._waiting else 0.0

    async def ping(self) -> None:
        """A request that does nothing: an idle worker that is stopped never answers it."""
        await self.call(_ping)

    def kill(self, because: str) -> None:
        """SIGKILL the worker (a stopped one too): its reader then fails every waiting call
        with WorkerDied, whose message ends with ``because``."""
        if self._process is not None and self._process.returncode is None and self._dead is None:
            self._killed_because = f"; killed by the node: {because}"
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def close(self, finalize: Callable[[Any], Any] | None = None, *, timeout_s: float = 30.0) -> None:
        """Run `finalize(context)` in the worker if given, then let it exit (end of input)."""
        if self._process is None:
            return
        try:
            if finalize is not None and self._dead is None:
                await self.call(finalize)
        finally:
            if self._process.stdin is not None and not self._process.stdin.is_closing():
                self._process.stdin.close()
            try:
                await asyncio.wait_for(self._process.wait(), timeout_s)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
            if self._reader is not None:
                await asyncio.gather(self._reader, return_exceptions=True)


def _ping(context: Any) -> None:
    return None


def exit_cause(code: int) -> str:
    """How a worker process ended, in words: "was killed by SIGKILL", "exited with 1"."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def process_state(pid: int | None) -> str:
    """The kernel's word for a process's state (Linux /proc): "stopped" for a SIGSTOPped one."""
    if pid is None:
        return "unknown"
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "unknown"
    return {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped (traced)",
            "Z": "a zombie"}.get(state, state)


class SyncWorker:
    """A dedicated thread for one synchronous component (SQLite, files): the event loop never
    waits on the disk, and the component never sees two threads."""

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class ThreadWorker:
    """The ProcessWorker contract on one thread of this process (no pickling, shares the GIL)."""

    def __init__(self, name: str, init: Callable[..., Any] | None = None, init_args: tuple[Any, ...] = (),
                 nice: int = 0) -> None:
        self.name = name  # `nice` is ignored: a thread shares the event loop's priority
        self._init = (init, init_args)
        self._thread = SyncWorker(name)
        self._context: Any = None
        self.pid: int | None = None  # no process of its own

    async def start(self) -> None:
        init, init_args = self._init
        if init is not None:
            self._context = await self._thread.call(init, *init_args)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._thread.call(fn, self._context, *args)

    dead = False  # a thread does not die alone; it has no liveness of its own to watch

    def unanswered_for(self, now: float) -> float:
        return 0.0

    async def ping(self) -> None:
        return None

    def kill(self, because: str) -> None:
        return None

    async def close(self, finalize: Callable[[Any], Any] | None = None, *, timeout_s: float = 30.0) -> None:
        try:
            if finalize is not None:
                await self.call(finalize)
        finally:
            self._thread.shutdown()


def make_worker(name: str, *, in_process: bool, init: Callable[..., Any] | None = None,
                init_args: tuple[Any, ...] = (), nice: int = 0) -> ProcessWorker | ThreadWorker:
    cls = ProcessWorker if in_process else ThreadWorker
    return cls(name, init, init_args, nice)
