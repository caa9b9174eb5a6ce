"""Human-readable renderings of a node's status, for `crawler-node status` and the demo."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from crawler_node.core.histogram import quantile_bound


def format_status(status: dict[str, Any]) -> str:
    counters = status["counters"]
    cluster_idle = status["idle"]
    own_idle = status.get("node_idle", cluster_idle)
    lines = [
        f"node {status['node_id']} ({status.get('url', '')}) — "
        f"{'stopping' if status.get('stopping') else 'idle' if own_idle else 'crawling'}"
        + (f"; cluster {'idle' if cluster_idle else 'busy'}" if "node_idle" in status else "")
        + (f" — {status['crawl_state']}" if status.get("crawl_state") else ""),
        f"  fetched {counters['fetched']}  done {counters['pages_done']}  failed {counters['failed']}  "
        f"retries {counters['retries']} (ratio {counters['retry_ratio']})  "
        f"{status['rates']['fetched_per_s']} fetches/s",
        "  members (state / arc share / idle / fetched / fetches/s / frontier / in flight / outbox):",
    ]
    for member in status.get("members", []):
        queues = member.get("queues", {})
        idle = member.get("idle")
        lines.append(
            f"    {member['id']:<10} {member['state']:<8} {member.get('arc_share', 1.0):>6.1%} "
            f"{'-' if idle is None else ('idle' if idle else 'busy'):>5} {member.get('fetched', '-'):>8} "
            f"{member.get('fetched_per_s', '-'):>8} {queues.get('frontier', '-'):>8} {queues.get('fetch', '-'):>5} "
            f"{member.get('outbox_total', member.get('outbox', '-')):>7}  {member['url']}")
    lines.append("  queues (depth / oldest age s / blocked enqueues):")
    for stage, queue in status["queues"].items():
        lines.append(f"    {stage:<9} {queue.get('depth', 0):>8} {queue.get('oldest_age_s', 0):>8} "
                     f"{queue.get('blocked_puts', '-'):>8}")
    if status.get("hosts"):
        lines.append("  busiest hosts (in flight / limit / queued / fetched / throttled):")
        for host in status["hosts"][:10]:
            lines.append(f"    {host['host']:<28} {host['in_flight']:>3} {host['limit']:>3} {host['queued']:>7} "
                         f"{host['fetched']:>7} {host['throttled']:>5}")
    worst = (status.get("host_table") or {}).get("worst") or []
    if worst:
        counts = (status.get("host_table") or {}).get("health") or {}
        lines.append("  worst hosts (" + ", ".join(f"{state} {n}" for state, n in counts.items() if n) + "):")
        for host in worst[:5]:
            lines.append(f"    {host['host']:<28} {host['health']} {host['health_score']:>3}/100  "
                         + "; ".join(host.get("health_reasons") or ()))
    lines.extend(_pressure_lines(status))
    return "\n".join(lines)


def _pause_line(status: dict[str, Any]) -> str | None:
    pause = status.get("pause") or {}
    if not pause.get("paused"):
        return None
    return (f"  PAUSED by {pause['by']} ({pause['reason']}) for {pause['paused_for_s']:.0f} s: no new fetch "
            "until `crawler-node resume`")


def _pressure_lines(status: dict[str, Any]) -> list[str]:
    """Flow control at a glance: an operator's pause, what holds fetching back, the API, shedding."""
    lines = [line] if (line := _pause_line(status)) is not None else []
    admission = status.get("admission")
    if admission is not None:
        held = "open" if admission["open"] else f"held back by {admission['blocked_by']}"
        rejections = ", ".join(f"{k} {v}" for k, v in sorted(admission["rejections"].items())) or "none"
        lines.append(f"  admission: {held}; refusals: {rejections}")
    api = status.get("api")
    if api and api.get("enabled"):
        state = (f"PAUSED ({api['reason']}), resumes in {api['resume_in_s']:.0f} s or on POST /v1/resume"
                 if api["paused"] else "fetching")
        lines.append(f"  api: {state}; limit {api['limit']}, in flight {api['in_flight']}, "
                     f"429s {api['throttled']}, 509s {api['quota_hits']}")
    shedding = status.get("shedding")
    if shedding and (shedding["active"] or shedding["deferred_total"]):
        lines.append(f"  shedding: {'ACTIVE' if shedding['active'] else 'off'}; deferred now "
                     f"{shedding['deferred_now']}, total {shedding['deferred_total']}, "
                     f"restored {shedding['restored_total']}")
    calls = status.get("frontier_calls")
    if calls:
        lines.append("  frontier calls since start (count, 99% within): " + ", ".join(
            f"{name} {histogram['count']} {_within(histogram)}" for name, histogram in calls.items()))
    return lines


