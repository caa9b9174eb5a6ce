"""What a crawl may fetch: which hosts, how deep, and which URLs the trap guards let through,
checked on canonical URLs.

Hosts, by default: a link is in scope when its host is the host of the page it was found on,
so a crawl stays on its seeds' hosts. A redirect's target and a sitemap that robots.txt names
may change host (``http://x/`` answering with ``https://www.x/`` is the seed moving, not the
crawl wandering: Heritrix's seed-redirect rule), and a seed or a submitted URL has no source:
its host is the scope. The rule needs nothing but the URL and where it was found, so every
node of a cluster applies it alike, also to URLs a peer forwarded (a node does not know its
peers' seeds). ``--allow-host`` globs replace the rule; ``*`` lets any host in.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from crawler_node.core.outcomes import Rejection
from crawler_node.core.traps import NO_TRAP_RULES, TrapRules
from crawler_node.core.urls import bare_host, host_of, idna_encode

ANY_HOST = "*"


class Scope:
    """Which canonical URLs this crawl is allowed to fetch."""

    def __init__(self, *, allow_hosts: Sequence[str] = (), max_depth: int | None = None,
                 traps: TrapRules = NO_TRAP_RULES) -> None:
        """``allow_hosts``: host globs (empty: the same-host rule; ``*``: any host);
        ``max_depth``: links followed from a seed, at most (None: no limit)."""
        if isinstance(allow_hosts, str):
            raise TypeError("allow_hosts must be a sequence of globs, not one string")
        if max_depth is not None and max_depth < 0:
            raise ValueError(f"max_depth must be >= 0 or None, got {max_depth}")
        self.allow_hosts = tuple(_glob_host(pattern) for pattern in allow_hosts)
        self.max_depth = max_depth
        self.traps = traps
        self.any_host = ANY_HOST in self.allow_hosts
        # One compiled alternation instead of a Python loop of fnmatch calls per URL. A glob
        # "*.example.org" also names the apex example.org: who allows a domain's hosts means it.
        self._allowed = (
            re.compile("|".join(fnmatch.translate(p) for glob in self.allow_hosts for p in _with_apex(glob)))
            if self.allow_hosts and not self.any_host
            else None
        )
        self._traps = traps if traps.active else None

    def too_deep(self, depth: int) -> bool:
        return self.max_depth is not None and depth > self.max_depth

    def check(self, url: str, depth: int, source_host: str | None = None) -> Rejection | None:
        """None when ``url`` (canonical) at ``depth`` is in scope, else the reason it is not.
        ``source_host``: the host[:port] of the page the URL was found on; None for a URL that
        may change host (a seed, a submitted URL, a redirect's target, a sitemap robots.txt
        names: see ``source_of``)."""
        if self.max_depth is not None and depth > self.max_depth:
            return Rejection.TOO_DEEP
        if not self.any_host:
            if self._allowed is None:
                if source_host is not None and host_of(url) != source_host:
                    return Rejection.HOST_NOT_ALLOWED
            else:
                host_port = host_of(url)
                # A glob may name the bare host ("*.example.com") or host:port ("localhost:8080").
                if not (self._allowed.match(host_port) or self._allowed.match(bare_host(host_port))):
                    return Rejection.HOST_NOT_ALLOWED
        if self._traps is not None:
            return self._traps.check(url)
        return None

    def split(self, links: Sequence[str], depth: int,
              source_host: str | None) -> tuple[list[str], list[tuple[str, Rejection]]]:
        """``check`` over the links of one page (the parser's hot path): those in scope, and
        the others with their reasons."""
        traps = self._traps
        if self.any_host and traps is None and not self.too_deep(depth):
            return list(links), []
        kept: list[str] = []
        rejected: list[tuple[str, Rejection]] = []
        if self.too_deep(depth) or self._allowed is not None or source_host is None:
            check = self.check
            for link in links:
                reason = check(link, depth, source_host)
                if reason is None:
                    kept.append(link)
                else:
                    rejected.append((link, reason))
            return kept, rejected
        # The default rule, inlined for the parser: a canonical link on the page's host starts
        # with one of these (host_of decides the rest, such as a URL without a path).
        same_host = (f"http://{source_host}/", f"https://{source_host}/")
        any_host = self.any_host
        for link in links:
            if not (any_host or link.startswith(same_host) or host_of(link) == source_host):
                rejected.append((link, Rejection.HOST_NOT_ALLOWED))
            elif traps is not None and (reason := traps.check(link)) is not None:
                rejected.append((link, reason))
            else:
                kept.append(link)
        return kept, rejected


def source_of(via: str | None, redirects: int) -> str | None:
    """The host a URL that arrives with ``via`` (the page it was found on) and ``redirects``
    (hops it took to get here) must share to be in scope by the same-host rule; None when it
    may change host: a seed or a submitted URL (no via), a redirect's target, or a sitemap
    named by robots.txt (its via is that robots.txt)."""
    if via is None or redirects > 0:
        return None
    # Its path is part of it: without the words, no need to split it (a split per URL was a
    # third of what a member spent taking in a peer's batch).
    if "/robots.txt" in via and urlsplit(via).path == "/robots.txt":
        return None
    return host_of(via)


def _with_apex(glob: str) -> tuple[str, ...]:
    return (glob, glob[2:]) if glob.startswith("*.") and len(glob) > 2 else (glob,)


def _glob_host(pattern: str) -> str:
    pattern = pattern.strip().lower().rstrip(".")
    if not pattern:
        raise ValueError("an allow_hosts glob must not be empty")
    if pattern.isascii():
        return pattern
    # Hosts are compared in their IDNA form, so encode the non-glob labels of the pattern.
    labels = [
        label if label.isascii() or any(c in label for c in "*?[") else idna_encode(label)
        for label in pattern.split(".")
    ]
    return ".".join(labels)
