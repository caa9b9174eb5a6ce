"""Human-readable renderings of a node's status, for `crawler-node status` and the demo."""

from __future__ import annotations


def format_status(status: dict) -> str:
    counters = status["counters"]
    lines = [
        f"node {status['node_id']} ({status.get('url', '')}) — {'idle' if status['idle'] else 'crawling'}",
        f"  fetched {counters['fetched']}  done {counters['pages_done']}  failed {counters['failed']}  "
        f"retries {counters['retries']} (ratio {counters['retry_ratio']})  "
        f"{status['rates']['fetched_per_s']} fetches/s",
        "  members:",
    ]
    for member in status.get("members", []):
        share = member.get("arc_share")
        share_text = f"  arc {share:.1%}" if isinstance(share, (int, float)) else ""
        lines.append(f"    {member['id']:<12} {member['state']:<8} {member['url']}{share_text}")
    lines.append("  queues (depth / oldest age s / blocked enqueues):")
    for stage, queue in status["queues"].items():
        lines.append(f"    {stage:<9} {queue.get('depth', 0):>8} {queue.get('oldest_age_s', 0):>8} "
                     f"{queue.get('blocked_puts', '-'):>8}")
    if status.get("hosts"):
        lines.append("  busiest hosts (in flight / limit / queued / fetched / throttled):")
        for host in status["hosts"][:10]:
            lines.append(f"    {host['host']:<28} {host['in_flight']:>3} {host['limit']:>3} {host['queued']:>7} "
                         f"{host['fetched']:>7} {host['throttled']:>5}")
    return "\n".join(lines)


def progress_line(statuses: list[dict], expected: int, elapsed_s: float) -> str:
    done = sum(s["counters"]["pages_done"] for s in statuses)
    fetched = sum(s["counters"]["fetched"] for s in statuses)
    queued = sum(s["queues"]["frontier"]["depth"] for s in statuses)
    in_flight = sum(s["queues"]["fetch"]["depth"] for s in statuses)
    share = done / expected if expected else 0.0
    return (f"[{elapsed_s:6.1f}s] {done}/{expected} pages ({share:5.1%})  fetches {fetched}  "
            f"queued {queued}  in flight {in_flight}  {fetched / elapsed_s if elapsed_s else 0:.0f}/s")
