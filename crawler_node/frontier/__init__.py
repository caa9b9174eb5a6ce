"""The durable frontier: per-host queues, the exact seen-set, priorities, leases, per-host
politeness, and the outbox of URLs owed to peers.

    records   what goes in and out: UrlEntry, Lease, HostQueue, HostPoliteness, AddResult, FrontierBatch,
              InboundBatch
    schema    the SQLite tables, the connection's settings, migrating old databases
    frontier  Frontier: the facade, and the queue and its leases (add, lease_many, apply, ...)
    shedding  Frontier.shedding: parking low-priority URLs and bringing them back
    outbox    Frontier.outbox: URLs owed to peers, until acknowledged
    handoff   Frontier.handoff: hosts changing owner, URLs fetched elsewhere, ownership sweeps
    recrawl   Frontier.recrawl: what a fetch leaves for the next one, and done URLs queued again when due
    replica   Frontier.replica: what a neighbour queued and fetched, kept for a takeover
    operator_queries  what an operator asks: each host's counts, one host's queue, a drop
    service   FrontierService: the async shell, the only holder of the Frontier and its thread

Internals: db (FrontierDb: what the parts share, the connection, transactions, counters),
host_records (the per-host records), seen_set (the ways into the seen-set), leasing,
parked_scan, checkpointer, statements (statement shapes).
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
