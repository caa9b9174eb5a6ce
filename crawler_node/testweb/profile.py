"""Per-host behaviour profiles for testweb: loading, validation and glob resolution.

A profile file maps host-name globs (fnmatch) to settings; where several globs match a host,
the later glob wins per key. The structured form adds the global paid-API limit:

    {"hosts": {"site-0.test": {"latency_ms": 50}}, "api_limit": {"concurrency": 8, "quota": 100}}

Everything is validated here, once, so the server can trust every value it reads.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from crawler_node.testweb.graph import MAX_DUPLICATES, SITEMAP_FORMATS

DEFAULT_BOMB_BYTES = 1 << 30
DEFAULT_API_HEADER = "X-Api-Limit"

# Host names of the generated part of the web; exact profile names outside it become extra hosts.
_GENERATED_HOST = re.compile(r"site-\d+\.test")
_GLOB_CHARS = re.compile(r"[a-z0-9.\-_*?\[\]!]+")
_HOST_LABEL = re.compile(r"[a-z0-9]([a-z0-9\-_]*[a-z0-9])?")
_HEADER_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~\-]+")


class ProfileError(ValueError):
    """The profile is unusable; the message is one line naming the offending entry."""


@dataclass(frozen=True, slots=True)
class HostProfile:
    """How one synthetic host behaves. The defaults are a fast, well-behaved site."""

    latency_ms: float = 0.0
    jitter_ms: float | None = None  # None: 20% of latency_ms, added on top of it
    max_concurrency: int | None = None
    retry_after_s: float = 1.0
    error_rate: float = 0.0
    error_status: int = 503
    robots: str | None = None
    robots_bom: bool = False  # robots.txt served with a UTF-8 byte-order mark first (Windows editors write one)
    page_bytes: int | None = None
    drip_bytes_per_s: int | None = None
    redirects: float = 0.0
    trap: bool = False
    redirect_trap: bool = False
    gzip_bomb: int = 0  # inflated size of /bomb in bytes; 0 = no bomb
    gzip: bool = False  # HTML sent gzip-encoded when the request's Accept-Encoding allows it
    changing: float = 0.0  # fraction of /p/N pages whose bytes differ on every visit
    duplicates: int = 0  # pairs /dup/K/a, /dup/K/b (linked from /) with identical bytes
    sitemaps: tuple[str, ...] = ()  # /sitemap.F for each format F, named by robots.txt (graph.SITEMAP_FORMATS)
    url_shapes: bool = False  # / also links to pages of odd link shapes (see testweb.url_shapes)
    # Refusals instead of pages (testweb.refusals): 0 = off
    challenge_rps: float = 0.0  # a challenge page once more requests than this come in one second
    captcha: float = 0.0  # fraction of page URLs answered with a captcha page
    login_wall: float = 0.0  # fraction of page URLs redirected to /login
    soft_block_after: int = 0  # pages served before every URL gets the same small page
    forbidden: float = 0.0  # fraction of page URLs answered with a plain 403
    refusal_for_s: float = 5.0  # how long a triggered challenge or soft block lasts
    # each /p/N page changes as a Poisson process of this rate (per second) times a log-normal
    # factor of spread change_spread, from the seed (testweb.changes; /_testweb/freshness)
    change_rate: float = 0.0
    change_spread: float = 0.0
    # (path glob, rate) pairs: a /p/N page whose path a glob matches (the first) changes at
    # that rate instead of change_rate (0: never)
    change_paths: tuple[tuple[str, float], ...] = ()

    def change_rate_of(self, path: str) -> float:
        for glob, rate in self.change_paths:
            if fnmatch.fnmatchcase(path, glob):
                return rate
        return self.change_rate

    @property
    def effective_jitter_ms(self) -> float:
        return self.latency_ms * 0.2 if self.jitter_ms is None else self.jitter_ms

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class ApiLimit:
    """Limits of the paid scraping API that testweb can pretend to be (None = unlimited)."""

    concurrency: int | None = None
    quota: int | None = None
    header: str = DEFAULT_API_HEADER

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "quota": self.quota, "header": self.header}


@dataclass(frozen=True, slots=True)
class Profile:
    """Validated rules, in file order: (glob, the settings that glob sets)."""

    rules: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    api_limit: ApiLimit = field(default_factory=ApiLimit)

    def for_host(self, host: str) -> HostProfile:
        settings: dict[str, Any] = {}
        for glob, values in self.rules:
            if fnmatch.fnmatchcase(host, glob):
                settings.update(values)
        return HostProfile(**settings)

    def extra_hosts(self) -> list[str]:
        """Exact (non-glob) names outside the site-N.test family, in file order."""
        names: list[str] = []
        for glob, _ in self.rules:
            is_exact = not any(ch in glob for ch in "*?[")
            if is_exact and not _GENERATED_HOST.fullmatch(glob) and glob not in names:
                names.append(glob)
        return names


# --- value checkers: each returns the converted value or raises ProfileError ------------------

Checker = Callable[[Any, str], Any]


def _number(*, minimum: float = 0.0, maximum: float | None = None) -> Checker:
    def check(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProfileError(f"{where}: expected a number, got {value!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = (f">= {minimum:g}" if maximum is None
                      else f"between {minimum:g} and {maximum:g}")
            raise ProfileError(f"{where}: must be {bounds}, got {value!r}")
        return float(value)

    return check


def _integer(*, minimum: int = 0, maximum: int | None = None) -> Checker:
    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{where}: expected an integer, got {value!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ProfileError(f"{where}: must be {bounds}, got {value!r}")
        return value

    return check


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(f"{where}: expected true or false, got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ProfileError(f"{where}: expected a string, got {value!r}")
    return value


def _sitemaps(value: Any, where: str) -> tuple[str, ...]:
    known = [*SITEMAP_FORMATS, *(f"{name}.gz" for name in SITEMAP_FORMATS)]
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ProfileError(f"{where}: expected a list of sitemap formats, got {value!r}")
    for name in value:
        if name not in known:
            raise ProfileError(f"{where}: unknown sitemap format {name!r} (known: {', '.join(known)})")
    if len(set(value)) != len(value):
        raise ProfileError(f"{where}: a sitemap format is listed twice in {value!r}")
    return tuple(value)


def _change_paths(value: Any, where: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(value, dict) or not all(isinstance(glob, str) and glob.startswith("/") for glob in value):
        raise ProfileError(f"{where}: expected a table of path globs (starting with /) to rates, got {value!r}")
    return tuple((glob, _number()(rate, f"{where}.{glob}")) for glob, rate in value.items())


def _bomb(value: Any, where: str) -> int:
    # true means the classic 1 GiB bomb; an integer picks the inflated size.
    if isinstance(value, bool):
        return DEFAULT_BOMB_BYTES if value else 0
    return _integer(minimum=1)(value, where)


_HOST_SETTINGS: dict[str, Checker] = {
    "latency_ms": _number(),
    "jitter_ms": _number(),
    "max_concurrency": _integer(),
    "retry_after_s": _number(),
    "error_rate": _number(maximum=1.0),
    "error_status": _integer(minimum=400, maximum=599),
    "robots": _text,
    "robots_bom": _boolean,
    "page_bytes": _integer(),
    "drip_bytes_per_s": _integer(minimum=1),
    "redirects": _number(maximum=1.0),
    "trap": _boolean,
    "redirect_trap": _boolean,
    "gzip_bomb": _bomb,
    "gzip": _boolean,
    "changing": _number(maximum=1.0),
    "duplicates": _integer(maximum=MAX_DUPLICATES),
    "sitemaps": _sitemaps,
    "url_shapes": _boolean,
    "challenge_rps": _number(),
    "captcha": _number(maximum=1.0),
    "login_wall": _number(maximum=1.0),
    "soft_block_after": _integer(),
    "forbidden": _number(maximum=1.0),
    "refusal_for_s": _number(),
    "change_rate": _number(),
    "change_spread": _number(maximum=5.0),
    "change_paths": _change_paths,
}

_API_SETTINGS: dict[str, Checker] = {
    "concurrency": _integer(minimum=1),
    "quota": _integer(),
    "header": _text,
}


def _check_glob(glob: Any, where: str) -> str:
    if not isinstance(glob, str) or not glob:
        raise ProfileError(f"{where}: host glob must be a non-empty string, got {glob!r}")
    lowered = glob.lower().rstrip(".")
    if not _GLOB_CHARS.fullmatch(lowered):
        raise ProfileError(
            f"{where}: bad host glob {glob!r} (allowed: letters, digits, . - _ * ? [ ] !)"
        )
    depth = 0
    for ch in lowered:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise ProfileError(f"{where}: bad host glob {glob!r} (unbalanced brackets)")
    if depth:
        raise ProfileError(f"{where}: bad host glob {glob!r} (unclosed '[')")
    is_exact = not any(ch in lowered for ch in "*?[")
    if is_exact and not all(_HOST_LABEL.fullmatch(label) for label in lowered.split(".")):
        raise ProfileError(f"{where}: {glob!r} is not a valid host name")
    return lowered


def _check_table(
    table: Any, checkers: Mapping[str, Checker], where: str
) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise ProfileError(f"{where}: expected a table of settings, got {table!r}")
    checked: dict[str, Any] = {}
    for key, value in table.items():
        checker = checkers.get(key)
        if checker is None:
            known = ", ".join(sorted(checkers))
            raise ProfileError(f"{where}: unknown setting {key!r} (known: {known})")
        checked[key] = checker(value, f"{where}.{key}")
    return checked


def parse_profile(data: Any) -> Profile:
    """Validate a decoded profile document (flat or structured form)."""
    if not isinstance(data, Mapping):
        raise ProfileError(
            f"top level must be a table mapping host globs to settings, got {data!r}"
        )
    structured = "hosts" in data or "api_limit" in data
    if structured:
        unknown = sorted(set(data) - {"hosts", "api_limit"})
        if unknown:
            raise ProfileError(f"unknown top-level key {unknown[0]!r} (known: api_limit, hosts)")
        host_tables = data.get("hosts", {})
        if not isinstance(host_tables, Mapping):
            raise ProfileError(f"hosts: expected a table of host globs, got {host_tables!r}")
        prefix = "hosts."
    else:
        host_tables = data
        prefix = ""
    rules = []
    for glob, table in host_tables.items():
        where = f"{prefix}{glob!r}"
        rules.append((_check_glob(glob, where), _check_table(table, _HOST_SETTINGS, where)))
    api = _check_table(data.get("api_limit", {}) if structured else {}, _API_SETTINGS, "api_limit")
    header = api.get("header", DEFAULT_API_HEADER)
    if not _HEADER_TOKEN.fullmatch(header):
        raise ProfileError(f"api_limit.header: {header!r} is not a valid header name")
    api_limit = ApiLimit(concurrency=api.get("concurrency"), quota=api.get("quota"), header=header)
    return Profile(rules=tuple(rules), api_limit=api_limit)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a JSON (or, for *.toml, TOML) profile file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProfileError("no such file") from None
    except OSError as exc:
        raise ProfileError(f"cannot read: {exc.strerror or exc}") from exc
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise ProfileError(f"not UTF-8 text: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"invalid TOML: {_one_line(exc)}") from exc
    except json.JSONDecodeError as exc:
        raise ProfileError(f"invalid JSON: {_one_line(exc)}") from exc
    return parse_profile(data)


def check_api_header(name: str) -> str:
    if not _HEADER_TOKEN.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid header name")
    return name


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
