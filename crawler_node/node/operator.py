"""What an operator asks of one node: pause and resume its fetching, drop a host's queue.

The cluster-wide commands (api.control) apply these on every member. A pause is a reason in
global admission (node.admission.OperatorPause): no new fetch starts, in-flight ones finish,
the buffered leases go back unattempted; intake, forwarding and heartbeats go on. It is kept in
`paused.json` in the data directory, so a node restarted while paused starts paused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from crawler_node.frontier import FrontierService
from crawler_node.node.admission import FetchAdmission, OperatorPause
from crawler_node.node.hosts import HostTable
from crawler_node.node.leases import LeaseKeeper
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.node")

# An operator's pause outlives a restart: a node stopped while paused starts paused.
PAUSE_FILENAME = "paused.json"


class OperatorControl:
    def __init__(self, *, admission: FetchAdmission, leases: LeaseKeeper, hosts: HostTable,
                 frontier: FrontierService, pressure: Wakeup, data_dir: Path, clock: Callable[[], float]) -> None:
        self.admission = admission
        self.leases = leases
        self.hosts = hosts
        self.frontier = frontier
        self._pressure = pressure
        self.data_dir = data_dir
        self._clock = clock

    async def pause(self, *, reason: str, by: str) -> bool:
        """Start no new fetch (in-flight ones finish) and lease nothing more, until
        :meth:`resume_crawl`; the buffered leases go back to the frontier unattempted. Durable:
        a node restarted while paused starts paused. False if it was paused already."""
        pause = OperatorPause(reason=reason, by=by, since=self._clock())
        if not self.admission.pause(pause):
            return False
        self.leases.api_paused()
        self._pressure.notify()
        await asyncio.to_thread(self._write_pause, pause)
        log.warning("crawl paused by %s (%s): no new fetch until resumed", by, reason)
        return True

    async def resume_crawl(self, *, by: str) -> bool:
        """End an operator's pause; False if the crawl was not paused."""
        pause = self.admission.resume()
        if pause is None:
            return False
        await asyncio.to_thread((self.data_dir / PAUSE_FILENAME).unlink, missing_ok=True)
        self._pressure.notify()
        log.warning("crawl resumed by %s after %.1f s paused (%s)", by, self._clock() - pause.since, pause.reason)
        return True

    def _write_pause(self, pause: OperatorPause) -> None:
        path = self.data_dir / PAUSE_FILENAME
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps({"reason": pause.reason, "by": pause.by, "since": pause.since}))
        os.replace(scratch, path)  # whole or not at all: a torn file must not unpause a node

    def restore(self) -> None:
        """At start: paused again if the node was stopped while paused."""
        path = self.data_dir / PAUSE_FILENAME
        if not path.exists():
            return
        try:
            saved = json.loads(path.read_text())
            pause = OperatorPause(reason=str(saved["reason"]), by=str(saved["by"]), since=float(saved["since"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Unreadable: still paused, as the file's presence says; resuming removes it.
            pause = OperatorPause(reason=f"{PAUSE_FILENAME} unreadable ({exc})", by="restart", since=self._clock())
        self.admission.pause(pause)
        log.warning("starting paused (%s, by %s): nothing is fetched until `crawler-node resume`",
                    pause.reason, pause.by)

    async def drop_host(self, host: str) -> dict[str, int]:
        """Delete the host's queued and deferred URLs here, and its leases buffered but not
        dispatched; requests in flight finish normally. Returns the rows deleted by state."""
        dropped: Counter[str] = Counter()
        # A lease round already on its way to the frontier fills the buffer again once it is
        # back (before this call's answer, which the frontier's thread queued after it): the
        # second pass takes what it brought.
        for _ in range(2):
            state = self.hosts.get(host)
            # No await between taking the buffer and handing it to the frontier call below:
            # the dispatcher cannot start one of these leases meanwhile (release_host empties it).
            buffered = self.hosts.release_host(state, self._clock()) if state is not None else []
            dropped += await self.frontier.drop_host(host, buffered)
            if state is not None:
                # URLs of the host that came in during the call were deleted with the rest (or,
                # if they came after it, the upkeep's resync brings them back): none is left to
                # wait on.
                self.hosts.deferred({host: state.queued})
            if state is None or not state.buffer:
                break
        log.warning("dropped host %s: %d queued, %d deferred and %d buffered URLs deleted", host,
                    dropped["queued"], dropped["deferred"], dropped["leased"])
        return dict(dropped)
