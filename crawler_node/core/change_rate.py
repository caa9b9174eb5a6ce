"""How often a page changes, from what its recrawls saw: pure, no I/O.

A page is assumed to change as a Poisson process of rate λ. A recrawl after an interval t
tells only whether it changed at least once in between (a new payload digest), not how many
times: the history is incomplete. Cho & Garcia-Molina ("Estimating Frequency of Change",
ACM TOIT 3(3), 2003) give the estimators used here:

- regular intervals I, X changes detected in n checks: the bias-reduced estimator
  ``r = -log((n - X + 0.5) / (n + 0.5)) / I`` (their section 4; finite when X = n, and its
  bias stays small where the plain MLE ``-log((n - X) / n) / I`` diverges);
- irregular intervals (section 5): the maximum-likelihood λ, the root of
  ``sum over changed intervals t_i / (exp(λ t_i) - 1) = sum of the unchanged intervals``.
  The +0.5 of the regular estimator is exactly half a mean interval added to the unchanged
  time, so the same correction is applied here: on regular intervals the two agree.

A URL with little history borrows a prior rate (from its host and path pattern, see
`PooledRates`) as pseudo-observations worth PRIOR_CHECKS mean intervals: a Gamma prior, and
the estimate is its posterior mode. With no history at all the estimate is the prior.

With a Last-Modified that falls within the interval, a change is dated (their section 6):
the interval then says a change happened at that time and none from then to the check, which
weighs in the likelihood as ``log λ - λ (check - change)``; such changes need no bin.

`History` is what the frontier keeps per URL, packed in 50 bytes and 2 a bin: the last
payload digest, checks and changes (dated or not), the time without change, the last
estimate, and the undated intervals that saw a change in
geometric bins (2^(1/4) wide: a bin's midpoint is within 9% of each interval in it).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PRIOR_CHECKS = 2.0  # the prior weighs as much as this many checks at the URL's mean interval
BINS_PER_OCTAVE = 4
_BIN_OFFSET = 64  # bin 0 is 2^-16 s; 255 is ~2^47 s
MAX_BINS = 12  # distinct changed-interval bins kept per URL; nearest ones merge past this
MAX_CHECKS = 2000  # past this every count is halved: old behaviour fades, and u16 never overflows
# digest, last_fetch, last_change, quiet_s, rate (the last estimate), observed_s, dated_quiet_s,
# planned_s, checks, changes, dated_changes: 50 bytes
_HEAD = struct.Struct("<qddfffffHHH")


def interval_bin(seconds: float) -> int:
    return max(0, min(255, round(BINS_PER_OCTAVE * math.log2(max(seconds, 1e-6))) + _BIN_OFFSET))


def bin_seconds(index: int) -> float:
    return float(2.0 ** ((index - _BIN_OFFSET) / BINS_PER_OCTAVE))


@dataclass(slots=True)
class History:
    """One URL's recrawl history. ``changed``: bin index -> changed intervals in it."""

    digest: int
    last_fetch: float
    last_change: float
    quiet_s: float = 0.0
    rate: float = 0.0  # the estimate made at the last fetch (changes per second), for operators
    observed_s: float = 0.0  # the intervals checked, in all
    # changes whose time the answer's Last-Modified dated (within the interval), and the time
    # from each such change to the check that saw it: no change in it, by that date
    dated_quiet_s: float = 0.0
    planned_s: float = 0.0  # the interval asked for at the last fetch (0: none)
    checks: int = 0
    changes: int = 0
    dated_changes: int = 0
    changed: dict[int, int] = field(default_factory=dict)  # undated changes: interval bin -> count

    def pack(self) -> bytes:
        head = _HEAD.pack(self.digest, self.last_fetch, self.last_change, self.quiet_s, self.rate, self.observed_s,
                          self.dated_quiet_s, self.planned_s, min(self.checks, 65_535), min(self.changes, 65_535),
                          min(self.dated_changes, 65_535))
        return head + bytes(byte for index, count in sorted(self.changed.items()) for byte in (index, count))

    @classmethod
    def unpack(cls, blob: bytes | None) -> History | None:
        if not blob or len(blob) < _HEAD.size:
            return None
        tail = blob[_HEAD.size:]
        changed = {tail[i]: tail[i + 1] for i in range(0, len(tail) - 1, 2)}
        digest, last_fetch, last_change, quiet_s, rate, observed_s, dated_quiet_s, planned_s, checks, changes, dated = (
            _HEAD.unpack_from(blob))
        return cls(digest, last_fetch, last_change, quiet_s, rate, observed_s, dated_quiet_s, planned_s, checks,
                   changes, dated, changed)


