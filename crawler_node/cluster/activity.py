"""What a member's heartbeat answer says of its work, so that an idle member asks the others for
their statuses only when that could change what it says.

A member's progress log (daemon.ProgressLog) says "crawl finished" once the cluster is idle, and
to know it, it reads every peer's status (``GET /v1/status?scope=local``, some kB that list every
member): N-1 reads every few seconds on each of N members while the cluster sits idle, and on a
member that finished its arc while the others crawl on. Each heartbeat answer carries instead
the answering member's :class:`Activity` (idle or not, pages fetched, URLs known and finished,
paused or not), and
:func:`idle_check` decides from those alone whether a round needs the statuses:

- a peer that says it is busy (and nobody is paused) makes the cluster busy: no read needed;
- when every peer said the same as at the last read, and that read found the cluster idle,
  another read would find it idle again: none is needed either;
- anything else (a peer without an activity, an older member's answer, one down, a pause, a
  change of fetched pages) reads the statuses as before, and they decide.

An activity is at most a heartbeat interval plus the frontier's last totals old (a second,
api.status.node_activity): it only spares a read, it never decides an idle cluster on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class Activity:
    idle: bool
    # A member busy for a while between two heartbeats has fetched more (a recrawl), or knows
    # more URLs (links that all ended without a fetch: robots.txt, a page cap): it is read again.
    fetched: int  # fetch attempts it stored
    known: int  # URLs in its frontier, in any state
    paused: bool  # an operator's pause (crawler-node pause)
    finished: int = 0  # of those known, done or failed (a progress line's share)

    def as_json(self) -> dict[str, bool | int]:
        return {"idle": self.idle, "fetched": self.fetched, "known": self.known, "finished": self.finished,
                "paused": self.paused}


def parse_activity(value: object) -> Activity | None:
    """The ``activity`` of a heartbeat answer: None when absent (a member from before it);
    ValueError when it is not ``{"idle": bool, "fetched": int >= 0, "known": int >= 0,
    "finished": int >= 0, "paused": bool}`` ("finished" may be left out: 0)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"activity must be an object, got {type(value).__name__}")
    idle, paused = value.get("idle"), value.get("paused")
    if not isinstance(idle, bool) or not isinstance(paused, bool):
        raise ValueError("activity.idle and activity.paused must be true or false")
    counts = []
    for name in ("fetched", "known", "finished"):
        count = value.get(name, 0) if name == "finished" else value.get(name)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"activity.{name} must be an integer >= 0, got {count!r}")
        counts.append(count)
    return Activity(idle, counts[0], counts[1], paused, counts[2])


@dataclass(frozen=True, slots=True)
class PeerActivity:
    """A peer as this member's heartbeats see it: its state ("alive", "down"...), whether it
    left, and its last answer's activity (None: none yet, or an answer without one)."""

    node_id: str
    state: str
    left: bool
    activity: Activity | None


class Check(Enum):
    READ = "read"  # read the peers' statuses: they decide
    BUSY = "busy"  # a peer is busy: the cluster is not idle
    UNCHANGED = "unchanged"  # as at the last read, which found the cluster idle


View = tuple[Activity, tuple[PeerActivity, ...]]


def view_of(local: Activity, peers: Sequence[PeerActivity]) -> View:
    """What a read of the statuses would be decided from, as a value to compare."""
    return local, tuple(sorted(peers, key=lambda peer: peer.node_id))


def idle_check(view: View, idle_at_last_read: View | None) -> Check:
    """Whether an idle member's round needs the peers' statuses (see the module's docstring).
    ``idle_at_last_read``: the view when the last read found the cluster idle, or None."""
    local, peers = view
    if local.paused or any(peer.activity is not None and peer.activity.paused for peer in peers):
        return Check.READ  # a pause is said with its reasons, which only a status gives
    if any(peer.state == "alive" and not peer.left and peer.activity is not None and not peer.activity.idle
           for peer in peers):
        return Check.BUSY
    if view == idle_at_last_read:
        return Check.UNCHANGED
    return Check.READ
