"""The operator's files (node.operator): changes that come at once (an operator's command and a
member's sync, the API fuzz's many) are written one at a time, and the newest is what stays on
disk, with the pause file saying the same."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from crawler_node.config import PolitenessConfig
from crawler_node.core.backoff import HostBackoffPolicy
from crawler_node.core.limiter import AimdLimiter
from crawler_node.node.admission import FetchAdmission
from crawler_node.node.hosts import HostTable
from crawler_node.node.operator import CHANGE_FILENAME, DROPPED_FILENAME, PAUSE_FILENAME, ControlChange, OperatorControl
from crawler_node.runtime.wakeup import Wakeup


class Leases:
    def api_paused(self) -> None:
        pass


def operator(data_dir: Path) -> OperatorControl:
    hosts = HostTable(config=PolitenessConfig(host_turn_s=0.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=1, floor=1, ceiling=1),
                      backoff_policy=HostBackoffPolicy(initial_s=1.0, forgive_after_s=10.0), work=Wakeup(),
                      started_at=0.0)
    return OperatorControl(admission=FetchAdmission(api=None, ip_gates=None), leases=Leases(),  # type: ignore[arg-type]
                           hosts=hosts, frontier=None, pressure=Wakeup(), data_dir=data_dir,  # type: ignore[arg-type]
                           clock=lambda: 1000.0)


async def test_changes_at_once_leave_the_newest_on_disk(tmp_path: Path) -> None:
    control = operator(tmp_path)
    changes = [ControlChange(paused=k % 2 == 0, at=100.0 + k, by=f"member-{k}", reason="fuzz") for k in range(60)]
    await asyncio.gather(*(control.apply(change) for change in changes))
    newest = changes[-1]
    assert control.last_change == newest
    assert json.loads((tmp_path / CHANGE_FILENAME).read_text()) == newest.to_json()
    assert (tmp_path / PAUSE_FILENAME).exists() is newest.paused
    assert not list(tmp_path.glob("*.tmp"))


async def test_hosts_dropped_at_once_are_all_on_disk(tmp_path: Path) -> None:
    control = operator(tmp_path)
    await asyncio.gather(*(control.drop_hosts([f"h{k}.test"], source="m") for k in range(40)))
    assert json.loads((tmp_path / DROPPED_FILENAME).read_text()) == sorted(f"h{k}.test" for k in range(40))