def observe(history: History | None, now: float, digest: int | None, last_modified: float | None = None) -> History:
    """The history after a fetch at ``now`` whose payload digest is ``digest`` (None: a 304,
    or an answer with the same payload: no change). ``last_modified``: the answer's
    Last-Modified (epoch seconds), which dates a change when it falls within the interval."""
    if history is None:
        return History(digest or 0, now, now)
    interval = max(now - history.last_fetch, 0.0)
    changed = digest is not None and digest != history.digest
    history.checks += 1
    history.observed_s += interval
    # An HTTP-date has whole seconds: a change in the second of the last check may read as before it.
    dated = (changed and last_modified is not None and history.last_fetch - 1.0 < last_modified <= now + 1.0)
    history.last_fetch = now
    if changed:
        assert digest is not None
        history.digest = digest
        history.changes += 1
        if dated:
            assert last_modified is not None
            # Cho & Garcia-Molina (TOIT 2003, section 6): with the time of the last change
            # known, the interval is a change at that time and none from then to the check.
            history.last_change = min(last_modified, now)
            history.dated_changes += 1
            history.dated_quiet_s += max(now - last_modified, 0.0)
        else:
            history.last_change = now
            index = interval_bin(interval)
            history.changed[index] = history.changed.get(index, 0) + 1
            if len(history.changed) > MAX_BINS:
                _merge_nearest(history.changed)
    else:
        history.quiet_s += interval
    if history.checks >= MAX_CHECKS or max(history.changed.values(), default=0) >= 255:
        _halve(history)
    return history


def estimate(history: History | None, prior_rate: float, *, prior_checks: float = PRIOR_CHECKS) -> float:
    """Changes per second of the URL: the bias-corrected MLE over its irregular intervals,
    shrunk towards ``prior_rate`` by ``prior_checks`` pseudo-checks (see the module docstring)."""
    if history is None or history.checks == 0:
        return prior_rate
    undated = [(bin_seconds(index), count) for index, count in history.changed.items()]
    # What a check tells, in time: its interval, or from a dated change to the check. The prior
    # weighs PRIOR_CHECKS of these; the +0.5 applies to the undated checks (section 4's bias).
    per_check = (history.quiet_s + history.dated_quiet_s + sum(t * count for t, count in undated)) / history.checks
    undated_share = 1.0 - history.dated_changes / history.checks
    return mle_rate(undated, history.quiet_s + history.dated_quiet_s + 0.5 * per_check * undated_share,
                    prior_rate=prior_rate, prior_s=prior_checks * per_check, dated_changes=history.dated_changes)


