"""A small blocking HTTP client for the CLI (submit, status, demo): standard library only, and
never through an environment proxy — node URLs are addresses of our own cluster."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class NodeError(Exception):
    def __init__(self, url: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url
        self.status = status


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request_json(url: str, *, body: Any = None, secret: str | None = None, timeout: float = 10.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if secret:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode("utf-8", "replace")
        raise NodeError(url, f"HTTP {exc.code}: {detail}", exc.code) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NodeError(url, str(getattr(exc, "reason", exc))) from exc


def submit(node: str, urls: list[str], *, secret: str | None = None, batch: int = 1000) -> dict[str, int]:
    totals = {"accepted": 0, "duplicate": 0, "rejected": 0}
    for start in range(0, len(urls), batch):
        answer = request_json(f"{node.rstrip('/')}/v1/urls", body={"urls": urls[start:start + batch]}, secret=secret)
        for key in totals:
            totals[key] += int(answer.get(key, 0))
    return totals


def status(node: str, *, timeout: float = 10.0) -> dict:
    return request_json(f"{node.rstrip('/')}/v1/status", timeout=timeout)
