"""A node under a flood of `POST /v1/urls` keeps answering `GET /v1/status` (issue 14).

32 clients POST batches of new URLs as fast as the node answers, without waiting out its
Retry-After, while a 33rd reads the status every 0.1 s. Every status is answered (200, within a
generous 5 s) from a snapshot whose age stays bounded; the flooders get 202 or 429 with
Retry-After, never a 5xx or a dropped connection; and afterwards the node is alive and still
crawling. No timing is asserted beyond those bounds (the machines are shared): the latency
itself is bench/flood.py's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import aiohttp
from conftest import roots

from crawler_node.tools import client

CLIENTS = 32
BATCH = 200  # URLs per POST
FLOOD_S = 8.0
STATUS_TIMEOUT_S = 5.0
MAX_SNAPSHOT_AGE_S = 5.0


async def flood(url: str, seconds: float) -> tuple[Counter[str], int]:
    """What the node answered the flooders (by status, or the client error), and how many of its
    429s came without a Retry-After."""
    answers: Counter[str] = Counter()
    no_retry_after = 0
    deadline = time.monotonic() + seconds

    async def flooder(index: int, session: aiohttp.ClientSession) -> None:
        nonlocal no_retry_after
        sequence = 0
        while time.monotonic() < deadline:
            urls = [f"http://site-{i % 4}.test/flood/{index}/{sequence}/{i}" for i in range(BATCH)]
            try:
                async with session.post(f"{url}/v1/urls", json={"urls": urls}) as response:
                    await response.read()
                    answers[str(response.status)] += 1
                    no_retry_after += response.status == 429 and "Retry-After" not in response.headers
            except (aiohttp.ClientError, TimeoutError) as exc:
                answers[type(exc).__name__] += 1
            sequence += 1

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS), timeout=timeout) as session:
        await asyncio.gather(*(flooder(index, session) for index in range(CLIENTS)))
    return answers, no_retry_after


async def read_statuses(url: str, seconds: float) -> list[tuple[int | str, float | None]]:
    """(HTTP status or the client error, snapshot_age_s) of each status read every 0.1 s."""
    answers: list[tuple[int | str, float | None]] = []
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S)) as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"{url}/v1/status") as response:
                    body = await response.read()
                    age = json.loads(body).get("snapshot_age_s") if response.status == 200 else None
                    answers.append((response.status, age))
            except (aiohttp.ClientError, TimeoutError) as exc:
                answers.append((type(exc).__name__, None))
            await asyncio.sleep(0.1)
    return answers


async def test_status_answers_from_a_snapshot_while_32_clients_flood_the_intake(start_testweb, start_node):
    web = start_testweb(hosts=4, pages=200, seed=14)
    # A small inbound queue, so the flood is refused for much of the time (429 + Retry-After).
    node = start_node("flooded", proxy=web.url, seeds=roots(4), extra_args=["--inbound-capacity", "1000"])

    (posts, no_retry_after), statuses = await asyncio.gather(flood(node.url, FLOOD_S),
                                                             read_statuses(node.url, FLOOD_S))

    assert set(posts) <= {"202", "429"}, posts  # never a 5xx, a reset or a timeout
    assert posts["202"] > 0 and posts["429"] > 0, posts
    assert no_retry_after == 0
    assert len(statuses) >= 10
    assert all(code == 200 for code, _ in statuses), Counter(code for code, _ in statuses)
    ages = [age for _, age in statuses]
    assert all(age is not None and 0 <= age <= MAX_SNAPSHOT_AGE_S for age in ages), max(map(float, ages))

    # Alive, and still crawling: the pages fetched go on rising after the flood.
    fetched = node.status()["counters"]["fetched"]
    deadline = time.monotonic() + 60
    while node.status()["counters"]["fetched"] <= fetched:
        assert node.proc is not None and node.proc.poll() is None, node.log_tail()
        assert time.monotonic() < deadline, "no page fetched in 60 s after the flood"
        await asyncio.sleep(0.2)
    assert client.request_json(f"{node.url}/healthz", timeout=5)["ok"] is True
