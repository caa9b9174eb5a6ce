"""Liveness and membership traffic: heartbeats, join, leave.

Every ``interval_s`` each peer is asked ``GET /v1/members``; its answer is evidence that it is
alive, and its member list spreads joiners (anti-entropy: a joiner told to one member reaches
all the others through their next heartbeat). A member asks with the digest of the peer's list
it last merged (``?known=``), and the peer leaves the list out while it is unchanged, and with
its own id (``?from=``), so that the per-IP part carries only its acknowledgement: an answer
costs the same whatever the cluster's size. An answer that is not what a member says — the
wrong shape, wrong types, not JSON, or signed with another member's id (``node_id``: an
address now held by another member is not the member that had it) — counts as a failed
heartbeat and is logged; it never ends the heartbeats. The round is a recurring job: whatever
fails, it runs again, so a dead peer is always detected.

While a starting member holds back its first lease (cluster.readiness), every answer and every
failure is reported to its :class:`StartupHold`, and peers that have not answered yet are asked
again every ``STARTUP_POLL_S`` instead of every ``interval_s``: a peer that starts a moment
later is heard from at once, so the hold ends as soon as the cluster is up. A member that
may be owed a handback then asks every ``OWED_POLL_S`` until no peer says it still owes one
(``"handback_owed"`` in the answer to it).

The answers also carry each member's :class:`~crawler_node.cluster.activity.Activity` (idle,
pages fetched, URLs known, finished, paused), kept per peer until a heartbeat to it fails: an
idle member reads the statuses only when they could change what it says (cluster.activity).
One of the wrong shape is a bad answer; an answer without one (a member from before it)
leaves the peer's unknown.

The answers also carry each member's per-IP announcement (``"ips"``, cluster.ipshare): the
addresses it fetches from and its acknowledgement of the others'. A heartbeat hands the
peer's announcement to the :class:`IpShareLink`; one of the wrong shape is a bad answer.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from crawler_node.cluster.activity import Activity, parse_activity
from crawler_node.cluster.ipshare import Announcement, parse_announcement
from crawler_node.cluster.membership import DIGEST_CHARS, Membership, PeerState, member_problem, parse_view
from crawler_node.cluster.peer_client import BadPeerAnswer, PeerClient, PeerUnreachable
from crawler_node.cluster.readiness import StartupHold
from crawler_node.runtime.supervisor import Supervisor

log = logging.getLogger("crawler_node.cluster")

JOIN_DEADLINE_S = 30.0
# While a start-up hold waits for a peer's first answer: ask this often (a refused connection on
# a peer not yet listening costs next to nothing; the hold's reason to exist is time lost).
STARTUP_POLL_S = 0.05
# While it waits for peers that still owe it a handback: ask them this often (their sweep and
# outbox take a moment; the answer that says they are done should not wait a whole interval).
OWED_POLL_S = 0.2
_DIGEST = re.compile(rf"[0-9a-f]{{{DIGEST_CHARS}}}")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class HeartbeatsSnapshot:
    """The status's ``cluster.heartbeats``, by peer."""

    failures: Mapping[str, int]  # heartbeats that failed
    bad_answers: Mapping[str, int]  # answers that were not member lists


class IpShareLink(Protocol):
    """The per-IP shares' side of the heartbeats (node.ip_gates.IpGates)."""

    def announcement(self) -> dict[str, Any] | None: ...  # what this node's answers carry; None: it does not share

    def heard(self, peer_id: str, announcement: Announcement | None) -> None: ...

    def peers_live(self, live: Iterable[str]) -> None: ...

    def refresh(self) -> None: ...  # once per round: addresses no longer used leave the announcement


def parse_members_answer(answer: object, known: str | None = None) -> tuple[list[tuple[str, str]], bool]:
    """``{"members": [...], "leaving": bool?}`` as (members, leaving); BadPeerAnswer otherwise.
    ``known``: the digest of the peer's list asked with (``?known=``); an answer without a list
    is one whose ``members_digest`` is that, and it lists nothing new."""
    if not isinstance(answer, dict):
        raise BadPeerAnswer(f"expected an object, got {type(answer).__name__}")
    leaving = answer.get("leaving", False)
    if not isinstance(leaving, bool):
        raise BadPeerAnswer(f"leaving must be true or false, got {type(leaving).__name__}")
    if "members" not in answer and known is not None and answer.get("members_digest") == known:
        return [], leaving
    try:
        return parse_view(answer.get("members")), leaving
    except ValueError as exc:
        raise BadPeerAnswer(str(exc)) from exc


def members_digest(answer: object) -> str | None:
    """The digest of the member list an answer carries (cluster.membership.digest), if it has
    both and the digest looks like one."""
    if not isinstance(answer, dict) or "members" not in answer:
        return None
    digest = answer.get("members_digest")
    return digest if isinstance(digest, str) and _DIGEST.fullmatch(digest) else None


def drained_of(answer: object) -> bool:
    """A leaving member's heartbeat answer says whether it has handed all its work on
    (``"drained": true``); absent, or anything but true, it has not."""
    return isinstance(answer, dict) and answer.get("drained") is True


