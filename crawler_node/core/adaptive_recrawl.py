"""When each fetched page is visited again, from what its visits saw: pure, no I/O.

The store stage asks `Recrawler.schedule` for every fetch that ends a URL's lease with an
answer of its site. The URL's history (core.change_rate.History, kept in the frontier) learns
whether the page changed since the last visit: a new payload digest is a change; a 304, or the
same digest, is none. Its change rate is estimated (with a prior pooled over its path pattern
and host; a Last-Modified within the interval dates the change, which the estimator uses), and:

- ``--recrawl fixed``: the next visit is the host's interval after this one, as ever;
- ``--recrawl adaptive``: the next visit is the freshness-optimal one for the budget fixed
  would spend (core.refresh_schedule), within the policy's bounds.

Both keep the history, so an operator sees the estimates either way. Volatile parts of a page
(a timestamp, a session token) would count as changes here: the digest is of the payload as
served. testweb's pages carry none; `docs/operating.md` says what a site that does costs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from crawler_node.core.change_rate import History, PooledRates, estimate, observe, path_pattern
from crawler_node.core.recrawl_policy import RecrawlPolicy
from crawler_node.core.refresh_schedule import RateMix, bin_rate, interval_for, rate_bin


def http_date(text: str | None) -> float | None:
    """An HTTP-date (Last-Modified) as epoch seconds; None if absent or unreadable."""
    if not text:
        return None
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def payload_digest(body: bytes) -> int:
    """64 bits of BLAKE2b: enough to tell a page's versions apart (a collision would hide one
    change in 2^64), 8 bytes in the frontier."""
    return int.from_bytes(hashlib.blake2b(body, digest_size=8).digest(), "big", signed=True)


@dataclass(frozen=True, slots=True)
class Visit:
    due_at: float  # wall-clock time of the next visit
    history: bytes  # the URL's history, packed, to store with it
    rate: float  # its estimated changes per second
    changed: bool  # this fetch saw a change


LATENESS_WEIGHT = 0.02  # of each visit in the mean lateness


class Recrawler:
    def __init__(self, policy: RecrawlPolicy) -> None:
        self._policy = policy
        self._pools = PooledRates()
        self._mixes: dict[float, RateMix] = {}  # by mean interval: a budget of its own each
        self._lateness = 0.0  # seconds a visit comes after it was due, on average (_note_lateness)

    @property
    def adaptive(self) -> bool:
        return self._policy.adaptive

    def schedule(self, host: str, url: str, history: bytes | None, digest: int | None, now: float,
                 last_modified: float | None = None) -> Visit | None:
        """The next visit of ``url`` fetched at ``now`` (wall clock), whose payload digest is
        ``digest`` (None: a 304) and Last-Modified ``last_modified`` (epoch seconds, None: not
        given); None: never (the host's recrawl is off)."""
        mean_s = self._policy.after(host)
        if mean_s is None:
            return None
        old = History.unpack(history)
        seen_before = old is not None
        last_fetch, last_digest, old_rate, planned = (
            (old.last_fetch, old.digest, old.rate, old.planned_s) if old is not None else (now, 0, 0.0, 0.0))
        changed = seen_before and digest is not None and digest != last_digest
        new = observe(old, now, digest, last_modified)
        keys = (path_pattern(host, urlsplit(url).path), host)
        if seen_before:
            self._pools.note(keys, now - last_fetch, changed)
            if planned > 0:
                self._note_lateness(now - last_fetch - planned, mean_s)
        prior = self._pools.prior(keys, default=1.0 / mean_s)  # nothing known: one change per interval
        rate = new.rate = estimate(new, prior)
        if not self._policy.adaptive:
            new.planned_s = mean_s
            return Visit(now + mean_s, new.pack(), rate, changed)
        low, high = self._policy.bounds(mean_s)
        mix = self._mixes.get(mean_s)
        if mix is None:
            mix = self._mixes[mean_s] = RateMix(half_life_s=4 * high)
        if old is not None:
            mix.remove(old_rate, last_fetch, now)
        mix.add(rate, now)
        # A visit comes later than asked (the due URLs are queued once a second, then leased and
        # fetched): by the same lateness for every interval, which stretches short ones most. So
        # the intervals are chosen for the budget fixed really spends, one per mean + lateness,
        # and asked for that much sooner.
        # The rate as the mix has it (its bin's): the price spends the budget on the bins, and a
        # page's own rate on the other side of the give-up line would leave its share unspent.
        late = self._lateness
        realised = interval_for(bin_rate(rate_bin(rate)), mix.price(mean_s + late, low, high),
                                mean_interval_s=mean_s + late, min_s=low, max_s=high)
        new.planned_s = interval = max(realised - late, 0.1 * realised)
        return Visit(now + interval, new.pack(), rate, changed)

    def _note_lateness(self, seconds: float, mean_s: float) -> None:
        """An exponentially weighted mean of how late the visits came (0 to half the mean interval)."""
        self._lateness += LATENESS_WEIGHT * (min(max(seconds, 0.0), 0.5 * mean_s) - self._lateness)

    def host_rate(self, host: str) -> float | None:
        """Changes per second pooled over the recrawls of ``host`` seen here (None: none yet)."""
        return self._pools.host_rate(host)
