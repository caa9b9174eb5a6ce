"""Batch mode: ``run --exit-when-idle`` and ``crawler-node crawl`` end as a job does.

A member asks, every ``check_s``, the question the status answers (api.status.cluster_status:
every member alive and idle; never while one is down with work, as its ``crawl_state`` says).
Once the answer is "idle" it sums up the crawl (its own durable totals and every reachable
member's, core.crawl_totals), prints the summary, writes it as ``stats.json`` in its data
directory, and stops: in a cluster it lingers a few rounds first, so that the others decide
too while it still answers, then leaves the ring drained (a member that left is not one down
with work, so the last ones can still decide). ``exit_code`` is what the process returns.

The exit codes: 0 the crawl ended; 3 ``--idle-timeout-s`` passed first; 4 nothing was fetched
because every URL the crawl had was refused (the reasons in one line), or no seed was taken.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler_node.api.status import cluster_status, node_activity, node_status
from crawler_node.cluster.activity import Check, idle_check, view_of
from crawler_node.core.crawl_totals import merge_json
from crawler_node.core.stats import json_value
from crawler_node.datadir_layout import STATS_FILENAME
from crawler_node.tools.report import cluster_members

if TYPE_CHECKING:
    from crawler_node.node.node import Node

log = logging.getLogger("crawler_node.batch")

EXIT_DONE, EXIT_TIMED_OUT, EXIT_NOTHING_FETCHED = 0, 3, 4
CHECK_S = 1.0
# A member that decided waits this many rounds of the others' checks before it leaves: they
# read its status (and its totals) while it still answers, and decide as it did.
LINGER_ROUNDS = 4
_FIXES = {"not_allowed": "give --allow-private to crawl private or loopback addresses",
          "robots_disallowed": "robots.txt forbids them", "out_of_scope": "widen --allow-host",
          "denied_url": "check --allow-url/--deny-url"}


def refusal_line(totals: dict[str, Any]) -> str | None:
    """Why a crawl fetched nothing, in one line; None when it fetched something (a page had an
    answer, whatever its status; robots.txt's do not count) or was never refused."""
    if totals.get("answered") or not totals.get("refused"):
        return None
    reasons = totals.get("refusal_reasons") or {}
    outcomes = totals.get("outcomes") or {}
    parts = []
    for outcome, reason in sorted(reasons.items()):
        fix = _FIXES.get(outcome)
        parts.append(f"{outcome} x{outcomes.get(outcome, 0)} ({reason}{'; ' + fix if fix else ''})")
    return "nothing fetched: every URL was refused: " + "; ".join(parts)


def summary(node_id: str, totals: dict[str, Any], *, members: list[str], state: str, run_s: float,
            per_member: dict[str, Any]) -> dict[str, Any]:
    """The stats.json document: the crawl's totals, its span and rates."""
    span_s = _span_s(totals.get("first_at"), totals.get("last_at"))
    per_s = span_s if span_s > 0 else None
    return {
        "node": node_id, "members": members, "scope": "cluster" if len(members) > 1 else "node", "state": state,
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "duration_s": round(span_s, 3),  # first crawl.log line to last, across restarts
        "run_s": round(run_s, 3),  # this process's run
        "rates": {"pages_per_s": round(totals["pages"] / per_s, 3) if per_s else 0.0,
                  "attempts_per_s": round(totals["attempts"] / per_s, 3) if per_s else 0.0,
                  "bytes_per_s": round(totals["bytes"] / per_s, 1) if per_s else 0.0},
        "totals": totals, "member_totals": per_member,
    }


def _span_s(first: str | None, last: str | None) -> float:
    if not first or not last:
        return 0.0
    try:
        return max(0.0, (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds())
    except ValueError:
        return 0.0


def summary_text(stats: dict[str, Any]) -> str:
    """The summary as printed at the end, one fact a line (Scrapy's stats dump, in words)."""
    t, rates = stats["totals"], stats["rates"]
    lines = [f"crawl summary ({stats['scope']}: {', '.join(stats['members'])}; {stats['state']})",
             f"  pages {t['pages']}, attempts {t['attempts']}, bytes {t['bytes']}, retries {t['retries']}",
             f"  robots.txt fetches {t['robots_fetches']}, URLs robots.txt refused {t['robots_refused']}, "
             f"refused {t['refused']}",
             f"  duration {stats['duration_s']} s (this run {stats['run_s']} s); "
             f"{rates['pages_per_s']} pages/s, {rates['bytes_per_s']} bytes/s",
             "  outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(t["outcomes"].items())),
             "  status codes: " + ", ".join(f"{k} {v}" for k, v in sorted(t["status_codes"].items()))]
    if t["slowest_hosts"]:
        lines.append("  slowest hosts: " + ", ".join(f"{h['host']} {h['mean_ms']} ms" for h in t["slowest_hosts"][:5]))
    if t["most_refused_hosts"]:
        lines.append("  most refused hosts: "
                     + ", ".join(f"{h['host']} {h['refused']}" for h in t["most_refused_hosts"][:5]))
    return "\n".join(lines)


def write_stats(data_dir: Path, stats: dict[str, Any]) -> Path:
    """stats.json, replaced whole (a reader never sees half of it)."""
    path = data_dir / STATS_FILENAME
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path


class IdleExit:
    """``--exit-when-idle``: decide, sum up, stop (see the module's docstring)."""

    def __init__(self, node: Node, *, timeout_s: float, has_seeds: bool, check_s: float = CHECK_S) -> None:
        self._node = node
        self._timeout_s = timeout_s
        self._has_seeds = has_seeds
        self._check_s = check_s
        self._started = time.monotonic()
        self._lingering: int | None = None  # rounds left before leaving, once decided
        self.exit_code: int | None = None  # set once decided
        self._pending: tuple[dict[str, Any], list[str], str] | None = None  # what the summary is made of
        self.hand_off = False  # leave the ring drained on the way out (a cluster's member that decided)

    def start(self) -> None:
        self._node.supervisor.recurring("idle-exit", self.round, every_s=self._check_s)

    async def round(self) -> None:
        node = self._node
        if self._lingering is not None:
            self._lingering -= 1
            if self._lingering <= 0:
                node.request_stop()
            return
        if self.exit_code is not None:
            return
        local = await node_status(node)
        timed_out = self._timeout_s > 0 and time.monotonic() - self._started >= self._timeout_s
        if not local["idle"] and not timed_out:
            return
        if not node.cluster.is_single and not timed_out:
            # A peer whose heartbeat says it is busy makes the cluster busy: no need to read
            # every member's status each round (cluster.activity), only when all say idle.
            view = view_of(node_activity(node), node.cluster.peer_activity())
            if idle_check(view, None) is Check.BUSY:
                return
        status = await cluster_status(node, local)  # a node alone: its own, with crawl_state
        idle = status.get("crawl_state") == "idle"
        if not idle and not timed_out:
            return
        known = sum(int(m.get("known") or 0) for m in cluster_members(status))
        if idle and not (known or self._has_seeds or local["totals"]["lines"]):
            return  # nothing to crawl yet: a member waiting for its first URLs is not done
        await self._finish(status, local, state="idle" if idle else f"timed out ({status.get('crawl_state')})")

    async def _finish(self, status: dict[str, Any], local: dict[str, Any], *, state: str) -> None:
        node = self._node
        per_member = {node.node_id: local["totals"]}
        if not node.cluster.is_single:
            for member_id, peer in (await node.cluster.peer_statuses()).items():
                if isinstance(peer.get("totals"), dict):
                    per_member[member_id] = peer["totals"]
        members = sorted({str(m["id"]) for m in cluster_members(status)} | {node.node_id})
        self._pending = (per_member, members, state)
        if state != "idle":
            # Fetches are still in flight: the summary is made once they are stored (after_stop).
            log.error("--idle-timeout-s %g passed before the cluster was idle: %s", self._timeout_s, state)
            self.exit_code = EXIT_TIMED_OUT
            node.request_stop()
            return
        stats = self._report()
        if stats["refused"] is not None:
            log.error("%s", stats["refused"])
            self.exit_code = EXIT_NOTHING_FETCHED
        else:
            self.exit_code = EXIT_DONE
        if node.cluster.is_single:
            node.request_stop()
        else:
            self.hand_off = True
            self._lingering = LINGER_ROUNDS

    def after_stop(self) -> None:
        """Once the node stopped: a timed-out crawl's summary, with its own totals as they
        ended (what was in flight stored)."""
        if self._pending is None or self._pending[2] == "idle":
            return
        per_member, members, state = self._pending
        per_member[self._node.node_id] = json_value(self._node.totals.snapshot())
        self._report()

    def _report(self) -> dict[str, Any]:
        """Print the summary and write stats.json; returns it."""
        assert self._pending is not None
        per_member, members, state = self._pending
        totals = merge_json(per_member.values())
        stats = summary(self._node.node_id, totals, members=members, state=state,
                        run_s=time.monotonic() - self._started, per_member=per_member)
        refused = refusal_line(totals) if state == "idle" else None
        if refused is None and state == "idle" and totals["lines"] == 0:
            refused = "nothing fetched: no URL was taken (every seed was invalid or out of scope: see the log)"
        stats["refused"] = refused
        print(summary_text(stats), flush=True)
        path = write_stats(self._node.data_dir, stats)
        log.info("crawl summary written to %s", path)
        return stats
