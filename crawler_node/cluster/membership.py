"""Who is in the cluster and who is alive: a pure state machine fed with evidence.

Evidence is active (heartbeat answered or not) and passive (a forward that failed or timed
out). A peer is ``alive`` while it answered recently, ``suspect`` after ``suspect_after_s``
without an answer (still routed to: a hiccup must not move a whole arc), and ``down`` after
``down_after_s`` (its arc goes to the next live node clockwise until it answers again).
Hung peers (SIGSTOP: port open, no answers) and dead ones (SIGKILL) look the same here: no
answer within the heartbeat timeout.

The same evidence says whether this member may still be serving its hosts (:meth:`quorum`,
used by cluster.fencing): it must have heard from a majority within ``suspect_after_s``. Only
answers read while this process was running normally count for that: after the process itself
stood still (SIGSTOP, a paused VM, a starved event loop: no call here for ``suspect_after_s``),
the answers read in the next ``suspect_after_s`` may have been written before the pause, so
they keep peers alive (routing) but are not fresh evidence (fencing).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_ID_CHARS = 64
DIGEST_CHARS = 16  # of a member list's digest (Membership.digest): 64 bits
MAX_URL_CHARS = 300
# Ids reach every member's ring (hashed as UTF-8), logs, metrics labels and the outbox table:
# a short alphabet with nothing to hide (no control, bidirectional or unencodable characters).
_ID = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_ID_CHARS}}}")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")


def id_problem(node_id: object) -> str | None:
    """Why ``node_id`` cannot be a member's id, or None."""
    if not isinstance(node_id, str) or not _ID.fullmatch(node_id):
        return f"an id is 1 to {MAX_ID_CHARS} of the characters A-Z a-z 0-9 . _ -"
    return None


def url_problem(url: object) -> str | None:
    """Why ``url`` cannot be a member's URL, or None: ``http(s)://HOST:PORT`` and nothing else
    (a trailing "/" aside) -- no user info, path, query or fragment for a peer to smuggle."""
    if not isinstance(url, str) or not url.isascii() or not url.isprintable() or len(url) > MAX_URL_CHARS:
        return f"a URL is printable ASCII of at most {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "the URL does not parse"
    host = parts.netloc.rpartition(":")[0]
    if (parts.scheme not in ("http", "https") or port is None or port == 0 or not host or "@" in parts.netloc
            or not _HOST.fullmatch(host) or parts.path not in ("", "/") or parts.query or parts.fragment
            or "?" in url or "#" in url):
        return "a URL looks like http://HOST:PORT (or https), with no user, path, query or fragment"
    return None


def member_problem(node_id: object, url: object) -> str | None:
    """Why (node_id, url) cannot be a member, or None."""
    return id_problem(node_id) or url_problem(url)


class BadView(ValueError):
    """A peer's member list is not a list of members."""


def parse_view(view: object) -> list[tuple[str, str]]:
    """A peer's member list (``[{"id": ..., "url": ...}, ...]``) as (id, url) pairs. A value of
    the wrong shape (not a list of objects) raises BadView; members whose id or URL is not
    valid are skipped (junk from one peer must not reach every ring)."""
    if not isinstance(view, list):
        raise BadView(f"members must be a list, got {type(view).__name__}")
    members = []
    for item in view:
        if not isinstance(item, dict):
            raise BadView(f"a member must be an object, got {type(item).__name__}")
        node_id, url = item.get("id"), item.get("url")
        if member_problem(node_id, url) is None:
            members.append((str(node_id), str(url)))
    return members


class PeerState(enum.Enum):
    ALIVE = "alive"
    SUSPECT = "suspect"
    DOWN = "down"


@dataclass(slots=True)
class Member:
    node_id: str
    url: str
    last_ok: float
    last_failure: float = 0.0
    failures: int = 0  # consecutive
    state: PeerState = PeerState.ALIVE
    is_self: bool = False
    left: bool = False  # said goodbye (--handoff-on-exit): down at once, no waiting
    # ... and said its queue and outbox were handed on and acknowledged: it holds no work. A
    # member that left without saying so (killed while it drained) still holds some.
    drained: bool = False
    # The last answer that counts as fresh evidence for the quorum: never the start time
    # (last_ok starts there) and never an answer read just after this process stood still.
    heard_at: float | None = None


