"""The body of ``POST /v1/urls``, both ways: what a member's outbox sends (``encode_batch``,
``gzipped``) and what a node reads from anyone, a user or a member (``decode_urls``).

One format for users and members: ``{"urls": [...], "hosts"?: [...], "refresh"?: [...]}``.

- ``"urls"``: items ``{"url", "depth"?, "priority"?, "hops"?, "redirects"?, "via"?}`` (a bare
  string is ``{"url": ...}``). A member marks what it only records elsewhere: ``"seen": true``,
  a URL it fetched (a replica of it at the host's successor, or a handback to the owner);
  ``"replica": true``, a URL it queued (its successor keeps it, frontier.replica).
- ``"hosts"``: ``[[host, next_eligible, crawl_delay], ...]`` (wall-clock seconds), a member's
  politeness of those hosts, once per host; a row of politeness alone adds nothing to ``"urls"``.
- ``"refresh"``: ``[[host, token, complete], ...]``, a member's refresh of its replica here:
  the batch's queued replicas of the host are part of the refresh ``token``, which ends in this
  batch if ``complete`` (its end is a row with no URL).

A member's batch travels as msgpack (``MSGPACK``), gzip'd from ``GZIP_FROM_BYTES``, with the
headers ``FORWARDED_BY`` (who sends it: the receiver counts members' URLs apart from users')
and ``ADDRESSED_TO`` (which member it is for: a node that is not that member answers 421).
Every version of this node reads every field it knows and ignores none it does not: the
format only grows by optional fields, so old and new members take each other's batches.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from isal import isal_zlib

from crawler_node.core.urls import MAX_URL_LENGTH
from crawler_node.frontier import HostPoliteness
from crawler_node.frontier.outbox import OutboxRow
from crawler_node.frontier.replica import HostRefresh

MSGPACK = "application/msgpack"
# Names the member a peer's request is meant for; a node that is another member answers 421
# (api.app.misdirected_is_421) and the sender counts a failure, as for a heartbeat answered by
# another id. Addresses move between members: after `docker compose stop` and `start` the
# network hands the replicas its addresses again in another order (5 of 5 moved in a trial),
# and a restarted pod can get an address another pod had. Without it an outbox batch went to
# whoever holds the address now: a handback of fetched URLs became that member's replica, and
# the member it was for fetched them all again.
ADDRESSED_TO = "X-Crawler-To"
# Names the member a batch comes from: the receiver counts what members forwarded apart from
# what users submitted (Cluster.note_received).
FORWARDED_BY = "X-Crawler-Forwarded-By"
MAX_URLS_PER_REQUEST = 10_000
MAX_VIA_LENGTH = 8192  # characters of an item's "via", the page its URL was found on
MAX_PEER_HOSTS = 10_000  # entries of a batch's "hosts" or "refresh", at most (as many as its URLs)
_HOST_KEY = re.compile(r"[!-~]{1,300}")  # a frontier's host key: visible ASCII (IDNA), and short
_TOKEN = re.compile(r"[0-9A-Za-z_-]{1,64}")  # a refresh's token (cluster.replica_keeper makes 16 hex digits)
# A batch's msgpack says its hosts, its pages' URLs (every link's "via") and every row's keys
# again and again: gzip takes testweb's batches of 87 rows from 59 to 11 bytes a row, at
# ~0.1-0.2 µs a row to pack and as much to unpack (ISA-L's level 1; zlib's 6 is 4-7x the CPU
# for ~17% fewer bytes; bench/cost_model.py's gzip_curve has it by batch size). A member's
# API (aiohttp) decodes a gzip body before its handler reads it, in every version of this
# node, and bounds what it decodes (api.http.read_body). Bodies under this size stay as they
# are: a batch of one testweb row (~70 bytes) grows by gzip's frame (x1.13), one of two
# (~140) already weighs 0.71 of its msgpack, of five 0.41.
GZIP_FROM_BYTES = 128
GZIP_LEVEL = 1


# ----------------------------------------------------------------------- sending
def gzipped(payload: bytes) -> tuple[bytes, str | None]:
    """The body to send for a batch's msgpack, and its Content-Encoding (None: as it is)."""
    if len(payload) < GZIP_FROM_BYTES:
        return payload, None
    return isal_zlib.compress(payload, GZIP_LEVEL, 31), "gzip"  # wbits 31: a gzip frame


