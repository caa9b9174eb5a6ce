"""Human-readable renderings of a node's status, for `crawler-node status` and the demo."""

from __future__ import annotations


def format_status(status: dict) -> str:
    counters = status["counters"]
    cluster_idle = status["idle"]
    own_idle = status.get("node_idle", cluster_idle)
    lines = [
        f"node {status['node_id']} ({status.get('url', '')}) — {'idle' if own_idle else 'crawling'}"
        + (f"; cluster {'idle' if cluster_idle else 'busy'}" if "node_idle" in status else ""),
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
    lines.extend(_pressure_lines(status))
    return "\n".join(lines)


def _pressure_lines(status: dict) -> list[str]:
    """Flow control at a glance: what holds fetching back, the API, shedding."""
    lines = []
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
    return lines


def progress_line(statuses: list[dict], expected: int, elapsed_s: float) -> str:
    done = sum(s["counters"]["pages_done"] for s in statuses)
    fetched = sum(s["counters"]["fetched"] for s in statuses)
    queued = sum(s["queues"]["frontier"]["depth"] for s in statuses)
    in_flight = sum(s["queues"]["fetch"]["depth"] for s in statuses)
    share = done / expected if expected else 0.0
    return (f"[{elapsed_s:6.1f}s] {done}/{expected} pages ({share:5.1%})  fetches {fetched}  "
            f"queued {queued}  in flight {in_flight}  {fetched / elapsed_s if elapsed_s else 0:.0f}/s")
