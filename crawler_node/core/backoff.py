"""Retry policy and per-host backoff (pure: time is passed in, randomness injected).

Retries are load (DESIGN rule 6): they get a per-URL budget, back off with full jitter so a
burst of failures does not come back as a synchronised burst, honour Retry-After, and are
never made for what cannot succeed.

Hand-written: tenacity, backoff and stamina wrap one call in a loop that sleeps and calls again
in the same coroutine. Here nothing waits. A failed attempt returns its URL to the frontier with
a not-before time (``RetryDecision.delay_s``) and its attempt count, both on disk, and a later
lease, on any worker and after a restart, makes the retry through the same admission as a first
attempt. A host's pause (``HostBackoffPolicy``) is decided from the answers of all its URLs, held
in the host's record, stored with the frontier's politeness columns and handed to the next owner
when the host moves. What the libraries would add is the jittered exponential wait: two lines
of ``backoff_s`` and ``on_throttle``.
"""

from __future__ import annotations

import email.utils
import math
import random
from dataclasses import dataclass
from datetime import UTC
from typing import NamedTuple

from crawler_node.core.outcomes import ErrorKind

# Errors that will fail the same way on every attempt. TLS: a certificate that does not
# verify (or a handshake the server's configuration refuses) is the site's setup, not a glitch.
FATAL_ERRORS = frozenset({ErrorKind.TOO_LARGE, ErrorKind.NOT_ALLOWED, ErrorKind.TLS})
RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})
# 2 ** 62 seconds is far past any cap; stops the exponent from building huge ints.
_MAX_EXPONENT = 62


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), None if unusable."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return _seconds_until_http_date(value, now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _seconds_until_http_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with unknown origin; HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


# The reason of a decision not to retry an HTTP answer that is final: the page was fetched,
# and the answer (a 404, a 410) is its result.
FINAL_ANSWER = "client_error"


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    delay_s: float
    reason: str


