"""When a fetched URL is due again: pure, no I/O.

``--recrawl-after DURATION`` sets how long after a fetch a URL is fetched again (none by
default: a URL is fetched once); ``--recrawl-host GLOB=DURATION`` (repeatable, or a
``[recrawl_hosts]`` table in the config file) overrides it for the hosts a glob matches, the
first matching glob winning, and ``never`` turns recrawl off for them. The recrawl asks
with the validators of the last answer (If-None-Match, If-Modified-Since), so an unchanged
page costs the site a 304 and no body.

``--recrawl adaptive`` (the default) spends the same budget, the interval above on average,
page by page: each page's change rate is estimated from what its recrawls saw, and its next
visit is the one that maximises expected freshness (core.adaptive_recrawl), within
``--recrawl-min`` and ``--recrawl-max`` (by default a tenth of the interval and 30 times it).
``--recrawl fixed`` revisits every page after the interval itself.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from crawler_node.core.urls import bare_host

# Hand-written, one regular expression: no duration library reads these spellings without
# refusing some or taking a typo for a duration (tried 2026-12 on 90, 90s, 15m, 6h, 1d, 2w,
# 1h30m, 0.5s, "90 s", 1H, and 5x, -1s, "1h 30"):
# - pytimeparse2 1.7 (the closest; last release 2023-05): refuses "1h30" (here 1 h 30 s) and a
#   unit twice or out of order ("5m1h"); reads "1:30" as 90 s; switches its arithmetic to
#   dateutil through a module-wide flag when dateutil is installed;
# - pytimeparse 1.1: refuses a bare "90"; humanfriendly 10: refuses sums ("1h30m");
# - durationpy (Go's syntax): refuses "90", "1d", "2w" and spaces; isodate: ISO 8601 only
#   ("PT1H30M"); timelength 3: reads "-1s" as 1 s and "1h 30" as 1 h (drops what it cannot read).
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def parse_duration(text: str) -> float | None:
    """Seconds in ``text``: ``90``, ``90s``, ``15m``, ``6h``, ``1d``, ``2w``, or a sum such as
    ``1h30m``; ``never`` (or ``off``) is None. Raises ValueError on anything else."""
    value = text.strip().lower()
    if value in ("never", "off", "none"):
        return None
    position, total = 0, 0.0
    for match in _DURATION.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        position = match.end()
    if not value or position != len(value):
        raise ValueError(f"{text!r} is not a duration (like 90s, 15m, 6h, 1d, 1h30m, or never)")
    if total <= 0:
        raise ValueError(f"{text!r}: a recrawl interval must be more than 0 (or never)")
    return total


RECRAWL_MODES = ("adaptive", "fixed")
MIN_SHARE = 0.1  # --recrawl-min by default: this share of the mean interval
MAX_TIMES = 30.0  # --recrawl-max by default: this many mean intervals


class RecrawlPolicy:
    def __init__(self, default_s: float | None, hosts: Sequence[tuple[str, float | None]] = (), *,
                 mode: str = "fixed", min_s: float | None = None, max_s: float | None = None) -> None:
        if mode not in RECRAWL_MODES:
            raise ValueError(f"recrawl must be one of {', '.join(RECRAWL_MODES)}, got {mode!r}")
        if min_s is not None and max_s is not None and min_s > max_s:
            raise ValueError("recrawl_min must not be more than recrawl_max")
        self.default_s = default_s
        self.mode = mode
        self.min_s = min_s
        self.max_s = max_s
        self._hosts = [(re.compile(fnmatch.translate(glob.strip().lower())), seconds) for glob, seconds in hosts]
        self._cache: dict[str, float | None] = {}

    @classmethod
    def from_specs(cls, default: str | None, specs: Sequence[str], *, mode: str = "fixed",
                   min_s: str | None = None, max_s: str | None = None) -> RecrawlPolicy:
        """From the settings' strings; ValueError names the bad one."""
        hosts = []
        for spec in specs:
            glob, sep, duration = spec.rpartition("=")
            if not sep or not glob.strip():
                raise ValueError(f"recrawl host {spec!r} must look like GLOB=DURATION")
            hosts.append((glob, parse_duration(duration)))
        return cls(parse_duration(default) if default else None, hosts, mode=mode,
                   min_s=parse_duration(min_s) if min_s else None, max_s=parse_duration(max_s) if max_s else None)

    @property
    def adaptive(self) -> bool:
        return self.mode == "adaptive"

    def bounds(self, mean_s: float) -> tuple[float, float]:
        """(shortest, longest) interval of an adaptive recrawl whose mean is ``mean_s``."""
        low = self.min_s if self.min_s is not None else MIN_SHARE * mean_s
        high = self.max_s if self.max_s is not None else MAX_TIMES * mean_s
        return min(low, mean_s), max(high, mean_s)

    @property
    def enabled(self) -> bool:
        return self.default_s is not None or any(seconds is not None for _, seconds in self._hosts)

    def after(self, host: str) -> float | None:
        """Seconds from a fetch of ``host`` (host[:port]) to its recrawl, or None: never."""
        try:
            return self._cache[host]
        except KeyError:
            pass
        seconds = self.default_s
        bare = bare_host(host)
        for pattern, override in self._hosts:
            if pattern.match(host) or pattern.match(bare):
                seconds = override
                break
        if len(self._cache) > 65_536:
            self._cache.clear()
        self._cache[host] = seconds
        return seconds
