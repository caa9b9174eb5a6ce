"""The consistent-hash ring that decides which node crawls which host (pure, immutable).

Points are ketama-compatible (uhashring with ``hash_fn="ketama"``: md5, 4 points per
virtual node) so the placement can be checked against any ketama implementation. A node's
points depend only on its id and weight, never on who else is in the ring, so membership
changes move only the keys of the node that joined or left.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from functools import cache

from publicsuffixlist import PublicSuffixList
from uhashring import HashRing

from crawler_node.core.urls import bare_host

RING_SIZE = 2**32
DEFAULT_VNODES = 160


class Ring:
    """Which node owns a key, and who is next clockwise when it is gone."""

    def __init__(self, nodes: Mapping[str, int] | Iterable[str], *, vnodes: int = DEFAULT_VNODES) -> None:
        if isinstance(nodes, str):
            raise TypeError("nodes must be a collection of node ids, not one string")
        if vnodes < 1:
            raise ValueError(f"vnodes must be >= 1, got {vnodes}")
        weights = dict(nodes) if isinstance(nodes, Mapping) else dict.fromkeys(nodes, 1)
        for node_id, weight in weights.items():
            if not node_id or not isinstance(node_id, str):
                raise ValueError(f"node ids must be non-empty strings, got {node_id!r}")
            if not isinstance(weight, int) or weight < 1:
                raise ValueError(f"weight of {node_id!r} must be an int >= 1, got {weight!r}")
        self._weights = weights
        self._vnodes = vnodes
        self._hash_ring = _build_hash_ring(weights, vnodes)
        # The sorted point list is read-only after construction; cached for arc and
        # clockwise walks so they do not re-materialise it per call.
        points = self._hash_ring.get_points()
        self._points = [point for point, _ in points]
        self._owners = [node for _, node in points]
        self._shares: dict[str, float] | None = None  # arc_shares, computed on first use

    @property
    def nodes(self) -> list[str]:
        return sorted(self._weights)

    @property
    def weights(self) -> dict[str, int]:
        return dict(self._weights)

    @property
    def vnodes(self) -> int:
        return self._vnodes

    def __len__(self) -> int:
        return len(self._weights)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._weights

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ring):
            return NotImplemented
        return self._weights == other._weights and self._vnodes == other._vnodes

    def __hash__(self) -> int:
        return hash((frozenset(self._weights.items()), self._vnodes))

    def __repr__(self) -> str:
        return f"Ring({self._weights!r}, vnodes={self._vnodes})"

    @staticmethod
    def key_point(key: str) -> int:
        """The key's position on the ring (ketama hash), 0 <= point < 2**32."""
        return _KETAMA_HASH(key)

    def owner(self, key: str) -> str:
        if not self._points:
            raise LookupError("the ring has no nodes")
        return self._owners[self._index_of(key)]

    def successors(self, key: str, n: int | None = None) -> list[str]:
        """Distinct nodes clockwise after the key's owner (the owner itself excluded)."""
        limit = len(self._weights) - 1 if n is None else min(n, len(self._weights) - 1)
        if limit <= 0:
            return []
        walk = self._clockwise(key)
        next(walk)  # the owner
        return [node for node, _ in zip(walk, range(limit), strict=False)]  # the first `limit` of the walk

    def owner_among(self, key: str, live: Collection[str]) -> str | None:
        """The first node clockwise from the key (owner first) that is in ``live``."""
        for node in self._clockwise(key):
            if node in live:
                return node
        return None

    def points(self) -> list[tuple[int, str]]:
        """Every (point, node) on the ring, in clockwise order."""
        return list(zip(self._points, self._owners, strict=True))

    def arc_shares(self) -> dict[str, float]:
        """Fraction of the 2**32 ring each node owns. Computed once (a ring never changes):
        every /v1/status shows it, and the walk over all points was most of that request."""
        if self._shares is None:
            self._shares = self._arc_shares()
        return dict(self._shares)

    def _arc_shares(self) -> dict[str, float]:
        shares = dict.fromkeys(self._weights, 0.0)
        if not self._points:
            return shares
        # A key hashing to h belongs to the first point > h (wrapping), so point i owns
        # [point[i-1], point[i]); point 0 also owns the wrap-around from the last point.
        previous = self._points[-1] - RING_SIZE
        for point, node in zip(self._points, self._owners, strict=True):
            shares[node] += (point - previous) / RING_SIZE
            previous = point
        return shares

    def with_node(self, node_id: str, weight: int = 1) -> Ring:
        return Ring({**self._weights, node_id: weight}, vnodes=self._vnodes)

    def without_node(self, node_id: str) -> Ring:
        if node_id not in self._weights:
            raise KeyError(node_id)
        weights = {node: w for node, w in self._weights.items() if node != node_id}
        return Ring(weights, vnodes=self._vnodes)

    def _index_of(self, key: str) -> int:
        # Same lookup as HashRing.get_node (first point strictly greater, wrapping); done
        # here on the cached point list so owner() and the clockwise walk always agree.
        index = bisect_right(self._points, _KETAMA_HASH(key))
        return 0 if index == len(self._points) else index

    def _clockwise(self, key: str) -> Iterator[str]:
        """Distinct nodes in clockwise order from the key's point, owner first."""
        if not self._points:
            return
        start = self._index_of(key)
        seen: set[str] = set()
        count = len(self._points)
        for offset in range(count):
            node = self._owners[(start + offset) % count]
            if node not in seen:
                seen.add(node)
                yield node
                if len(seen) == len(self._weights):
                    return