def encode_batch(rows: Sequence[OutboxRow]) -> dict[str, list[Any]]:
    """The body of POST /v1/urls for outbox rows. A replica carries what its receiver keeps of
    it (frontier.replica), no more: a fetched URL only its URL; a queued one what it is queued
    with. Politeness and refreshes go once per host (see the module's docstring)."""
    urls: list[dict[str, Any]] = []
    hosts: dict[str, list[Any]] = {}
    refresh: dict[str, list[Any]] = {}
    for row in rows:
        e = row.entry
        polite = row.politeness
        if polite is not None:
            hosts[polite.host] = [polite.host, polite.next_eligible, polite.crawl_delay]
        if row.politeness_only:
            continue  # its politeness is all it says
        if row.refresh is not None:
            # the last refresh of the host in the batch is the one its replicas are part of
            mark = refresh.get(e.host)
            if mark is None or mark[1] != row.refresh:
                refresh[e.host] = mark = [e.host, row.refresh, False]
            if row.ends_refresh:
                mark[2] = True
                continue
        if row.replica and row.seen:
            urls.append({"url": e.url, "seen": True})
        elif row.replica:
            item: dict[str, Any] = {"url": e.url, "depth": e.depth, "priority": e.priority, "replica": True}
            if e.redirects:
                item["redirects"] = e.redirects
            if e.via is not None:
                item["via"] = e.via
            urls.append(item)
        else:
            urls.append({"url": e.url, "depth": e.depth, "priority": e.priority, "hops": e.hops,
                         "redirects": e.redirects, "via": e.via, "seen": row.seen})
    body: dict[str, list[Any]] = {"urls": urls}
    if hosts:
        body["hosts"] = list(hosts.values())
    if refresh:
        body["refresh"] = list(refresh.values())
    return body