class RetryPolicy:
    """Whether and when to retry one URL after an attempt."""

    def __init__(
        self,
        *,
        budget: int = 3,
        base_s: float = 1.0,
        cap_s: float = 60.0,
        retry_after_cap_s: float = 300.0,
        dns_base_s: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``dns_base_s``: the first wait after a name did not resolve (default ``cap_s``);
        see :meth:`dns_backoff_s`."""
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if base_s <= 0 or cap_s < base_s:
            raise ValueError(f"need 0 < base_s <= cap_s, got base_s={base_s}, cap_s={cap_s}")
        if retry_after_cap_s < 0:
            raise ValueError(f"retry_after_cap_s must be >= 0, got {retry_after_cap_s}")
        self.budget = budget
        self.base_s = base_s
        self.cap_s = cap_s
        self.retry_after_cap_s = retry_after_cap_s
        self.dns_base_s = cap_s if dns_base_s is None else dns_base_s
        if self.dns_base_s <= 0:
            raise ValueError(f"dns_base_s must be > 0, got {dns_base_s}")
        self._rng = rng if rng is not None else random.Random()

    def decide(
        self,
        *,
        attempt: int,
        status: int | None,
        error: ErrorKind | None = None,
        retry_after_s: float | None = None,
    ) -> RetryDecision:
        """``attempt`` counts attempts already made (1 after the first)."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        if status is None and error is None:
            raise ValueError("decide() needs a status or an error")
        reason = _retry_reason(status, error)
        if reason is None:
            return RetryDecision(False, 0.0, _final_reason(status, error))
        if attempt > self.budget:
            return RetryDecision(False, 0.0, "budget_exhausted")
        return RetryDecision(True, self._delay(attempt, retry_after_s, error), reason)

    def backoff_s(self, attempt: int) -> float:
        """Full jitter: uniform over [0, min(cap, base * 2**(attempt-1))]."""
        exponent = min(attempt - 1, _MAX_EXPONENT)
        return self._rng.uniform(0.0, min(self.cap_s, self.base_s * 2**exponent))

    def dns_backoff_s(self, attempt: int) -> float:
        """After a DNS failure: uniform over [1/2, 1] x dns_base * 2**(attempt-1), at most 16
        x dns_base. A failure that outlived the resolver's own retries is an NXDOMAIN (which
        will not change in seconds) or an outage of a resolver or of the domain's servers,
        which lasts minutes; and the failure is cached (fetch.dns, negative answers for ~30
        s), so the connection schedule (1 s, 2 s, 4 s) would spend the whole budget on
        answers from that cache. Starting at the cap of the ordinary schedule (60 s by
        default) and never below half of it, three retries span 3.5 to 7 minutes. The jitter
        keeps the floor: the URLs of one failed host are not retried as one burst."""
        exponent = min(attempt - 1, 4)
        return self.dns_base_s * 2**exponent * self._rng.uniform(0.5, 1.0)

    def _delay(self, attempt: int, retry_after_s: float | None, error: ErrorKind | None = None) -> float:
        jittered = self.dns_backoff_s(attempt) if error == ErrorKind.DNS else self.backoff_s(attempt)
        if retry_after_s is None:
            return jittered
        # The server said when; we never come back earlier, and never wait unboundedly.
        return max(min(max(retry_after_s, 0.0), self.retry_after_cap_s), jittered)


def _retry_reason(status: int | None, error: ErrorKind | None) -> str | None:
    """Why a retry may help, or None when it cannot."""
    if error in FATAL_ERRORS:
        return None
    if status is not None and 400 <= status < 500 and status not in RETRYABLE_CLIENT_STATUSES:
        return None  # the request itself is wrong: repeating it is wasted load
    if error is not None:
        return str(error)  # "timeout", "connection", ... (even after a status line arrived)
    assert status is not None
    if status == 429:
        return "throttled"
    if status == 408:
        return "request_timeout"
    if 500 <= status < 600:
        return "server_error"
    return None


def _final_reason(status: int | None, error: ErrorKind | None) -> str:
    if error in FATAL_ERRORS:
        return f"fatal_{error}"
    if status is not None and 400 <= status < 500:
        return FINAL_ANSWER
    if status is not None and 200 <= status < 400:
        return "ok"
    return "unexpected_status"


class BackoffState(NamedTuple):
    """A host's backoff for 429s without Retry-After (a value; see HostBackoffPolicy)."""

    level: int = 0  # consecutive throttles not yet forgiven (0 = healthy)
    last_throttle: float | None = None
    eligible_at: float = 0.0


NO_BACKOFF = BackoffState()


class HostBackoffPolicy:
    """When a host keeps answering 429 without Retry-After: wait longer each time. Pure: the
    host's :class:`BackoffState` goes in, the next one comes out."""

    def __init__(
        self,
        *,
        initial_s: float = 60.0,
        cap_s: float = 3600.0,
        forgive_after_s: float = 600.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        """``jitter``: each pause is drawn within +-jitter of its nominal length."""
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        if initial_s <= 0 or cap_s < initial_s:
            raise ValueError(f"need 0 < initial_s <= cap_s, got {initial_s}, {cap_s}")
        if forgive_after_s < 0:
            raise ValueError(f"forgive_after_s must be >= 0, got {forgive_after_s}")
        self.initial_s = initial_s
        self.cap_s = cap_s
        self.forgive_after_s = forgive_after_s
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()

    def on_throttle(self, state: BackoffState, now: float) -> BackoffState:
        """One more throttle: the new state, whose ``eligible_at`` is when to try the host again."""
        level = state.level + 1
        exponent = min(level - 1, _MAX_EXPONENT)
        # Jitter (20% by default) so hosts throttled together do not all come back together.
        spread = self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        delay = min(self.cap_s, self.initial_s * 2**exponent * spread)
        return BackoffState(level, now, now + delay)

    def on_success(self, state: BackoffState, now: float) -> BackoffState:
        """Forgiven once the host has gone ``forgive_after_s`` without a throttle."""
        if state.last_throttle is not None and now - state.last_throttle > self.forgive_after_s:
            return NO_BACKOFF
        return state

    def forgiven(self, state: BackoffState, now: float) -> bool:
        """Nothing of the backoff is left to remember: the host may be forgotten."""
        return state.level == 0 or (
            state.last_throttle is not None and now - state.last_throttle > self.forgive_after_s
            and now >= state.eligible_at)
