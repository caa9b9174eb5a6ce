"""A small blocking HTTP client for the CLI (submit, status, crawl control, demo): standard
library only, and never through an environment proxy — node URLs are addresses of our own
cluster."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class NodeError(Exception):
    def __init__(self, url: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url
        self.status = status


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request_json(url: str, *, body: Any = None, secret: str | None = None, timeout: float = 10.0,
                 method: str | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if secret:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raise NodeError(url, f"HTTP {exc.code}: {_error_detail(exc.read()[:2000])}", exc.code) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NodeError(url, str(getattr(exc, "reason", exc))) from exc


def submit(node: str, urls: list[str], *, secret: str | None = None, batch: int = 1000) -> dict[str, int]:
    totals = {"accepted": 0, "forwarded": 0, "duplicate": 0, "rejected": 0, "capped": 0}
    for start in range(0, len(urls), batch):
        answer = request_json(f"{node.rstrip('/')}/v1/urls", body={"urls": urls[start:start + batch]}, secret=secret)
        for key in totals:
            totals[key] += int(answer.get(key, 0))
    return totals


def status(node: str, *, timeout: float = 10.0, fresh: bool = False) -> dict[str, Any]:
    """``fresh``: built after this request (what was just submitted or changed is in it),
    rather than the node's snapshot, which may be up to half a second older."""
    return request_json(f"{node.rstrip('/')}/v1/status{'?fresh=1' if fresh else ''}", timeout=timeout)


def _error_detail(body: bytes) -> str:
    """A node's error answer in one line: its message when it sent one."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body[:500].decode("utf-8", "replace").strip()
    if isinstance(answer, dict) and isinstance(answer.get("message"), str):
        return f"{answer['message']} ({answer.get('error', 'error')})"
    return json.dumps(answer)[:500]


def _url(node: str, path: str, **params: Any) -> str:
    query = urllib.parse.urlencode({key: value for key, value in params.items() if value is not None})
    return f"{node.rstrip('/')}{path}" + (f"?{query}" if query else "")


def control(node: str, action: str, *, secret: str | None = None, reason: str | None = None,
            timeout: float = 15.0) -> dict[str, Any]:
    """POST /v1/control/{pause,resume,stop}: the whole cluster, through ``node``."""
    body = {"reason": reason} if reason else {}
    return request_json(_url(node, f"/v1/control/{action}"), body=body, secret=secret, timeout=timeout)


def hosts(node: str, *, secret: str | None = None, sort: str | None = None, order: str | None = None,
          limit: int | None = None, offset: int | None = None, unhealthy: bool = False) -> dict[str, Any]:
    """``unhealthy``: only hosts whose health is not "healthy" (with sort "health": the worst first)."""
    return request_json(_url(node, "/v1/hosts", sort=sort, order=order, limit=limit, offset=offset,
                             unhealthy=1 if unhealthy else None), secret=secret)


def host_queue(node: str, host: str, *, secret: str | None = None, limit: int | None = None) -> dict[str, Any]:
    return request_json(_url(node, f"/v1/hosts/{urllib.parse.quote(host, safe=':')}/queue", limit=limit),
                        secret=secret)


def drop_host(node: str, host: str, *, secret: str | None = None) -> dict[str, Any]:
    return request_json(_url(node, f"/v1/hosts/{urllib.parse.quote(host, safe=':')}/queue"), secret=secret,
                        method="DELETE")