# ----------------------------------------------------------------------- reading
class MalformedBody(ValueError):
    """The body as a whole is not a POST /v1/urls body; ``reason`` is the API's error code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


Item = tuple[int, dict[str, Any]]  # an item of "urls" with its index there


@dataclass(slots=True)
class UrlsBody:
    """A POST /v1/urls body, read: its well-formed items by what the sender says of them
    (each with its index in ``"urls"``), what is wrong with the others, and what a member's
    batch says besides its URLs."""

    crawl: list[Item] = field(default_factory=list)  # to crawl
    seen: list[Item] = field(default_factory=list)  # fetched by the member that sends them
    replica: list[Item] = field(default_factory=list)  # queued by the member that sends them
    invalid: list[dict[str, Any]] = field(default_factory=list)  # {"index", "reason", ...}
    politeness: list[HostPoliteness] = field(default_factory=list)
    refreshes: list[HostRefresh] = field(default_factory=list)

    @property
    def from_member(self) -> bool:
        """It says what only a member says: what it fetched or queued, politeness, a refresh."""
        return bool(self.politeness or self.refreshes or self.seen or self.replica)

    @property
    def items(self) -> list[Item]:
        """Every well-formed item, in the order of ``"urls"``."""
        return sorted(self.crawl + self.seen + self.replica, key=lambda item: item[0])

    @property
    def well_formed(self) -> int:
        return len(self.crawl) + len(self.seen) + len(self.replica)


def decode_urls(document: object) -> UrlsBody:
    """Read a decoded POST /v1/urls body (JSON or msgpack). Raises MalformedBody for a body
    that is not one; an item that is not well-formed is listed in ``invalid`` by index."""
    body = UrlsBody()
    try:
        body.refreshes = peer_refresh(document)
    except ValueError as exc:
        raise MalformedBody("bad_refresh", str(exc)) from None
    try:
        body.politeness = peer_politeness(document)
    except ValueError as exc:
        raise MalformedBody("bad_hosts", str(exc)) from None
    # A member's batch may say only the end of a refresh, or politeness.
    _read_items(document, body, may_be_empty=bool(body.refreshes or body.politeness))
    return body


def _read_items(document: object, body: UrlsBody, *, may_be_empty: bool) -> None:
    if not isinstance(document, dict) or "urls" not in document:
        raise MalformedBody("bad_shape", 'body must be an object {"urls": [...]}')
    urls = document["urls"]
    if not isinstance(urls, list):
        raise MalformedBody("bad_shape", '"urls" must be a list')
    if not urls and not may_be_empty:
        raise MalformedBody("empty", '"urls" must not be empty')
    if len(urls) > MAX_URLS_PER_REQUEST:
        raise MalformedBody("too_many", f"at most {MAX_URLS_PER_REQUEST} URLs per request")
    crawl, seen, replica, invalid = body.crawl, body.seen, body.replica, body.invalid
    for index, item in enumerate(urls):
        if isinstance(item, str):
            item = {"url": item}
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            invalid.append({"index": index, "reason": "bad_shape"})
        elif not _fields_ok(item):
            invalid.append({"index": index, "reason": "bad_field"})
        elif len(item["url"]) > MAX_URL_LENGTH:
            invalid.append({"index": index, "reason": "too_long", "length": len(item["url"])})
        else:
            (seen if item.get("seen") else replica if item.get("replica") else crawl).append((index, item))


_COUNTS = ("depth", "hops", "redirects")


def _fields_ok(item: dict[str, Any]) -> bool:
    # "redirects" and "via" are optional, as every field but "url": a peer of an earlier
    # version omits them. Written out rather than through a helper per field: a peer's batch
    # runs this for each of its rows (a closure per call cost a third of the check).
    for key in _COUNTS:
        value = item.get(key, 0)
        if not (type(value) is int and 0 <= value < 10**6):  # type(): a bool is not a count
            return False
    priority = item.get("priority", 0)
    if not (type(priority) is int and -(10**6) < priority < 10**6):
        return False
    via = item.get("via")
    return (via is None or (type(via) is str and len(via) <= MAX_VIA_LENGTH)) \
        and type(item.get("seen", False)) is bool and type(item.get("replica", False)) is bool


def peer_politeness(document: object) -> list[HostPoliteness]:
    """The ``"hosts"`` of a body; ValueError if malformed."""
    hosts = document.get("hosts", []) if isinstance(document, dict) else []
    if not isinstance(hosts, list) or len(hosts) > MAX_PEER_HOSTS:
        raise ValueError(f'"hosts" must be a list of at most {MAX_PEER_HOSTS} entries')
    found = []
    for entry in hosts:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and _HOST_KEY.fullmatch(entry[0]) and all(_time(value) for value in entry[1:])):
            raise ValueError('each of "hosts" must be [host, next_eligible, crawl_delay]')
        found.append(HostPoliteness(entry[0].lower(), float(entry[1]), float(entry[2])))
    return found


def peer_refresh(document: object) -> list[HostRefresh]:
    """The ``"refresh"`` of a body; ValueError if malformed."""
    marks = document.get("refresh", []) if isinstance(document, dict) else []
    if not isinstance(marks, list) or len(marks) > MAX_PEER_HOSTS:
        raise ValueError(f'"refresh" must be a list of at most {MAX_PEER_HOSTS} entries')
    found = []
    for entry in marks:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and _HOST_KEY.fullmatch(entry[0]) and isinstance(entry[1], str) and _TOKEN.fullmatch(entry[1])
                and isinstance(entry[2], bool)):
            raise ValueError('each of "refresh" must be [host, token, complete]')
        found.append(HostRefresh(entry[0].lower(), entry[1], entry[2]))
    return found


def _time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11
