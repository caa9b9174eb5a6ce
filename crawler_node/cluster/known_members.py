"""The members a node found through peer DNS, remembered in its data directory across restarts.

A member found by DNS (``--peer-dns``) is given no peer list: after a restart it knows only what
its first lookups return and what the members it joins through list. After ``docker compose
stop`` and ``start`` every replica restarts at once and enters DNS in its own time, so a member
could end its start-up hold (cluster.readiness) without one that was in the cluster before.
Unknown, that member is not down either: no takeover promotes the replica this node keeps of
its queue (cluster.replica_keeper), its hosts route here as if they had never been crawled, and their
pages are fetched again from the links that reach them.

Remembered, it is a member from the start: the hold waits for its first answer (or for the
failure detector to find it down, and then its successor takes its arc over from the
replica, as after any failure), and the ring routes its hosts to it meanwhile. An address
that changed is harmless: a heartbeat answered by another member's id is a failure
(cluster.heartbeats), and the member's own join, through DNS, gives its new URL.

The file is ``members.json``: ``{"members": [{"id": ..., "url": ...}, ...]}``, written (to a
temporary file, then renamed) whenever the list of (id, url) pairs changes; members that left
and handed all their work on are not kept. A file that cannot be read is logged and ignored:
the node starts as it did before it had one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from crawler_node.cluster.membership import BadView, Membership, parse_view
from crawler_node.datadir_layout import scratch_path

log = logging.getLogger("crawler_node.cluster")

MAX_REMEMBERED = 4096  # members read back at most (a cluster of hundreds is large)
MAX_FILE_BYTES = 4 * 1024 * 1024


class KnownMembers:
    """``members.json`` in a data directory: :meth:`load` at start, :meth:`save` on changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._saved: str | None = None  # the membership digest last written

    def load(self, self_id: str) -> list[tuple[str, str]]:
        """The (id, url) pairs remembered, this node's own id left out; [] without a file."""
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise ValueError(f"over {MAX_FILE_BYTES} bytes")
            body = json.loads(raw)
            members = parse_view(body.get("members") if isinstance(body, dict) else None)
        except FileNotFoundError:
            return []
        except (OSError, ValueError, BadView, RecursionError) as exc:  # JSONDecodeError is a ValueError
            log.warning("%s cannot be read (%s): starting without the members it listed", self.path, exc)
            return []
        return [(node_id, url) for node_id, url in members if node_id != self_id][:MAX_REMEMBERED]

    def save(self, membership: Membership) -> None:
        """Write the members if their (id, url) pairs changed since the last write. A failure
        to write is logged, never raised: the file only saves a restart some time."""
        digest = membership.digest()
        if digest == self._saved:
            return
        members = [{"id": m.node_id, "url": m.url} for m in membership.peers() if not (m.left and m.drained)]
        temp = scratch_path(self.path)
        try:
            temp.write_text(json.dumps({"members": members}), encoding="utf-8")
            os.replace(temp, self.path)
        except OSError as exc:
            log.warning("cannot write %s (%s): a restart will not remember the members", self.path, exc)
            return
        self._saved = digest