class Membership:
    def __init__(self, self_id: str, self_url: str, peers: dict[str, str], *, now: float,
                 suspect_after_s: float = 1.0, down_after_s: float = 2.5) -> None:
        if not 0 < suspect_after_s < down_after_s:
            raise ValueError("need 0 < suspect_after_s < down_after_s")
        self.self_id = self_id
        self.suspect_after_s = suspect_after_s
        self.down_after_s = down_after_s
        self._members: dict[str, Member] = {}
        self._digest: str | None = None  # of the (id, url) pairs (digest)
        self.version = 0  # bumped on every change that can move ring ownership
        for node_id, url in peers.items():
            if node_id != self_id:
                self._members[node_id] = Member(node_id, url.rstrip("/"), last_ok=now)
        self._members[self_id] = Member(self_id, self_url.rstrip("/"), last_ok=now, is_self=True)
        self._last_running: float | None = None  # the last call here: a long gap is a pause
        self._stale_until = float("-inf")  # answers read before this are not fresh evidence
        self._had_quorum = False
        self.pauses = 0  # times this process was found to have stood still
        # The last quorum answer: (asked at, the oldest fresh peer's heard_at or None, answer).
        # Asked before every request (cluster.fencing), it holds until that peer turns stale,
        # a member is heard from, added, or leaves: O(1) a request instead of O(members).
        self._quorum_memo: tuple[float, float | None, bool] | None = None
        # When the quorum came back after it was lost (None: never lost since the first one).
        self.quorum_regained_at: float | None = None

    # ---------------------------------------------------------------- queries
    def __contains__(self, node_id: str) -> bool:
        return node_id in self._members

    def get(self, node_id: str) -> Member | None:
        return self._members.get(node_id)

    def members(self) -> list[Member]:
        return sorted(self._members.values(), key=lambda m: m.node_id)

    def ids(self) -> list[str]:
        return sorted(self._members)

    def peers(self) -> list[Member]:
        return [m for m in self.members() if not m.is_self]

    def live_ids(self) -> set[str]:
        """Members that own their arc right now (alive or suspect)."""
        return {m.node_id for m in self._members.values() if m.state is not PeerState.DOWN}

    def url_of(self, node_id: str) -> str:
        return self._members[node_id].url

    # ---------------------------------------------------------------- evidence
    def observe_ok(self, node_id: str, now: float, *, returning: bool = False) -> bool:
        """A heartbeat or forward succeeded; returns True if this changed the live set.
        A member that left stays down on mere answers (it answers while it drains) until a
        heartbeat says it is back (``returning``: it no longer reports itself leaving)."""
        member = self._members.get(node_id)
        if member is None or member.is_self:
            return False
        self._note_evidence(member, now)
        member.last_ok = now
        member.failures = 0
        if member.left and not returning:
            return False
        member.left = member.drained = False
        self._quorum_memo = None
        return self._set_state(member, PeerState.ALIVE)

    def observe_failure(self, node_id: str, now: float) -> bool:
        member = self._members.get(node_id)
        if member is None or member.is_self:
            return False
        self._running(now)
        member.last_failure = now
        member.failures += 1
        return self._update(member, now)

    def observe_leave(self, node_id: str, now: float, *, drained: bool = False) -> bool:
        """The member is leaving (``drained``: and has handed all its work on)."""
        member = self._members.get(node_id)
        if member is None or member.is_self:
            return False
        member.left = True
        member.drained = member.drained or drained
        self._quorum_memo = None
        return self._set_state(member, PeerState.DOWN)

    def tick(self, now: float) -> bool:
        """Re-derive states from elapsed time; True if the live set changed."""
        self._running(now)
        changed = False
        for member in self._members.values():
            if not member.is_self:
                changed |= self._update(member, now)
        return changed

    def add(self, node_id: str, url: str, now: float) -> bool:
        """A member learnt through join or from a peer's view; True if it is new or moved."""
        url = url.rstrip("/")
        member = self._members.get(node_id)
        if member is not None:
            if member.url == url or member.is_self:
                return False
            member.url = url
            self._digest = None
            return True
        self._members[node_id] = Member(node_id, url, last_ok=now)
        self.version += 1
        self._digest = None
        self._quorum_memo = None
        return True

    def merge(self, view: Iterable[tuple[str, str]], now: float) -> list[str]:
        """Learn members from a peer's view, (id, url) pairs already checked with
        :func:`member_problem` (anti-entropy); returns the ids that were new."""
        new = []
        for node_id, url in view:
            if node_id not in self._members:
                self.add(node_id, url, now)
                new.append(node_id)
        return new

    def reset_clocks(self, now: float) -> None:
        for member in self._members.values():
            member.last_ok = max(member.last_ok, now)

    def set_self_leaving(self) -> None:
        me = self._members[self.self_id]
        me.left = True
        me.state = PeerState.DOWN
        self._quorum_memo = None
        self.version += 1

    # ---------------------------------------------------------------- quorum (cluster.fencing)
    def quorum(self, now: float) -> bool:
        """This member heard from a majority of the members within ``suspect_after_s``, itself
        counted, members that left not. Exactly half is a majority when it holds the smallest
        id, so that of two members that lost each other one goes on (the smaller id) and one
        stops. A member alone always has it."""
        self._running(now)
        memo = self._quorum_memo
        # Time going on only makes fresh members stale, the oldest first; until it does, the
        # answer stands (fresh is `now - heard_at < suspect_after_s`, monotone in both).
        if memo is not None and memo[0] <= now and (memo[1] is None or now - memo[1] < self.suspect_after_s):
            return memo[2]
        counted = [m for m in self._members.values() if m.is_self or not m.left]
        fresh = [m for m in counted
                 if m.is_self or (m.heard_at is not None and now - m.heard_at < self.suspect_after_s)]
        if 2 * len(fresh) == len(counted):
            answer = min(m.node_id for m in counted) in {m.node_id for m in fresh}
        else:
            answer = 2 * len(fresh) > len(counted)
        oldest = min((m.heard_at for m in fresh if not m.is_self and m.heard_at is not None), default=None)
        self._quorum_memo = (now, oldest, answer)
        return answer

    def _note_evidence(self, member: Member, now: float) -> None:
        """An answer from ``member``: fresh evidence unless read just after a pause; a quorum
        it brings back after one was lost is noted (the handback hold starts there)."""
        self._running(now)
        if now < self._stale_until:
            return
        had = self.quorum(now)
        member.heard_at = now
        self._quorum_memo = None
        if not had and self.quorum(now):
            if self._had_quorum:
                self.quorum_regained_at = now
            self._had_quorum = True

    def _running(self, now: float) -> None:
        # Heartbeat rounds call in here every interval: a gap longer than suspect_after_s means
        # this process stood still, and answers read right now may have been written before.
        last, self._last_running = self._last_running, now
        if last is not None and now - last > self.suspect_after_s:
            self._stale_until = now + self.suspect_after_s
            self.pauses += 1

    def view(self) -> list[dict[str, str]]:
        return [{"id": m.node_id, "url": m.url, "state": m.state.value} for m in self.members()]

    def digest(self) -> str:
        """Names the (id, url) pairs of :meth:`view`, all a peer's `merge` reads of it: a peer
        that holds the list of this digest learns nothing from it again (members are only
        ever added), so a heartbeat answer to it may leave the list out."""
        if self._digest is None:  # kept until a member is added or moves: asked twice a heartbeat
            listed = "\n".join(f"{m.node_id} {m.url}" for m in self.members())
            self._digest = hashlib.sha256(listed.encode()).hexdigest()[:DIGEST_CHARS]
        return self._digest

    # ---------------------------------------------------------------- internals
    def _update(self, member: Member, now: float) -> bool:
        if member.left:
            return self._set_state(member, PeerState.DOWN)
        silent = now - member.last_ok
        if silent >= self.down_after_s:
            state = PeerState.DOWN
        elif silent >= self.suspect_after_s:
            state = PeerState.SUSPECT
        else:
            state = PeerState.ALIVE
        return self._set_state(member, state)

    def _set_state(self, member: Member, state: PeerState) -> bool:
        if member.state is state:
            return False
        was_live = member.state is not PeerState.DOWN
        member.state = state
        if was_live != (state is not PeerState.DOWN):
            self.version += 1
            return True
        return False
