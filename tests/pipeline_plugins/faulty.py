"""Pipelines that misbehave on purpose: one raises on every tenth page, one sleeps past its budget."""

from __future__ import annotations

import time
import zlib


def _tenth(url: str) -> bool:
    return zlib.crc32(url.encode()) % 10 == 0


def raises_on_every_tenth(page):
    if _tenth(page.url):
        raise RuntimeError(f"refusing {page.url}")
    return {"length": len(page.text)}


def sleeps_on_every_tenth(page):
    if _tenth(page.url):
        time.sleep(30)  # far past the test's --pipeline-budget-s
    return {"links": len(page.links)}
