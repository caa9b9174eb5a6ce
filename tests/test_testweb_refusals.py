"""testweb's refusal profiles (testweb.refusals): each kind is served as configured, counted in
the stats, and read by the crawler's own classifier (core.refusals) as the kind it plays."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from crawler_node.core.refusals import (
    RefusalKind,
    RefusalRules,
    SoftBlockHistory,
    classify_refusal,
    small_body_digest,
)
from crawler_node.testweb import TestwebProcess

PROFILE = {
    "site-0.test": {"challenge_rps": 3, "refusal_for_s": 60},
    "site-1.test": {"captcha": 0.5},
    "site-2.test": {"login_wall": 0.5},
    "site-3.test": {"soft_block_after": 4, "refusal_for_s": 60},
    "site-4.test": {"forbidden": 0.5},
}
KIND_OF = {"challenge": RefusalKind.CHALLENGE, "captcha": RefusalKind.CAPTCHA, "login_wall": RefusalKind.LOGIN_WALL,
           "soft_block": RefusalKind.SOFT_BLOCK, "forbidden": RefusalKind.REFUSAL}


@pytest.fixture(scope="module")
def refusing_web():
    with TestwebProcess(hosts=6, pages=30, profile=PROFILE) as web:
        yield web


async def _get(session: aiohttp.ClientSession, proxy: str, url: str) -> tuple[int, list[tuple[str, str]], bytes]:
    async with session.get(url, proxy=proxy, allow_redirects=False) as response:
        return response.status, list(response.headers.items()), await response.read()


async def _crawl(web: TestwebProcess, host: str, count: int) -> list[RefusalKind | None]:
    """Ask for /p/1.. one by one; what the classifier makes of each answer."""
    history, rules, kinds = SoftBlockHistory(), RefusalRules(), []
    async with aiohttp.ClientSession(trust_env=False) as session:
        for index in range(1, count + 1):
            url = f"http://{host}/p/{index}"
            status, headers, body = await _get(session, web.url, url)
            refusal = classify_refusal(url=url, status=status, headers=headers, body=body, history=history,
                                       rules=rules)
            if refusal is None and status == 200:
                history.observe(url, small_body_digest(status, body, rules), rules)
            kinds.append(refusal.kind if refusal else None)
    return kinds


@pytest.mark.parametrize("host, kind", [("site-1.test", "captcha"), ("site-2.test", "login_wall"),
                                        ("site-4.test", "forbidden")])
async def test_fraction_refusals_are_served_counted_and_recognised(refusing_web, host, kind):
    refusing_web.reset()
    kinds = await _crawl(refusing_web, host, 20)
    served = refusing_web.stats()["hosts"][host]
    assert served["refused"] == {kind: kinds.count(KIND_OF[kind])}
    assert 0 < served["refused"][kind] < 20
    assert set(kinds) == {None, KIND_OF[kind]}
    assert await _crawl(refusing_web, host, 20) == kinds  # the same URLs every time


async def test_soft_block_after_threshold(refusing_web):
    refusing_web.reset()
    kinds = await _crawl(refusing_web, "site-3.test", 12)
    served = refusing_web.stats()["hosts"]["site-3.test"]["refused"]["soft_block"]
    assert kinds[:4] == [None] * 4
    rules = RefusalRules()
    # the first few same pages cannot be told from pages yet; then each is a soft block
    assert kinds[4 + rules.soft_block_urls - 1:] == [RefusalKind.SOFT_BLOCK] * (12 - 4 - rules.soft_block_urls + 1)
    assert served == 8


async def test_challenge_after_rate(refusing_web):
    refusing_web.reset()
    async with aiohttp.ClientSession(trust_env=False) as session:
        answers = await asyncio.gather(*(_get(session, refusing_web.url, f"http://site-0.test/p/{k}")
                                         for k in range(1, 9)))
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == 3 and statuses.count(403) == 5
    for status, headers, body in answers:
        if status == 403:
            refusal = classify_refusal(url="http://site-0.test/p/1", status=status, headers=headers, body=body,
                                       history=None, rules=RefusalRules())
            assert refusal is not None and refusal.kind is RefusalKind.CHALLENGE
    host = refusing_web.stats()["hosts"]["site-0.test"]
    assert host["refused"] == {"challenge": 5}
    assert refusing_web.stats(summary=True)["totals"]["refused"] == 5
