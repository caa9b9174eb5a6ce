"""When a starting member may lease: once it has heard from the peers it needs.

A member that starts in a cluster holds back its first lease (node.dispatch.Dispatcher.hold)
so that it knows who is alive before it routes its first links, and so that it does not fetch
again what another member fetched for it while it was away. ``startup_grace_s`` bounds the
hold; it is no longer a fixed wait. The rule, checked after every heartbeat answer or failure:

1. Every peer it knows of (configured, learnt from a join or from a peer's member list, or
   found through peer DNS) has answered a heartbeat, or the failure detector has found it down
   (silent for ``down_after_s``, or leaving). Until then the member holds.
2. A member that nobody can owe a handback leases at once after that: its frontier was empty
   when it started (a *fresh* member: no row, never crawled here), it is one of the configured
   members (not a joiner) and no peer that answered listed it as ``down`` (a peer that did has
   been crawling its arc: a member started late). A fresh cluster is such members only.
3. A member that may be owed a handback holds until every peer that answered (and is not
   down) says it owes it none. It is *restarted* (its frontier has rows: its successor may
   have covered for it while it was away), *joining* (its new arc was crawled by the members
   that owned it before), or a peer reported it down. What it is owed comes from the peers
   that held its hosts: once such a peer sees it alive (or joined), its full sweep
   (cluster.sweep) hands the hosts over through the acknowledged outbox, queued URLs to crawl
   and fetched ones as seen, and the member has *learned* them once they are taken into its
   frontier (node.intake.Intake.take with ``seen=True``: recorded, never fetched) and
   acknowledged. Each heartbeat answer to this member says whether that peer still owes it
   (``"handback_owed"``, cluster.cluster.Cluster.owes_handback): it does while this member is
   not live in its view, while a full sweep is wanted or running, while a host it handed to
   this member still has a fetch under way there (its last rows follow when it ends: so this
   member's first request to a host comes after the peer's last one ended), and until what
   its outbox held for this member after its last sweep is acknowledged. A peer that does
   not say (a member from before the field) owes until the grace runs out.
   Before this rule the grace itself was the time given to the handback, and a handback that
   came later than it (a whole compose cluster restarted on two cores) was fetched again.
4. When the grace runs out the member leases with what it has heard (an upper bound: a peer
   that never answers, or keeps owing, cannot hold it for ever; the normal takeover and
   handback take over).

Peer DNS that has found no peer yet is not "heard from everyone": the others may not be in
DNS yet, so such a member holds until one answers, or the grace runs out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from crawler_node.cluster.membership import Member, PeerState


class StartupHold:
    """The starting member's answer to "may I lease now?", fed by the heartbeats."""

    def __init__(self, *, restarted: bool, deadline: float, release: Callable[[str], None],
                 joining: bool = False, alone_is_enough: bool = True) -> None:
        """``restarted``: the frontier had rows at start; ``joining``: this member is not one
        of its own configured members (it joins a running cluster); ``deadline``: when the grace runs
        out (the node's clock); ``release(reason)``: called once, when the hold ends;
        ``alone_is_enough``: with no peer known, there is nobody to wait for (False with
        peer DNS, which may not list the others yet)."""
        self._restarted = restarted
        self._joining = joining
        self._deadline = deadline
        self._release = release
        self._alone_is_enough = alone_is_enough
        self._heard: set[str] = set()
        self._reported_down: set[str] = set()  # peers that answered with this member down
        self._owing: set[str] = set()  # peers whose last answer did not say they owe it nothing
        self._waiting_on: list[str] = []  # as of the last check
        self._owing_now: list[str] = []  # live peers that still owe a handback, as of the last check
        self.reason: str | None = None  # why the hold ended; None while it holds

    @property
    def holding(self) -> bool:
        return self.reason is None

    def heard(self, peer_id: str, self_state: str | None, owes_handback: bool | None = None) -> None:
        """``peer_id`` answered a heartbeat, its member list gave this member ``self_state``,
        and it said whether it still owes this member a handback (None: it did not say)."""
        self._heard.add(peer_id)
        if self_state == PeerState.DOWN.value:
            self._reported_down.add(peer_id)
        if owes_handback is False:
            self._owing.discard(peer_id)
        else:
            self._owing.add(peer_id)

    def wants_answers(self) -> bool:
        """Still waiting for a peer's first answer (heartbeats come faster meanwhile)."""
        return self.holding and bool(self._waiting_on)

    def owed(self) -> bool:
        """Holding while a peer that answered still owes a handback (heartbeats come faster)."""
        return self.holding and bool(self._owing_now)

    def awaits(self, peer_id: str) -> bool:
        """``peer_id`` is one whose first answer the hold still waits for."""
        return peer_id in self._waiting_on

    def check(self, peers: Iterable[Member], now: float) -> None:
        """Release the hold if the rule (module docstring) allows it now."""
        if self.reason is not None:
            return
        reason = self._verdict(list(peers), now)
        if reason is not None:
            self.reason = reason
            self._release(reason)

    def waiting_for(self) -> str:
        """What the hold waits for, as of the last check (for the status and the log)."""
        if self._waiting_on:
            return f"first answers from {', '.join(self._waiting_on)}"
        if self._owing_now:
            return f"the handback {', '.join(self._owing_now)} still owes this member"
        if self._restarted:
            return "the handback of a successor that covered for this restarted member"
        if self._joining:
            return "the handback of this joining member's new arc by the members that held it"
        if self._reported_down:
            return f"the handback of {', '.join(sorted(self._reported_down))}, which reported this member down"
        return "a peer to be found"

    def _verdict(self, peers: list[Member], now: float) -> str | None:
        self._waiting_on = [m.node_id for m in peers if m.node_id not in self._heard and m.state is not PeerState.DOWN]
        if now >= self._deadline:
            return f"the startup grace ran out while waiting for {self.waiting_for()}"
        may_be_owed = self._restarted or self._joining or self._reported_down
        self._owing_now = ([m.node_id for m in peers if m.node_id in self._owing and m.state is not PeerState.DOWN]
                           if may_be_owed else [])
        if self._waiting_on or self._owing_now or not (peers or self._alone_is_enough):
            return None
        down = sorted(m.node_id for m in peers if m.node_id not in self._heard)
        found_down = f" ({', '.join(down)} found down)" if down else ""
        if may_be_owed:
            return f"heard from all peers{found_down}, and none owes this member a handback"
        return "heard from all peers" + found_down
