"""How often to revisit each page for the most freshness a fetch budget buys: pure, no I/O.

Cho & Garcia-Molina, "Effective Page Refresh Policies for Web Crawlers" (ACM TODS 28(4),
2003): a page changing at rate λ revisited every 1/f is fresh, on average, a share
``F(λ, f) = (f / λ)(1 - exp(-λ / f))`` of the time. Maximising ``sum F(λ_i, f_i)`` under a
budget ``sum f_i = B`` (a Lagrange multiplier μ, the freshness one fetch must buy) gives

    g(λ_i / f_i) = μ λ_i,  where g(r) = 1 - (1 + r) exp(-r)

and g < 1, so a page with ``μ λ >= 1`` gets f = 0: it changes too fast for a visit to keep
it fresh long enough to pay, and the policy gives up on it. f grows with λ only up to a point
and then falls: not proportional to the change rate (their Figure 6).

The budget is what `--recrawl fixed` would spend at the same mean interval T: the mean of f
over the URLs is 1/T. The URLs' rates are summarised in `RateMix`, a histogram over log λ
of the URLs scheduled: each is added at its estimate when scheduled and taken out of the bin
of its previous estimate (kept in its history) then, so each URL counts once whatever its
interval. (A first try weighed each scheduling by its interval instead, which is fair only in
the steady state: on testweb it spent 1.39x fixed's budget in the first minutes.) Weights
decay with a half-life, so URLs that left (handed to another node) fade out; a URL's weight
is taken out as decayed since it was added. μ is solved for the mix by bisection, and the
frequency is clamped to [1/recrawl_max, 1/recrawl_min], which the bisection takes into account.
"""

from __future__ import annotations

import bisect
import math

_R_GRID = [10 ** (k / 40) for k in range(-240, 81)]  # r from 1e-6 to 100
_G_GRID = [-math.expm1(-r) - r * math.exp(-r) for r in _R_GRID]
_BINS_PER_DECADE = 8
_LOW_EXP = -10  # rates below 1e-10/s (one change in 300 years) fall in bin 0


def freshness(rate: float, frequency: float) -> float:
    """The share of time a page changing at ``rate`` is fresh when visited every 1/frequency."""
    if rate <= 0:
        return 1.0
    if frequency <= 0:
        return 0.0
    r = rate / frequency
    return -math.expm1(-r) / r


def _g_inverse(value: float) -> float:
    """r with g(r) = value, for 0 < value < 1 (interpolated on a log grid; exact enough for a
    schedule: the grid's step is 6%)."""
    if value <= _G_GRID[0]:
        return math.sqrt(2 * value)  # g(r) ~ r^2 / 2 near 0
    at = bisect.bisect_left(_G_GRID, value)
    if at >= len(_G_GRID):
        return _R_GRID[-1]
    g0, g1 = _G_GRID[at - 1], _G_GRID[at]
    return _R_GRID[at - 1] + (_R_GRID[at] - _R_GRID[at - 1]) * (value - g0) / (g1 - g0)


def optimal_frequency(rate: float, mu: float) -> float:
    """Visits per second that maximise freshness for a page of ``rate`` at price ``mu``."""
    if rate <= 0:
        return 0.0
    value = mu * rate
    if value >= 1:
        return 0.0  # too fast to keep fresh: given up
    return rate / _g_inverse(value)


def rate_bin(rate: float) -> int:
    if rate <= 0:
        return 0
    return max(0, round((math.log10(rate) - _LOW_EXP) * _BINS_PER_DECADE))


def bin_rate(index: int) -> float:
    return 0.0 if index == 0 else float(10 ** (index / _BINS_PER_DECADE + _LOW_EXP))


class RateMix:
    """The change rates of the URLs scheduled, as a decaying histogram (see the module
    docstring), and the price μ that spends the budget on it. ``half_life_s``: how long a
    URL's weight takes to halve when it is not scheduled again."""

    def __init__(self, *, half_life_s: float) -> None:
        self._decay = math.log(2) / half_life_s
        self._mass: dict[int, float] = {}
        self._at = 0.0  # the time the masses are decayed to
        self._adds = 0
        self._mu: float | None = None
        self._mu_for: tuple[float, float, float] | None = None

    def add(self, rate: float, now: float) -> None:
        """A URL is scheduled at ``rate``."""
        self._age(now)
        index = rate_bin(rate)
        self._mass[index] = self._mass.get(index, 0.0) + 1.0
        self._adds += 1

    def remove(self, rate: float, added_at: float, now: float) -> None:
        """The URL added at ``added_at`` with ``rate`` is scheduled again (or gone): its weight,
        decayed since, leaves (what was never added here, before a restart, leaves nothing)."""
        self._age(now)
        index = rate_bin(rate)
        mass = self._mass.get(index)
        if mass is None:
            return
        left = mass - math.exp(-self._decay * max(now - added_at, 0.0))
        if left > 1e-9:
            self._mass[index] = left
        else:
            del self._mass[index]

    def _age(self, now: float) -> None:
        if now > self._at:
            factor = math.exp(-self._decay * (now - self._at))
            if factor < 0.999:  # decayed in steps of 0.1% at least: not a pass over the bins per add
                self._at = now
                self._mass = {index: mass * factor for index, mass in self._mass.items() if mass * factor > 1e-9}

    @property
    def empty(self) -> bool:
        return not self._mass

    def price(self, mean_interval_s: float, min_s: float, max_s: float) -> float | None:
        """μ such that the mix's mean frequency, clamped, is 1/mean_interval_s; cached for 64
        additions, or a sixteenth of the mix while it is small. None while the mix is empty."""
        if not self._mass:
            return None
        key = (mean_interval_s, min_s, max_s)
        total = sum(self._mass.values())
        if self._mu is not None and self._mu_for == key and self._adds < min(64.0, total / 16):
            return self._mu
        target = total / mean_interval_s
        rates = [(bin_rate(index), mass) for index, mass in self._mass.items()]

        def spent(mu: float) -> float:
            return sum(mass * clamp_frequency(optimal_frequency(rate, mu), min_s, max_s) for rate, mass in rates)

        low, high = -30.0, 30.0  # log μ; spending falls as μ grows
        for _ in range(50):
            middle = (low + high) / 2
            if spent(math.exp(middle)) > target:
                low = middle
            else:
                high = middle
        self._mu, self._mu_for, self._adds = math.exp((low + high) / 2), key, 0
        return self._mu


def clamp_frequency(frequency: float, min_s: float, max_s: float) -> float:
    return min(max(frequency, 1.0 / max_s), 1.0 / min_s)


def interval_for(rate: float, mu: float | None, *, mean_interval_s: float, min_s: float, max_s: float) -> float:
    """Seconds to the next visit of a page of ``rate``: the optimum at price ``mu`` within
    [min_s, max_s]; the mean interval itself while no price is known yet."""
    if mu is None:
        return min(max(mean_interval_s, min_s), max_s)
    return 1.0 / clamp_frequency(optimal_frequency(rate, mu), min_s, max_s)
