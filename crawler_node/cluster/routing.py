"""Which member crawls a host right now: the ring's owner if it is live, else the next live
member clockwise. Pure but for a bounded cache of answers, dropped whenever the membership's
version moves (a member added, gone down, back)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from crawler_node.cluster.membership import Membership
from crawler_node.cluster.ring import Ring, ring_key


class RingMember(TypedDict):
    id: str
    url: str
    state: str
    arc_share: float
    points: int


class RingOwner(TypedDict):
    """``GET /v1/ring?host=H``: who owns the host, by the ring and among the live members."""

    host: str
    owner: str
    successors: list[str]
    live_owner: str | None


class RingView(TypedDict):
    """``GET /v1/ring``: the ring as this node routes by it."""

    node_id: str
    vnodes: int
    key_by: str
    members: list[RingMember]
    points: NotRequired[list[tuple[int, str]]]  # with ?points=1: every point and its owner

ROUTE_CACHE_MAX = 100_000  # hosts; the cache is emptied when full (a crawl meets most hosts once)


class Router:
    def __init__(self, *, membership: Membership, weights: Mapping[str, int], vnodes: int, key_by: str) -> None:
        self.membership = membership
        self._node_id = membership.self_id
        self._weights = dict(weights)
        self._vnodes = vnodes
        self.key_by = key_by
        self._ring = Ring(self._ring_members(), vnodes=vnodes)
        self._version = membership.version
        self._routes: dict[str, str] = {}
        self._single = len(membership.ids()) == 1

    @property
    def is_single(self) -> bool:
        if self._version != self.membership.version:
            self.refresh()
        return self._single

    @property
    def ring(self) -> Ring:
        return self._ring

    def route(self, host: str) -> str | None:
        """The member that should crawl ``host`` now; None when that is this node."""
        if self._version != self.membership.version:
            self.refresh()
        if self._single:
            return None
        owner = self._routes.get(host)
        if owner is None:
            owner = self._ring.owner_among(ring_key(host, by=self.key_by), self.membership.live_ids())
            if owner is None:  # everyone is down, even this node (leaving): keep it
                owner = self._node_id
            if len(self._routes) >= ROUTE_CACHE_MAX:
                self._routes.clear()
            self._routes[host] = owner
        return None if owner == self._node_id else owner

    def serves(self, host: str) -> bool:
        return self.route(host) is None

    def successor_for(self, host: str) -> str | None:
        """Who would take ``host`` over if this node went away: it keeps a replica of what
        was fetched here, so a takeover does not fetch it all again."""
        live = self.membership.live_ids() - {self._node_id}
        return self._ring.owner_among(ring_key(host, by=self.key_by), live) if live else None

    def successor_if_served(self, host: str) -> str | None:
        """``host``'s successor when this node crawls it (what it queues or fetches of it is
        replicated there), else None: a host crawled elsewhere has its replica kept by its owner."""
        return self.successor_for(host) if self.serves(host) else None

    def owner_of(self, host: str) -> RingOwner:
        key = ring_key(host, by=self.key_by)
        return {"host": host, "owner": self._ring.owner(key), "successors": self._ring.successors(key),
                "live_owner": self._ring.owner_among(key, self.membership.live_ids())}

    def refresh(self) -> None:
        """Follow the membership: a new ring when the member set changed, new routes always."""
        membership = self.membership
        if self._version != membership.version:
            ids = membership.ids()
            if set(ids) != set(self._ring.nodes):
                self._ring = Ring(self._ring_members(), vnodes=self._vnodes)
            self._single = len(ids) == 1
            self._version = membership.version
            self._routes.clear()

    def _ring_members(self) -> dict[str, int]:
        return {node_id: self._weights.get(node_id, 1) for node_id in self.membership.ids()}

    def snapshot(self) -> RingView:
        shares = self._ring.arc_shares()
        points: dict[str, int] = {}
        for _, owner in self._ring.points():
            points[owner] = points.get(owner, 0) + 1
        return {
            "node_id": self._node_id,
            "vnodes": self._vnodes,
            "key_by": self.key_by,
            "members": [{"id": m.node_id, "url": m.url, "state": m.state.value,
                         "arc_share": round(shares.get(m.node_id, 0.0), 6), "points": points.get(m.node_id, 0)}
                        for m in self.membership.members()],
        }