def state_reported(answer: object, node_id: str) -> str | None:
    """The state a member list answer gives ``node_id`` (``"alive"``, ``"down"``...), or None."""
    members = answer.get("members") if isinstance(answer, dict) else None
    for item in members if isinstance(members, list) else ():
        if isinstance(item, dict) and item.get("id") == node_id:
            state = item.get("state")
            return state if isinstance(state, str) else None
    return None


def handback_owed_of(answer: object) -> bool | None:
    """Whether the answering member still owes the asking one a handback
    (``"handback_owed"``, cluster.readiness rule 3); None when it does not say."""
    owed = answer.get("handback_owed") if isinstance(answer, dict) else None
    return owed if isinstance(owed, bool) else None


def answer_part(answer: object, key: str, parse: Callable[[object], _T]) -> _T:
    """``parse`` of one part of a member list answer (already checked to be an object): the
    per-IP announcement (``"ips"``, cluster.ipshare), the activity (``"activity"``,
    cluster.activity). One of the wrong shape makes the answer a bad one."""
    assert isinstance(answer, dict)
    try:
        return parse(answer.get(key))
    except ValueError as exc:  # BadAnnouncement is one
        raise BadPeerAnswer(str(exc)) from exc


class Heartbeats:
    def __init__(self, *, membership: Membership, advertise_url: str, interval_s: float, client: PeerClient,
                 supervisor: Supervisor, on_changed: Callable[[str], None], on_member: Callable[[str], None],
                 clock: Callable[[], float], ip_link: IpShareLink | None = None,
                 on_incarnation: Callable[[str, str], None] | None = None) -> None:
        """``on_changed(why)``: the live set or the member list changed; ``on_member(id)``: a
        member is known now (its outbox sender must exist). A heartbeat's answer is waited for
        as long as ``client``'s timeouts say."""
        self._membership = membership
        self._node_id = membership.self_id
        self._advertise_url = advertise_url
        self._interval_s = interval_s
        self.client = client  # every request to a member goes through it
        self._supervisor = supervisor
        self._on_changed = on_changed
        self._on_member = on_member
        self._clock = clock
        self.failures: Counter[str] = Counter()  # failed heartbeats, by peer
        self.bad_answers: Counter[str] = Counter()  # answers that were not member lists, by peer
        self._ip = ip_link  # the per-IP shares, agreed through the answers (None: not shared)
        self._on_incarnation = on_incarnation  # told what each answer says its frontier is
        self._startup: StartupHold | None = None
        self._next_full_round = 0.0  # monotonic
        # The digest of each peer's member list as its last answer with one gave it: asked
        # with it, a peer leaves an unchanged list out of its answer (api.app get_members).
        self._digests: dict[str, str] = {}
        # Each peer's activity as its last answer gave it; gone once a heartbeat to it fails.
        self.activity: dict[str, Activity] = {}
        # ... and the last one heard, kept when it goes silent: a member down with work still
        # knows and finished what it said last, so the cluster's progress does not go backwards.
        self.last_activity: dict[str, Activity] = {}
        # ... and what a read of its status (api.status.cluster_status) said last, kept the same way
        self.last_read: dict[str, Activity] = {}

    def watch_startup(self, hold: StartupHold) -> None:
        """Report answers and failures to a starting member's hold until it ends."""
        self._startup = hold
        self._check_startup()

    def start(self) -> None:
        self._supervisor.recurring("heartbeats", self.round)

    def snapshot(self) -> HeartbeatsSnapshot:
        return HeartbeatsSnapshot(failures=dict(self.failures), bad_answers=dict(self.bad_answers))

    # ----------------------------------------------------------------- heartbeats
    async def round(self) -> None:
        started = time.monotonic()
        peers = self._membership.peers()
        hold = self._startup
        if hold is not None and hold.wants_answers() and started < self._next_full_round:
            # between the rounds at interval_s, only the peers not heard from yet
            peers = [m for m in peers if hold.awaits(m.node_id)]
        else:
            self._next_full_round = started + self._interval_s
        await asyncio.gather(*(self._heartbeat(m.node_id, m.url) for m in peers))
        if self._membership.tick(self._clock()):
            self._on_changed("liveness changed")
        if self._ip is not None:
            self._ip.refresh()
        self._check_startup()
        interval = self._interval_s
        if self._startup is not None and self._startup.wants_answers():
            interval = min(interval, STARTUP_POLL_S)
        elif self._startup is not None and self._startup.owed():
            interval = min(interval, OWED_POLL_S)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    def _check_startup(self) -> None:
        hold = self._startup
        if hold is not None:
            hold.check(self._membership.peers(), self._clock())
            if not hold.holding:
                self._startup = None

    async def _heartbeat(self, node_id: str, url: str) -> None:
        params = {"from": self._node_id}
        # A start-up hold reads the states the list gives this node (state_reported): the whole
        # list until the hold ends.
        known = self._digests.get(node_id) if self._startup is None else None
        if known is not None:
            params["known"] = known
        try:
            reply = await self.client.members(url, to=node_id, params=params)
            if reply.status == 421:  # another member's address now (api.app.misdirected_is_421)
                raise BadPeerAnswer(f"{url} is another member's address now")
            if reply.status != 200:
                self._failed(node_id)
                return
            answer = reply.json()
            members, leaving = parse_members_answer(answer, known)
            answered_as = answer.get("node_id") if isinstance(answer, dict) else None
            if isinstance(answered_as, str) and answered_as != node_id:
                # Its address now belongs to another member (a pod or container restarted
                # with an address another member had): that member's answers must not keep
                # this one alive, nor its list pass for this one's.
                raise BadPeerAnswer(f"{url} answered as {answered_as!r}")
            ips = answer_part(answer, "ips", parse_announcement) if self._ip is not None else None
            activity = answer_part(answer, "activity", parse_activity)
        except BadPeerAnswer as exc:
            self.bad_answers[node_id] += 1
            if self.bad_answers[node_id] in (1, 10, 100) or self.bad_answers[node_id] % 1000 == 0:
                log.warning("%s answered a heartbeat with something else than a member list (%s); "
                            "counted as a failure (%d so far)", node_id, exc, self.bad_answers[node_id])
            self._failed(node_id)
            return
        except (PeerUnreachable, ValueError):
            self._failed(node_id)
            return
        now = self._clock()
        if activity is None:
            self.activity.pop(node_id, None)
        else:
            self.activity[node_id] = self.last_activity[node_id] = activity
        if leaving:
            # Still answering while it drains, but its arc is already its successors'.
            if self._membership.observe_leave(node_id, now, drained=drained_of(answer)):
                self._on_changed(f"{node_id} is leaving")
            return
        if self._membership.observe_ok(node_id, now, returning=True):
            self._on_changed(f"{node_id} is alive")
        if self._startup is not None:
            self._startup.heard(node_id, state_reported(answer, self._node_id), handback_owed_of(answer))
        if self._ip is not None:
            self._ip.heard(node_id, ips)
        incarnation = answer.get("incarnation") if isinstance(answer, dict) else None
        if self._on_incarnation is not None and isinstance(incarnation, str):
            self._on_incarnation(node_id, incarnation)  # its frontier's name (cluster.replica_keeper)
        new = self._membership.merge(members, now)
        if (digest := members_digest(answer)) is not None:
            self._digests[node_id] = digest  # merged: asked with it, the same list is left out
        for peer in new:
            self._on_member(peer)
        if new:
            self._on_changed(f"learnt {', '.join(new)} from {node_id}")
        self._check_startup()

    def _failed(self, node_id: str) -> None:
        self.failures[node_id] += 1
        self.activity.pop(node_id, None)
        if self._membership.observe_failure(node_id, self._clock()):
            self._on_changed(f"{node_id} is down")
            self._check_startup()

    # ----------------------------------------------------------------- join and leave
    async def join(self) -> None:
        """Ask the configured members, in turn, to let this node in; adopt their view."""
        body = {"id": self._node_id, "url": self._advertise_url}
        deadline = time.monotonic() + JOIN_DEADLINE_S
        while time.monotonic() < deadline:
            for member in self._membership.peers():
                try:
                    reply = await self.client.join(member.url, body, to=member.node_id)
                    if reply.status == 200:
                        members, _ = parse_members_answer(reply.json())
                        self._membership.merge(members, self._clock())
                        self._membership.observe_ok(member.node_id, self._clock())
                        self._on_changed(f"joined through {member.node_id}")
                        return
                    log.warning("join through %s refused: HTTP %s", member.node_id, reply.status)
                except (PeerUnreachable, ValueError) as exc:
                    log.warning("join through %s failed: %s", member.node_id, exc)
            await asyncio.sleep(1.0)
        log.error("could not join through any of %s; running with the configured view", self._membership.ids())

    def accept_join(self, node_id: str, url: str) -> list[dict[str, str]]:
        problem = member_problem(node_id, url)
        if problem is not None:
            raise ValueError(problem)
        now = self._clock()
        if self._membership.add(node_id, url, now):
            self._membership.observe_ok(node_id, now)
            self._on_member(node_id)
            self._on_changed(f"{node_id} joined")
            for member in self._membership.peers():
                if member.node_id != node_id:
                    self._supervisor.once(f"announce:{member.node_id}",
                                          self.client.tell(member.url, "/v1/join", {"id": node_id, "url": url}))
        return self._membership.view()

    def accept_leave(self, node_id: str, *, drained: bool = False) -> None:
        if self._membership.observe_leave(node_id, self._clock(), drained=drained):
            self._on_changed(f"{node_id} left")

    async def announce_leave(self, *, drained: bool = False) -> None:
        """Tell the peers this node is leaving; ``drained``: and that its queue and outbox are
        handed on and acknowledged, so it holds no work (until then, a peer counts it as a
        member that is down with work, and the cluster is not idle)."""
        body = {"id": self._node_id, "url": self._advertise_url, "drained": drained}
        await asyncio.gather(*(self.client.tell(m.url, "/v1/leave", body)
                               for m in self._membership.peers() if m.state is not PeerState.DOWN))