def _within(histogram: dict[str, Any]) -> str:
    if not histogram["count"]:
        return "-"
    bound = quantile_bound(histogram, 0.99)
    return f"over {histogram['buckets'][-2][0] * 1000:g} ms" if bound is None else f"{bound * 1000:g} ms"


def progress_line(statuses: list[dict[str, Any]], expected: int, elapsed_s: float) -> str:
    done = sum(s["counters"]["pages_done"] for s in statuses)
    fetched = sum(s["counters"]["fetched"] for s in statuses)
    queued = sum(s["queues"]["frontier"]["depth"] for s in statuses)
    in_flight = sum(s["queues"]["fetch"]["depth"] for s in statuses)
    share = done / expected if expected else 0.0
    return (f"[{elapsed_s:6.1f}s] {done}/{expected} pages ({share:5.1%})  fetches {fetched}  "
            f"queued {queued}  in flight {in_flight}  {fetched / elapsed_s if elapsed_s else 0:.0f}/s")


def format_control(answer: dict[str, Any]) -> str:
    """What each member said to a cluster-wide pause, resume or stop."""
    lines = [f"{answer['action']}: {'every member' if answer['complete'] else 'NOT every member'}"]
    for member, said in sorted(answer["members"].items()):
        if said.get("skipped"):
            lines.append(f"  {member:<10} skipped ({said['skipped']})")
        elif not said["ok"]:
            lines.append(f"  {member:<10} FAILED: {said.get('error')}")
        else:
            done = "done" if said.get("changed", True) else "already so"
            lines.append(f"  {member:<10} {done}")
    return "\n".join(lines)


def _age(seconds: float | None) -> str:
    if not seconds:
        return "now"
    return f"in {seconds:.0f}s" if seconds < 120 else f"in {seconds / 60:.0f}m"


def format_hosts(answer: dict[str, Any]) -> str:
    parked = answer.get("parked_urls", 0)
    lines = [f"{answer['total']} hosts with work; {len(answer['hosts'])} shown from {answer['offset']} "
             f"by {answer['sort']} {answer['order']}"
             + (f"; {parked} URLs of other hosts wait on disk for their turn (--active-hosts)" if parked else "")
             + ("" if answer.get("complete", True) else f"; members not heard: {_not_ok(answer['members'])}"),
             f"  {'host':<32} {'member':<10} {'queued':>7} {'leased':>6} {'deferred':>8} {'flight':>6} "
             f"{'limit':>5} {'eligible':>9} {'chg/day':>8}  state"]
    for row in answer["hosts"]:
        limit = "-" if row.get("limit") is None else row["limit"]
        lines.append(f"  {row['host']:<32} {row['member']:<10} {row['queued']:>7} {row['leased']:>6} "
                     f"{row['deferred']:>8} {row['in_flight']:>6} {limit:>5} {_age(row['next_eligible_in_s']):>9} "
                     f"{_per_day(row.get('change_rate')):>8}  "
                     f"{row['state']}" + (f" ({row['held']})" if row.get("held") else ""))
        if row.get("health", "healthy") != "healthy":
            lines.append(f"  {'':<32} health: {row['health']} ({row.get('health_score')}/100): "
                         + "; ".join(row.get("health_reasons") or ()))
    return "\n".join(lines)


def _not_ok(members: dict[str, Any]) -> str:
    return ", ".join(f"{member} ({said})" for member, said in sorted(members.items()) if said != "ok")


def format_queue(answer: dict[str, Any]) -> str:
    lines = [f"{answer['host']} on {answer['member']}: {answer['queued']} queued, {answer['leased']} leased, "
             f"{answer['deferred']} deferred; {len(answer['urls'])} shown",
             f"  {'depth':>5} {'priority':>8} {'attempts':>8} {'eligible':>9} {'chg/day':>8} {'state':<8} url"]
    for url in answer["urls"]:
        lines.append(f"  {url['depth']:>5} {url['priority']:>8} {url['attempts']:>8} "
                     f"{_not_before(url['not_before']):>9} {_per_day(url.get('change_rate')):>8} "
                     f"{url['state']:<8} {url['url']}")
    return "\n".join(lines)


def _per_day(rate: float | None) -> str:
    """A change rate (per second) as changes a day; "-" when none is known."""
    if rate is None:
        return "-"
    per_day = rate * 86_400
    return f"{per_day:.3g}" if per_day < 1e6 else f"{per_day:.2e}"


def _not_before(when: float) -> str:
    return _age(max(0.0, when - time.time())) if when else "now"