def mle_rate(changed: Sequence[tuple[float, int]], quiet_s: float, *, prior_rate: float = 0.0,
             prior_s: float = 0.0, dated_changes: int = 0) -> float:
    """The λ that maximises the likelihood of ``changed`` ((interval, how many) that saw a
    change) and ``quiet_s`` (total time of the intervals that saw none), with a Gamma prior of
    mode ``prior_rate`` worth ``prior_s`` seconds of observation: the root of
    ``sum c t / (exp(λ t) - 1) + (dated_changes + prior_rate * prior_s) / λ = quiet_s + prior_s``
    (a dated change adds log λ to the likelihood, its quiet time is in ``quiet_s``). Its left
    side falls from infinity to 0 as λ grows, so bisection on log λ finds it."""
    pseudo_changes = dated_changes + prior_rate * prior_s
    right = quiet_s + prior_s
    if not changed and pseudo_changes <= 0:
        return 0.0
    if right <= 0:
        return math.inf

    def excess(rate: float) -> float:
        total = pseudo_changes / rate
        for interval, count in changed:
            x = rate * interval
            total += count * interval / math.expm1(x) if x < 700 else 0.0
        return total - right

    low, high = -40.0, 20.0  # log λ: from one change in 7e9 years to 5e8 a second
    for _ in range(48):
        middle = (low + high) / 2
        if excess(math.exp(middle)) > 0:
            low = middle
        else:
            high = middle
    return math.exp((low + high) / 2)


def regular_rate(checks: float, changes: float, interval_s: float) -> float:
    """Cho & Garcia-Molina's bias-reduced estimator for ``checks`` checks ``interval_s``
    apart, ``changes`` of which saw a change."""
    return -math.log((checks - changes + 0.5) / (checks + 0.5)) / interval_s


def _merge_nearest(changed: dict[int, int]) -> None:
    indexes = sorted(changed)
    _, at = min((indexes[i + 1] - indexes[i], i) for i in range(len(indexes) - 1))
    low, high = indexes[at], indexes[at + 1]
    total = changed.pop(low) + changed.pop(high)
    middle = (low + high) // 2
    changed[middle] = min(255, changed.get(middle, 0) + total)


def _halve(history: History) -> None:
    history.checks = (history.checks + 1) // 2
    history.changes = (history.changes + 1) // 2
    history.dated_changes = (history.dated_changes + 1) // 2
    history.quiet_s /= 2
    history.observed_s /= 2
    history.dated_quiet_s /= 2
    history.changed = {index: (count + 1) // 2 for index, count in history.changed.items()}


def path_pattern(host: str, path: str) -> str:
    """The pattern a URL's prior is pooled over: its host and the shape of its first path
    segment (digits folded), e.g. ``news.example/story-#``."""
    first = path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
    return f"{host}/{''.join('#' if c.isdigit() else c for c in first)[:40]}"


@dataclass(slots=True)
class _Pool:
    checks: float = 0.0
    changes: float = 0.0
    seconds: float = 0.0

    def rate(self) -> float:
        return regular_rate(self.checks, self.changes, self.seconds / self.checks)


class PooledRates:
    """Change rates pooled over the URLs of a host and of a path pattern (what the fetches of
    this node saw, in memory): the prior of a URL with little history of its own. A pool
    speaks once it has MIN_CHECKS checks; the path pattern's first, then the host's, then
    the caller's default. Bounded: past ``max_keys`` pools all are dropped and relearnt."""

    MIN_CHECKS = 5

    def __init__(self, max_keys: int = 65_536) -> None:
        self._pools: dict[str, _Pool] = {}
        self._max_keys = max_keys

    def note(self, keys: Iterable[str], interval_s: float, changed: bool) -> None:
        if interval_s <= 0:
            return
        if len(self._pools) > self._max_keys:
            self._pools.clear()
        for key in keys:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = _Pool()
            pool.checks += 1
            pool.changes += changed
            pool.seconds += interval_s
            if pool.checks > 4 * MAX_CHECKS:
                pool.checks, pool.changes, pool.seconds = pool.checks / 2, pool.changes / 2, pool.seconds / 2

    def prior(self, keys: Iterable[str], default: float) -> float:
        for key in keys:
            pool = self._pools.get(key)
            if pool is not None and pool.checks >= self.MIN_CHECKS:
                return pool.rate()
        return default

    def host_rate(self, host: str) -> float | None:
        pool = self._pools.get(host)
        return pool.rate() if pool is not None and pool.checks else None
