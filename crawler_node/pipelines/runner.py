"""Runs the user's pipelines on one page, each within a time budget, and serialises their items.

Items leave the parser worker as JSON lines (str), serialised here once: the store writes
them as they are. A pipeline's output on a page is taken whole or not at all: if it raises,
runs out of time, or hands back anything that cannot be written (not a dict, not JSON,
too big, too many), it contributes neither items nor links for that page, the fault is
reported in `PageOutput`, and the other pipelines run as if it were not there.

The budget, per pipeline per page:

- In the main thread of a process (the parser worker process), a one-shot
  ``ITIMER_REAL`` timer raises `_BudgetExceeded` inside the pipeline when it runs out. It
  derives from BaseException, so a pipeline's ``except Exception`` does not swallow it; a
  pipeline that swallows it anyway (a bare ``except:``) is stopped again every
  `_RESTOP_S` and its output discarded. A signal is only handled between Python bytecodes:
  a pipeline inside one long C call (a regex, a parse) is stopped when that call returns.
  The previous SIGALRM handler and timer are restored afterwards (an outer timer that came
  due meanwhile fires right after).
- Off the main thread (a node running its parser on a thread), signals cannot be used: the
  pipeline runs to its end, and if it took longer than the budget its output is discarded
  and it is reported as timed out. A pipeline that never returns blocks that thread.

The runner counts nothing itself; the caller counts from `PageOutput`.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import FrameType

from crawler_node.pipelines import Page
from crawler_node.pipelines.loader import NamedPipeline

# A pipeline that swallowed the stop (bare except) is stopped again this long after.
_RESTOP_S = 0.05
# The least delay an outer timer that came due meanwhile is re-armed with (0 would disarm it).
_MIN_TIMER_S = 1e-6


@dataclass(slots=True)
class PageOutput:
    """What the pipelines made of one page. Plain lists of str: it is pickled to the node."""

    items: list[str] = field(default_factory=list)  # one JSON document per item, no newline
    links: list[str] = field(default_factory=list)  # what they followed, absolute, each once
    errors: list[tuple[str, str]] = field(default_factory=list)  # (pipeline name, "ExcType: message")
    timed_out: list[str] = field(default_factory=list)  # names of pipelines stopped at the budget


class _BudgetExceeded(BaseException):
    """Raised inside a pipeline at its budget. A BaseException, so ``except Exception`` in
    the pipeline's code lets it through."""


class _ItemFault(Exception):
    """An item the store cannot take. Its text is the whole report, "ExcType: message"."""


@dataclass(slots=True)
class _Produced:
    items: list[str]
    links: list[str]


@dataclass(slots=True)
class _Result:
    """One pipeline on one page: what it produced, or why it produced nothing."""

    produced: _Produced | None = None
    error: str | None = None  # "ExcType: message"
    timed_out: bool = False


class _Alarm:
    """The SIGALRM handler of one pipeline call: raises the stop while `armed`; once the
    call is over it only records a late signal (see `PipelineRunner._run_with_alarm`)."""

    __slots__ = ("armed", "fired")

    def __init__(self) -> None:
        self.armed = True
        self.fired = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            self.fired = True
            signal.setitimer(signal.ITIMER_REAL, _RESTOP_S)  # again, if the pipeline swallows this one
            raise _BudgetExceeded