class RateWindow:
    """Rates over the last window, from two successive samples of a counter (never a total
    divided by the uptime, which an idle node would keep showing as a rate)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def rate(self, key: str, value: float, now: float) -> float | None:
        """Per second since the previous sample of ``key`` (None at the first one)."""
        last = self._last.get(key)
        self._last[key] = (now, value)
        if last is None or now <= last[0]:
            return None
        return max(0.0, value - last[1]) / (now - last[0])


def cluster_members(status: dict[str, Any]) -> list[dict[str, Any]]:
    """The members as the cluster view lists them; a node alone is its own one member."""
    if "node_idle" in status:
        return status["members"]
    from crawler_node.api.status import member_summary

    return [{"id": status["node_id"], "state": "alive", "self": True, **member_summary(status)}]


# The columns of a `status --watch` frame: (header, alignment, width in the plain-text frame).
WATCH_COLUMNS = (("member", "<", 10), ("state", "<", 14), ("fetched", ">", 8), ("/s", ">", 7), ("queued", ">", 8),
                 ("flight", ">", 6), ("outbox", ">", 7), ("progress", ">", 16))


@dataclass(frozen=True, slots=True)
class WatchFrame:
    """One frame of `crawler-node status --watch`: what it says, before it is laid out (as plain
    text by :func:`format_watch`, as a table on a terminal by tools.watch)."""

    title: str  # "<node id>: <crawl state>"
    rows: tuple[tuple[str, ...], ...]  # a member each, a cell per WATCH_COLUMNS
    progress: str  # "progress: <finished>/<known> <share> URLs finished of those known"


def watch_frame(status: dict[str, Any], rates: RateWindow, now: float) -> WatchFrame:
    """The members, their windowed rates, progress."""
    members = cluster_members(status)
    rows = []
    for member in members:
        fetched = member.get("fetched")
        rate = rates.rate(member["id"], fetched, now) if isinstance(fetched, int) else None
        queues = member.get("queues") or {}
        state = member["state"] + (" paused" if member.get("paused") else "")
        rows.append((str(member["id"]), state, _dash(fetched), "-" if rate is None else f"{rate:.1f}",
                     _dash(queues.get("frontier")), _dash(queues.get("fetch")), _dash(member.get("outbox_total")),
                     _share(member.get("finished"), member.get("known"))))
    finished = sum(member.get("finished") or 0 for member in members)
    known = sum(member.get("known") or 0 for member in members)
    crawl_state = status.get("crawl_state", "idle" if status["idle"] else "crawling")
    return WatchFrame(title=f"{status['node_id']}: {crawl_state}", rows=tuple(rows),
                      progress=f"progress: {_share(finished, known)} URLs finished of those known")


def format_watch(frame: WatchFrame) -> str:
    """A frame as plain text: where `status --watch` does not write to a terminal."""
    def line(cells: tuple[str, ...]) -> str:
        return "  " + " ".join(f"{cell:{align}{width}}" for cell, (_, align, width) in zip(cells, WATCH_COLUMNS,
                                                                                          strict=True))

    return "\n".join([frame.title, line(tuple(header for header, _, _ in WATCH_COLUMNS)),
                      *(line(row) for row in frame.rows), f"  {frame.progress}"])


def _share(done: int | None, known: int | None) -> str:
    if done is None or not known:
        return "-"
    return f"{done}/{known} {done / known:4.0%}"


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def progress_log_line(status: dict[str, Any], rate: float | None, window_s: float) -> str:
    """The daemon's periodic progress line, from the cluster status this node sees."""
    members = cluster_members(status)
    finished = sum(member.get("finished") or 0 for member in members)
    known = sum(member.get("known") or 0 for member in members)
    return (f"progress: fetched {status['counters']['fetched']} here "
            f"({'-' if rate is None else f'{rate:.1f}'}/s over the last {window_s:.0f} s), "
            f"queued {status['frontier']['queued']} here; cluster: {_share(finished, known)} "
            f"finished of the URLs known; {status.get('crawl_state', '')}")


def finished_log_line(status: dict[str, Any]) -> str:
    """The daemon's one line when the cluster has become idle."""
    members = cluster_members(status)
    finished = sum(member.get("finished") or 0 for member in members)
    known = sum(member.get("known") or 0 for member in members)
    fetched = sum(member.get("fetched") or 0 for member in members)
    # crawl.log's attempts, across restarts; "since this start" alone once said 163 of 312
    attempts = sum(member.get("attempts_total") or member.get("fetched") or 0 for member in members)
    return (f"crawl finished: the cluster is idle; {_share(finished, known)} finished of the URLs known, "
            f"{attempts} fetch attempts in all ({fetched} since the members' last start) by {len(members)} "
            f"member{'s' if len(members) != 1 else ''}")
