"""What an operator asks of one node: pause and resume its fetching, drop a host's queue.

The cluster-wide commands (api.control) apply these on every member. A pause is a reason in
global admission (node.admission.OperatorPause): no new fetch starts, in-flight ones finish,
the buffered leases go back unattempted; intake, forwarding and heartbeats go on. It is kept in
`paused.json` in the data directory, so a node restarted while paused starts paused.

The last pause or resume is also kept, with its wall-clock time, as the node's ``ControlChange``
(`control.json`): a member that was down when the command was given catches up from the
others when it is back (api.catch_up), the newest change winning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# An operator's pause outlives a restart (a node stopped while paused starts paused), and so do
# the hosts dropped and the last change: in the data directory, under these names.
from crawler_node.datadir_layout import CHANGE_FILENAME, DROPPED_FILENAME, PAUSE_FILENAME, scratch_path
from crawler_node.frontier import FrontierService
from crawler_node.node.admission import FetchAdmission, OperatorPause
from crawler_node.node.hosts import HostTable
from crawler_node.node.leases import LeaseKeeper
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.node")

MAX_CLOCK_AHEAD_S = 300.0  # a change dated further ahead is a clock gone wrong: not caught up on
MAX_DROPPED_HOSTS = 10_000  # an operator's list, not a crawl's scope: --deny-url is for patterns


@dataclass(frozen=True, slots=True)
class ControlChange:
    """An operator's last pause or resume: what, when (wall clock), by whom, why. Ordered by
    time, then by who gave it, so every member picks the same newest one. Clocks of members
    that disagree by more than the time between two commands may pick the older."""

    paused: bool
    at: float
    by: str
    reason: str = ""

    def newer_than(self, other: ControlChange | None) -> bool:
        return other is None or (self.at, self.by) > (other.at, other.by)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> ControlChange:
        """Raises ValueError on anything but {"paused": bool, "at": number, "by": str, "reason": str}."""
        if not isinstance(raw, dict):
            raise ValueError("a control change is an object")
        paused, at, by, reason = raw.get("paused"), raw.get("at"), raw.get("by"), raw.get("reason", "")
        if (not isinstance(paused, bool) or isinstance(at, bool) or not isinstance(at, int | float)
                or not isinstance(by, str) or not isinstance(reason, str) or not 0 <= at < 1e11):
            raise ValueError("a control change is {paused: bool, at: seconds, by: str, reason: str}")
        return cls(paused=paused, at=float(at), by=by[:200], reason=reason[:200])


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
        self.last_change: ControlChange | None = None
        self.version = 0  # moves on every change an operator made here or a member brought
        # One write of this node's files at a time, each of the state as it is when its turn
        # comes: two changes at once (an operator's and a member's sync) wrote the same
        # scratch file from two threads, and the older one could be the one left on disk.
        self._writing = asyncio.Lock()

    async def pause(self, *, reason: str, by: str) -> bool:
        """Start no new fetch (in-flight ones finish) and lease nothing more, until
        :meth:`resume_crawl`; the buffered leases go back to the frontier unattempted. Durable:
        a node restarted while paused starts paused. False if it was paused already."""
        return await self.apply(ControlChange(paused=True, at=self._now_after_last(), by=by, reason=reason))

    async def resume_crawl(self, *, by: str) -> bool:
        """End an operator's pause; False if the crawl was not paused."""
        return await self.apply(ControlChange(paused=False, at=self._now_after_last(), by=by))

    def _now_after_last(self) -> float:
        # An operator's command is the newest by definition, even if a member's clock ran ahead.
        now = self._clock()
        return now if self.last_change is None else max(now, self.last_change.at + 0.001)

    async def apply(self, change: ControlChange) -> bool:
        """Pause or resume as ``change`` says, and keep it as the last change (unless a newer
        one is kept already: a command that arrives late changes nothing). True if the crawl's
        state changed."""
        if not change.newer_than(self.last_change):
            return False
        self.last_change = change
        self.version += 1
        if change.paused:
            changed = self.admission.pause(OperatorPause(reason=change.reason, by=change.by, since=change.at))
            if changed:
                self.leases.api_paused()
                log.warning("crawl paused by %s (%s): no new fetch until resumed", change.by, change.reason)
        else:
            pause = self.admission.resume()
            changed = pause is not None
            if pause is not None:
                log.warning("crawl resumed by %s after %.1f s paused (%s)", change.by, self._clock() - pause.since,
                            pause.reason)
        self._pressure.notify()
        await self._save_change()
        return changed

    async def _save_change(self) -> None:
        async with self._writing:
            if self.last_change is not None:
                await asyncio.to_thread(self._write_change, self.last_change)

    async def catch_up(self, change: ControlChange, *, source: str) -> bool:
        """A change another member kept: applied if it is newer than this node's (a pause or a
        resume given while this node was down). True if it was."""
        if not change.newer_than(self.last_change):
            return False
        if change.at > self._clock() + MAX_CLOCK_AHEAD_S:
            log.warning("not catching up from %s: its %s is dated %.0f s ahead of this node's clock", source,
                        "pause" if change.paused else "resume", change.at - self._clock())
            return False
        log.warning("catching up from %s on a %s given while this node was away", source,
                    "pause" if change.paused else "resume")
        await self.apply(change)
        return True

    def _write_change(self, change: ControlChange) -> None:
        # Whole or not at all (a torn file must not unpause a node); the pause file first, so a
        # crash between the two leaves the node paused with an older change, which catches up.
        if change.paused:
            _replace(self.data_dir / PAUSE_FILENAME,
                     {"reason": change.reason, "by": change.by, "since": change.at})
        else:
            (self.data_dir / PAUSE_FILENAME).unlink(missing_ok=True)
        _replace(self.data_dir / CHANGE_FILENAME, change.to_json())

    def restore(self) -> None:
        """At start: paused again if the node was stopped while paused; dropped hosts stay dropped."""
        try:
            for host in json.loads((self.data_dir / DROPPED_FILENAME).read_text())[:MAX_DROPPED_HOSTS]:
                if isinstance(host, str):
                    self.hosts.drop(host)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as exc:
            log.error("%s unreadable (%s): the hosts dropped before are crawled again", DROPPED_FILENAME, exc)
        try:
            self.last_change = ControlChange.from_json(json.loads((self.data_dir / CHANGE_FILENAME).read_text()))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): the next pause or resume from a member applies", CHANGE_FILENAME, exc)
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

    async def drop_hosts(self, hosts: list[str], *, source: str) -> int:
        """Hosts another member's operator dropped: dropped here too (without a queue to delete:
        a host's queue is on the member that crawls it). Returns how many were new here."""
        new = [host for host in hosts if host not in self.hosts.dropped]
        room = MAX_DROPPED_HOSTS - len(self.hosts.dropped)
        if len(new) > room:
            log.error("%d dropped hosts from %s not kept: at most %d are", len(new) - room, source, MAX_DROPPED_HOSTS)
            new = new[:max(0, room)]
        for host in new:
            self.hosts.drop(host)
        if new:
            self.version += 1
            await self._save_dropped()
            log.warning("%d hosts dropped by an operator through %s: %s", len(new), source, ", ".join(new[:10]))
        return len(new)

    async def _save_dropped(self) -> None:
        async with self._writing:
            # listed here, on the loop: the set is not iterated while another task adds to it
            await asyncio.to_thread(_replace, self.data_dir / DROPPED_FILENAME, sorted(self.hosts.dropped))

    async def drop_host(self, host: str) -> dict[str, int]:
        """Delete the host's queued and deferred URLs here, and its leases buffered but not
        dispatched; requests in flight finish normally. The host stays dropped: URLs of it that
        come later (links of pages in flight, other members' links, a takeover) are leased and
        ended unfetched, outcome host_dropped, and the other members learn it (api.catch_up).
        Returns the rows deleted by state."""
        if host not in self.hosts.dropped and len(self.hosts.dropped) >= MAX_DROPPED_HOSTS:
            raise ValueError(f"at most {MAX_DROPPED_HOSTS} hosts can be dropped; use --deny-url for more")
        self.hosts.drop(host)
        self.version += 1
        await self._save_dropped()
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


def _replace(path: Path, value: dict[str, Any] | list[Any]) -> None:
    scratch = scratch_path(path)
    scratch.write_text(json.dumps(value))
    os.replace(scratch, path)
