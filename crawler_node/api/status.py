"""A node's status: its snapshot (node.snapshot, gathered by ``Node.snapshot``) as JSON, and the
cluster as this node sees it.

``GET /v1/status?scope=local`` is ``to_json`` of the node's snapshot, and ``/metrics`` walks
the same object (api.metrics): one quantity has one definition, in the component that owns it,
and one declaration, beside its field (core.stats). The cluster view adds each member's own
status (read from it, as JSON), ``idle`` for the whole cluster and ``crawl_state`` in words.
The API serves both from snapshots (api.snapshot): ``status_snapshots`` makes them, and
``watched_state`` says which changes make one out of date at once, whatever its age.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from crawler_node.api.status_cache import Snapshots
from crawler_node.cluster.activity import Activity, PeerActivity
from crawler_node.core.stats import to_json
from crawler_node.node.node_snapshot import NodeSnapshot, is_idle

if TYPE_CHECKING:
    from crawler_node.node.node import Node

_STATES = ("queued", "leased", "done", "failed", "deferred")  # a frontier row's, all of them
# finished: done or failed, or deleted by an operator's drop-host (counted as dropped, so that
# a drop never makes known or finished go backwards)
_FINISHED = ("done", "failed", "dropped")


def node_activity(node: Node) -> Activity:
    """What this node's heartbeat answers say of its work (cluster.activity), without a call on
    the frontier's thread: its totals as last read, at most a second ago while the node runs
    (the shedding round reads them every second). Not idle before the first read."""
    totals = node.frontier.last_totals or {}
    idle = bool(totals) and is_idle(int(totals["queued"]), int(totals["leased"]), int(totals.get("deferred", 0)),
                                    node.pipeline_idle())
    return Activity(idle=idle, fetched=node.store.counters.fetched,
                    known=sum(int(totals.get(state, 0)) for state in (*_STATES, "dropped")),
                    paused=node.admission.operator_pause is not None,
                    finished=sum(int(totals.get(state, 0)) for state in _FINISHED))


async def node_status(node: Node) -> dict[str, Any]:
    """This node's status (``?scope=local``), built now."""
    return to_json(await node.snapshot())


def member_summary(status: dict[str, Any] | None) -> dict[str, Any]:
    """What the cluster view shows of one member, from that member's own status."""
    if status is None:
        return {"reachable": False, "idle": None}
    try:
        return {
            "reachable": True,
            "idle": status["idle"],
            "fetched": status["counters"]["fetched"],
            # fetch attempts in crawl.log, ever: durable across restarts (core.crawl_totals)
            "attempts_total": (status.get("totals") or {}).get("attempts"),
            "fetched_per_s": status["rates"]["fetched_per_s"],
            "paused": status.get("paused", False),
            "pause_reason": (status.get("pause") or {}).get("reason"),
            "queues": {stage: queue["depth"] for stage, queue in status["queues"].items()},
            "oldest_age_s": {stage: queue.get("oldest_age_s") for stage, queue in status["queues"].items()},
            # progress: URLs finished (done or failed) of those this member knows
            "finished": sum(status["frontier"].get(state, 0) for state in _FINISHED),
            "known": sum(status["frontier"].get(state, 0) for state in (*_STATES, "dropped")),
            "admission": {"open": status["admission"].get("open"), "blocked_by": status["admission"].get("blocked_by")},
            "outbox_total": sum(m.get("outbox", 0) for m in status.get("members", [])),
        }
    except (KeyError, TypeError, AttributeError):
        return {"reachable": True, "idle": None, "malformed": True}


async def cluster_status(node: Node, local: dict[str, Any] | None = None) -> dict[str, Any]:
    """This node's status with the cluster as this node sees it: each member's summary from its
    own status, ``idle`` true only when every member is reachable and idle, and ``crawl_state``
    in words. ``local``: this node's status, already built (it is not changed)."""
    if local is None:
        status = await node_status(node)
    else:  # a copy of what is changed below: the top level and the members
        status = {**local, "members": [dict(member) for member in local["members"]]}
    if node.cluster.is_single:
        status["crawl_state"] = crawl_state(status)
        return status
    status["node_idle"] = status["idle"]
    peers = await node.cluster.peer_statuses()
    for member in status["members"]:
        if member["self"]:
            member.update(member_summary(status))
        else:
            member.update(member_summary(peers.get(member["id"])))
            if not member["reachable"]:
                member.update(_remembered(node, member["id"]))
            elif member.get("known") is not None:
                node.cluster.heartbeats.last_read[member["id"]] = Activity(
                    idle=bool(member["idle"]), fetched=int(member["fetched"]), known=int(member["known"]),
                    paused=bool(member.get("paused")), finished=int(member["finished"]))
    _decide_idle(status)
    return status