class PipelineRunner:
    """The pipelines of a parser worker; `run` takes one page. Limits are per pipeline per page."""

    def __init__(
        self,
        pipelines: list[NamedPipeline],
        budget_s: float,
        max_items_per_page: int = 1000,
        max_item_bytes: int = 1_000_000,
    ) -> None:
        if not budget_s > 0:
            raise ValueError(f"budget_s must be > 0, got {budget_s}")
        if max_items_per_page < 1:
            raise ValueError(f"max_items_per_page must be >= 1, got {max_items_per_page}")
        if max_item_bytes < 1:
            raise ValueError(f"max_item_bytes must be >= 1, got {max_item_bytes}")
        self.pipelines = list(pipelines)
        self.budget_s = budget_s
        self.max_items_per_page = max_items_per_page  # per pipeline
        self.max_item_bytes = max_item_bytes  # of the item's JSON line, UTF-8

    def run(self, page: Page) -> PageOutput:
        """Every pipeline on `page`, in order (see the module docstring for the budget)."""
        output = PageOutput()
        followed: dict[str, None] = {}  # insertion-ordered: the links in the order followed, once
        run_one = self._run_with_alarm if _can_use_alarm() else self._run_and_time
        for named in self.pipelines:
            result = run_one(named, page.copy())
            if result.timed_out:
                output.timed_out.append(named.name)
            elif result.error is not None:
                output.errors.append((named.name, result.error))
            elif result.produced is not None:
                output.items.extend(result.produced.items)
                followed.update(dict.fromkeys(result.produced.links))
        output.links = list(followed)
        return output

    def _run_with_alarm(self, named: NamedPipeline, page: Page) -> _Result:
        """In the main thread: the pipeline stopped by SIGALRM at the budget."""
        alarm = _Alarm()
        # Read before our handler goes in: a signal handled from then on may be ours.
        previous_handler = signal.getsignal(signal.SIGALRM)
        previous_delay, previous_interval = signal.getitimer(signal.ITIMER_REAL)
        started = time.monotonic()
        result = _Result()
        try:
            try:
                signal.signal(signal.SIGALRM, alarm)
                signal.setitimer(signal.ITIMER_REAL, self.budget_s)
                result.produced = self._produce(named, page)
            finally:
                # The hazard: the stop must not escape from here, and no alarm may come after
                # `run` returns. `armed = False` comes first, with nothing before it where a
                # signal handler could run: from then on the handler only records a signal.
                # Then the timer is disarmed, and signal.signal() below runs any signal
                # still pending (into the disarmed handler) before it swaps the handlers back.
                alarm.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _BudgetExceeded:
            pass
        except Exception as exc:
            result.error = _describe(exc)
        finally:
            signal.signal(signal.SIGALRM, previous_handler)
            if previous_delay > 0:  # an outer timer that came due meanwhile fires right away
                remaining = previous_delay - (time.monotonic() - started)
                signal.setitimer(signal.ITIMER_REAL, max(remaining, _MIN_TIMER_S), previous_interval)
        # Stopped (whatever it raised on the way out), or swallowed the stop and returned late:
        # either way its output is not whole.
        if alarm.fired or time.monotonic() - started > self.budget_s:
            return _Result(timed_out=True)
        return result

    def _run_and_time(self, named: NamedPipeline, page: Page) -> _Result:
        """Off the main thread: no signals, so no stopping; late output is discarded."""
        started = time.monotonic()
        try:
            produced = self._produce(named, page)
        except Exception as exc:
            return _Result(error=_describe(exc))
        if time.monotonic() - started > self.budget_s:
            return _Result(timed_out=True)
        return _Result(produced=produced)

    def _produce(self, named: NamedPipeline, page: Page) -> _Produced:
        """Calls the pipeline and consumes what it returns (a generator runs here, inside the
        budget); raises what it raised, or `_ItemFault` for an item the store cannot take."""
        result = named.pipeline(page)
        if result is None:
            items: list[str] = []
        elif isinstance(result, dict):
            items = [self._serialise(result, 0, page.url)]
        elif isinstance(result, (str, bytes, bytearray)) or not isinstance(result, Iterable):
            raise _ItemFault(
                f"TypeError: returned a {type(result).__name__}; a pipeline returns None, a dict or dicts"
            )
        else:
            items = self._consume(iter(result), page.url)
        return _Produced(items, page._followed)

    def _consume(self, iterator: Iterator[object], url: str) -> list[str]:
        items: list[str] = []
        try:
            for index, item in enumerate(iterator):
                if index >= self.max_items_per_page:
                    raise _ItemFault(f"ValueError: more than {self.max_items_per_page} items on one page")
                items.append(self._serialise(item, index, url))
        except BaseException:
            # A generator left suspended would run its cleanup (finally, with) whenever it is
            # collected, outside any budget: close it now, while the budget still holds.
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            raise
        return items

    def _serialise(self, item: object, index: int, url: str) -> str:
        if not isinstance(item, dict):
            raise _ItemFault(f"TypeError: item {index} is a {type(item).__name__}, not a dict")
        if "url" not in item:
            item = {"url": url, **item}  # a copy: the pipeline may reuse its dict
        try:
            line = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise _ItemFault(f"{_describe(exc)} (item {index})") from exc
        if line.isascii():
            size = len(line)
        else:
            try:
                size = len(line.encode("utf-8"))
            except UnicodeEncodeError:
                # A lone surrogate (text decoded with errors="surrogateescape"): not UTF-8, so
                # it is written escaped, as \udcxx, which JSON readers accept.
                line = json.dumps(item, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
                size = len(line)
        if size > self.max_item_bytes:
            raise _ItemFault(
                f"ValueError: item {index} is {size:,} bytes as JSON, over the limit of {self.max_item_bytes:,}"
            )
        return line


def _can_use_alarm() -> bool:
    # signal.signal() works only in the main thread; a handler installed outside Python
    # (getsignal() is None) could not be put back.
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) is not None
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _ItemFault):
        return str(exc)
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
