"""Helpers shared by the staged pressure scenarios (tests/test_pressure_*.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: dict | None = None, headers: dict | None = None) -> tuple[int, dict]:
    """POST JSON to a node; (status, decoded body), error statuses included."""
    request = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def get_text(url: str) -> str:
    with _OPENER.open(url, timeout=10) as response:
        return response.read().decode()


def fetched_at(line: dict) -> float:
    """A crawl.log line's fetched_at (ISO 8601 UTC) as epoch seconds."""
    return datetime.fromisoformat(line["fetched_at"].replace("Z", "+00:00")).timestamp()
