"""What a crawl may fetch: host globs and a depth limit, checked on canonical URLs."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from crawler_node.core.urls import bare_host, host_of, idna_encode


class Scope:
    """Which canonical URLs this crawl is allowed to fetch."""

    def __init__(self, *, allow_hosts: Sequence[str] = (), max_depth: int | None = None) -> None:
        if isinstance(allow_hosts, str):
            raise TypeError("allow_hosts must be a sequence of globs, not one string")
        if max_depth is not None and max_depth < 0:
            raise ValueError(f"max_depth must be >= 0 or None, got {max_depth}")
        self.allow_hosts = tuple(_glob_host(pattern) for pattern in allow_hosts)
        self.max_depth = max_depth
        # One compiled alternation instead of a Python loop of fnmatch calls per URL.
        self._allowed = (
            re.compile("|".join(fnmatch.translate(p) for p in self.allow_hosts))
            if self.allow_hosts
            else None
        )

    def too_deep(self, depth: int) -> bool:
        return self.max_depth is not None and depth > self.max_depth

    def check(self, url: str, depth: int) -> str | None:
        """None when ``url`` (canonical) at ``depth`` is in scope, else the reason it is not."""
        if self._allowed is not None:
            host_port = host_of(url)
            # A glob may name the bare host ("*.example.com") or host:port ("localhost:8080").
            if not (
                self._allowed.match(host_port) or self._allowed.match(bare_host(host_port))
            ):
                return "host_not_allowed"
        if self.max_depth is not None and depth > self.max_depth:
            return "too_deep"
        return None


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
