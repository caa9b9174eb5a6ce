"""The durable frontier: per-host queues, the exact seen-set, priorities, leases, per-host
politeness, and the outbox of URLs owed to peers.

    records   what goes in and out: UrlEntry, Lease, HostQueue, HostPoliteness, AddResult, FrontierBatch,
              InboundBatch
    schema    the SQLite tables, the connection's settings, migrating old databases
    frontier  Frontier: the facade, and the queue and lease core (add, lease_many, apply, ...)
    shedding  Frontier.shedding: parking low-priority URLs and bringing them back
    outbox    Frontier.outbox: URLs owed to peers, until acknowledged
    handoff   Frontier.handoff: hosts changing owner, URLs fetched elsewhere, ownership sweeps
    recrawl   Frontier.recrawl: what a fetch leaves for the next one, and done URLs queued again when due
    service   FrontierService: the async shell, the only holder of the Frontier and its thread

Internals: core (what the parts share: connection, transactions, counters), hosts (the
per-host table), intake (the ways into the seen-set), statements (statement shapes).
"""

from crawler_node.datadir_layout import FRONTIER_FILENAME
from crawler_node.frontier.frontier import RECENT_URLS, Frontier
from crawler_node.frontier.handoff import Handoff
from crawler_node.frontier.outbox import Outbox
from crawler_node.frontier.records import (
    DEFERRED,
    DONE,
    FAILED,
    LEASED,
    QUEUED,
    AddResult,
    FrontierBatch,
    HostPoliteness,
    HostQueue,
    HostRefresh,
    InboundBatch,
    Lease,
    UrlEntry,
)
from crawler_node.frontier.recrawl import Recrawl
from crawler_node.frontier.service import FrontierService
from crawler_node.frontier.shedding import Shedding

__all__ = [
    "DEFERRED",
    "DONE",
    "FAILED",
    "FRONTIER_FILENAME",
    "LEASED",
    "QUEUED",
    "RECENT_URLS",
    "AddResult",
    "Frontier",
    "FrontierBatch",
    "FrontierService",
    "Handoff",
    "HostPoliteness",
    "HostQueue",
    "HostRefresh",
    "InboundBatch",
    "Lease",
    "Outbox",
    "Recrawl",
    "Shedding",
    "UrlEntry",
]