def _remembered(node: Node, member_id: str) -> dict[str, Any]:
    """What a silent member said of its work last (its last status read, or its last
    heartbeat's activity, whichever says more): its URLs known and finished still count, so the
    cluster's progress does not go backwards while it is down. Nothing when it never said."""
    heartbeats = node.cluster.heartbeats
    said = [a for a in (heartbeats.last_read.get(member_id), heartbeats.last_activity.get(member_id)) if a]
    if not said:
        return {}
    return {"fetched": max(a.fetched for a in said), "known": max(a.known for a in said),
            "finished": max(a.finished for a in said), "remembered": True}


def _decide_idle(status: dict[str, Any]) -> None:
    # A member that left (--handoff-on-exit) handed its queue on; any other silent member may
    # still hold work, so the cluster is not idle while it is unreachable.
    status["idle"] = status["node_idle"] and all(
        (member["left"] and not member["self"]) or (member["state"] == "alive" and member.get("idle") is True)
        for member in status["members"])
    status["crawl_state"] = crawl_state(status)


def heard_status(local: dict[str, Any], peers: Sequence[PeerActivity]) -> dict[str, Any] | None:
    """The cluster status a progress line needs, from this node's status and what the peers'
    heartbeats say of their work (cluster.activity), without reading their statuses: each
    member's idle flag, fetched pages, URLs known and finished. None when that is not enough
    to say the same as a read would: a peer without an activity (down, or an older member),
    or a pause anywhere (a pause is said with its reasons)."""
    heard = {peer.node_id: peer for peer in peers}
    status = {**local, "members": [dict(member) for member in local["members"]], "node_idle": local["idle"]}
    if local.get("paused"):
        return None
    for member in status["members"]:
        if member["self"]:
            member.update(member_summary(local))
            continue
        peer = heard.get(member["id"])
        if member["left"] and not (peer is not None and peer.activity is not None):
            member.update(member_summary(None))
            continue
        if peer is None or peer.activity is None or peer.activity.paused:
            return None
        a = peer.activity
        member.update({"reachable": True, "idle": a.idle, "fetched": a.fetched, "finished": a.finished,
                       "known": a.known, "paused": False})
    _decide_idle(status)
    return status


def watched_state(node: Node) -> tuple[Hashable, ...]:
    """What an operator's command (pause, resume, stop) or a member's change of state alters
    and is read back at once: a status built before it differs is rebuilt before it is served."""
    members = tuple((m.node_id, m.url, m.state, m.left) for m in node.cluster.membership.members())
    return node.admission.operator_pause, node.stopping, node.cluster.leaving, members


def status_snapshots(node: Node) -> tuple[Snapshots[NodeSnapshot], Snapshots[dict[str, Any]]]:
    """The snapshots of this node's status and of the cluster's as this node sees it."""
    def watched() -> tuple[Hashable, ...]:
        return watched_state(node)

    async def cluster(local: dict[str, Any]) -> dict[str, Any]:
        return await cluster_status(node, local)

    # The cluster view is built on a new snapshot of this node: ?scope=local (or /metrics)
    # read after it never goes back in time.
    local_snapshots = Snapshots("node", node.snapshot, watched=watched, render=to_json)
    return local_snapshots, Snapshots("cluster", cluster, watched=watched, base=local_snapshots)


def crawl_state(status: dict[str, Any]) -> str:
    """The cluster's state in words: "stopping" (this node), "crawling", "paused (why)", "idle", or "idle, but n2 is
    down and its queue waits" when every member that answers is idle and one that may still
    hold work does not answer (its hosts' URLs wait for it, or for its successor)."""
    if status.get("stopping"):
        return "stopping"  # never "crawling" while it stops (a worker's death, a signal, the API)
    members = status.get("members") or []
    paused = [m for m in members if m.get("paused")] or ([status] if status.get("paused") else [])
    if paused:
        reasons = sorted({str((m.get("pause") or {}).get("reason") or m.get("pause_reason") or "no reason")
                          for m in paused})
        return f"paused ({', '.join(reasons)})"
    if status["idle"]:
        return "idle"
    if not status.get("node_idle", status["idle"]):
        return "crawling"
    silent = [m for m in members if not m.get("self") and not m.get("left")
              and (m.get("state") != "alive" or m.get("reachable") is False)]
    answering_busy = any(m.get("idle") is False for m in members if m not in silent and not m.get("self"))
    if not silent or answering_busy:
        return "crawling"
    words = [f"{m['id']} is {'down' if m.get('state') == 'down' else 'not answering'}" for m in silent]
    waits = "its queue waits" if len(silent) == 1 else "their queues wait"
    return f"idle, but {', '.join(words)} and {waits}"
