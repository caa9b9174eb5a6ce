"""Load shedding's moving part: parking queued URLs (deferred) and bringing them back.

The policy (when, and how many) is `crawler_node.core.shed_policy.ShedPolicy`; this only moves
rows and keeps the cut below which new URLs are parked on arrival (by the intake, which asks
`cut`). Nothing is dropped: a deferred row stays in the seen-set until it is restored.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

from crawler_node.core.shed_policy import ARRIVED_WHILE_SHEDDING, QUEUE_OVER_HIGH_WATER
from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.records import DEFERRED, QUEUED
from crawler_node.frontier.statements import NOT_LEASED

RESTORED = "restored"
# The lowest priority first, and among equals the newest (the deepest links of the latest
# pages) first. Seeds are protected by the caller's priority bound.
_DEFER_SQL = f"""
UPDATE urls SET state = 4
WHERE id IN (
    SELECT id FROM urls WHERE state = 0 AND priority < ? AND {NOT_LEASED}
    ORDER BY priority ASC, id DESC
    LIMIT ?
)
RETURNING host, priority
"""
_RESTORE_SQL = """
UPDATE urls SET state = 0
WHERE id IN (SELECT id FROM urls WHERE host = ? AND state = 4 ORDER BY priority DESC, id LIMIT ?)
"""


# Parked hosts with deferred rows a restore step looks at: a quarter of the step's URLs, within
# these bounds (an index seek and an UPDATE each). A parked host has few deferred rows, so with
# 256 a step of 50,000 gave back ~1,100 (its share per host is all a host had): 9M rows deferred
# at 10M queued would have taken hours to come back. With 4,096 a step gives back ~16,500 in
# 0.28 s there (12,500 hosts: 28,300 in 1.45 s, too long a hold of the frontier's thread).
PARKED_RESTORE_HOSTS = 256
PARKED_RESTORE_HOSTS_MAX = 4096


class Shedding:
    def __init__(self, db: FrontierDb) -> None:
        self._db = db
        self._cut: int | None = None
        self._counts: Counter[str] = Counter()  # deferrals by reason, and restores, since open

    @property
    def cut(self) -> int | None:
        """While set, new URLs at or below this priority are parked on arrival. Not durable:
        after a restart, shedding is the node's to decide again."""
        return self._cut

    def counts(self) -> dict[str, int]:
        """Deferred URLs by reason, and "restored", since the frontier opened."""
        return {reason: count for reason, count in self._counts.items() if count}

    def defer_lowest(self, n: int, *, below_priority: int) -> Counter[str]:
        """Park the ``n`` lowest-priority queued URLs (newest first among equals) whose
        priority is below ``below_priority``; from now on, new URLs at or below the highest
        priority parked are parked on arrival too. Returns the parked count per host."""
        if n <= 0:
            return Counter()
        core = self._db
        with core.transaction():
            rows = core.conn.execute(_DEFER_SQL, (below_priority, n)).fetchall()
            per_host = Counter(host for host, _ in rows)
            for host, count in per_host.items():
                core.count(host, QUEUED, -count)
                core.count(host, DEFERRED, count)
            if rows:
                core.after_commit(partial(self._deferred, max(priority for _, priority in rows), len(rows)))
        return per_host

    def _deferred(self, highest: int, count: int) -> None:
        self._cut = highest if self._cut is None else max(self._cut, highest)
        self._counts[QUEUE_OVER_HIGH_WATER] += count

    def stop(self) -> None:
        """New URLs are queued again whatever their priority."""
        self._cut = None

    def restore(self, n: int) -> Counter[str]:
        """Queue about ``n`` deferred URLs again, an equal share from every host that has some
        (each host's highest priority first): restored work spread over many hosts can be
        fetched in parallel, work from one host only at that host's pace. Returns the count
        per active host (a parked host's restored rows wait for its turn on disk)."""
        core = self._db
        if n <= 0:
            return Counter()
        records = core.hosts.records
        hosts = [record.host for record in sorted(records.values(), key=lambda r: -r.deferred) if record.deferred]
        if core.hosts.parked_deferred:
            # Parked hosts' rows come back as parked queued work: it waits its turn on disk.
            hosts += core.hosts.unpark_deferred(min(max(PARKED_RESTORE_HOSTS, n // 4), PARKED_RESTORE_HOSTS_MAX))
        if not hosts:
            return Counter()
        share = -(-n // len(hosts))
        per_host: Counter[str] = Counter()
        with core.transaction():
            left = n
            for host in hosts:
                count = core.conn.execute(_RESTORE_SQL, (host, min(share, left))).rowcount
                if count:
                    per_host[host] = count
                    core.count(host, DEFERRED, -count)
                    core.count(host, QUEUED, count)
                    left -= count
                if left <= 0:
                    break
            core.after_commit(partial(self._count, RESTORED, sum(per_host.values())))
        return Counter({host: count for host, count in per_host.items() if host in records})

    def parked_on_arrival(self, count: int) -> None:
        """The open transaction parked `count` new URLs on arrival (the intake reports it)."""
        self._db.after_commit(partial(self._count, ARRIVED_WHILE_SHEDDING, count))

    def _count(self, reason: str, count: int) -> None:
        self._counts[reason] += count