def ring_key(host: str, *, by: str = "host") -> str:
    """The ring key of a ``host[:port]`` from :func:`crawler_node.core.urls.host_of`.

    ``by="host"`` keys on the host as given (lower-cased). ``by="domain"`` keys on the
    registrable domain by the public suffix list (port dropped), so all subdomains of a site
    land on one node. A host with no registrable domain keys by itself: an IP literal, a
    single-label host (``localhost``), a public suffix itself (``co.uk``, ``github.io``).
    """
    host = host.strip().lower()
    if by == "host":
        return host
    if by != "domain":
        raise ValueError(f"by must be 'host' or 'domain', got {by!r}")
    name = bare_host(host).rstrip(".")
    if name.startswith("[") or name.replace(".", "").isdigit():
        return name  # an IP literal is its own domain (the list would make 10.0.0.1 "0.1")
    return _suffix_list().privatesuffix(name) or name


# The public suffix list, by the `publicsuffixlist` package: a plain pure-Python lookup on the
# copy of the list bundled in its wheel, read from there, never downloaded at run time.
#
# Why this library. µs per lookup on a crawler's host mix (4,000 hosts: 35% testweb
# site-N.test, 40% names under 21 real and private suffixes, punycode IDNs among them, 10%
# IPv4/IPv6 literals, single-label hosts, 10% with a port; median of 7 rounds, one process on
# this 2-core machine shared with other work), and the PSL project's 77 tests/test_psl.txt
# vectors (tests/data/psl/):
#   publicsuffixlist 1.1.2.20261023   2.2-3.4 µs   77/77 right   1.7 MiB, 37 ms to load
#   tldextract 5.4.0 (snapshot, no cache) 4.1-8.1 µs   74/77 (an unlisted TLD is no suffix to it:
#       b.example.example stays whole)   15 MiB; it also wants a cache directory and URLs turned off
#   psl 2025.5.26                     4,500 µs      66/77 (refuses Unicode IDNs); last release 2025
#   the 12 second-level labels before 0.7 µs       48/77
# The router caches a host's owner, so a lookup is paid about once per host, not per URL.
#
# The private section is included (the package's default): github.io, blogspot.com and the
# like are suffixes under which each name has its own owner, so user.github.io is a
# registrable domain and keys apart from other.github.io. Servers such owners share are the
# per-IP limit's business, not the ring's.
#
# Updating the list: each publicsuffixlist release bundles the list of its day (the date is the
# version's last part, 20261023 = 2026-10-23). `pip install -U publicsuffixlist` brings the
# newest; to require one, raise the floor in pyproject.toml (publicsuffixlist>=1.1.2.YYYYMMDD).
# Its `publicsuffixlist.update` module downloads a list into the installed package: a
# maintenance step, never done by the node. Members must run the same list to agree on every
# key (docs/cluster.md).
@cache
def _suffix_list() -> PublicSuffixList:
    # Loaded on the first by="domain" key (37 ms once), not at import: host keying never pays.
    # Immutable once built, and its lookups are thread-safe (the package says so).
    # accept_unknown: the PSL's default rule "*", so an unlisted TLD is a suffix and
    # testweb's site-7.test is a registrable domain, as a.b.example.example is example.example.
    return PublicSuffixList(only_icann=False, accept_unknown=True)


def _build_hash_ring(weights: Mapping[str, int], vnodes: int) -> HashRing:
    # Each node gets vnodes * weight virtual nodes at weight 1. uhashring's ketama runtime
    # scales points by weight / mean weight, so its own weights would move every node's
    # points whenever a node with a different weight joined; this way a node's points
    # depend on nothing but itself. Sorted insertion makes the (rare) 32-bit point
    # collision resolve the same way on every node whatever order members were learnt in.
    config = {node: {"vnodes": vnodes * weights[node], "weight": 1} for node in sorted(weights)}
    return HashRing(config, hash_fn="ketama")


_KETAMA_HASH = HashRing([], hash_fn="ketama").hashi
