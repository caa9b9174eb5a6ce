"""A crawl replayed by pywb from the node's WARC files and their CDXJ indexes: what the archive
gives back is what the server sent, and every index line leads to its record."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import surt
from conftest import read_crawl_log, roots
from replay_helpers import Wayback
from warcio.archiveiterator import ArchiveIterator

from crawler_node.store.cdxj import index_missing, index_path
from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

HOSTS, PAGES = 3, 12
PROFILE = {
    # /bomb: a small gzip-encoded page (3,000 bytes inflated), whatever the request accepts
    "site-0.test": {"gzip_bomb": 3_000},
    # /dup/0/a and /dup/0/b: the same bytes, so the second one fetched is a revisit record
    "site-1.test": {"duplicates": 1},
    # every HTML page gzip-encoded, as the node's Accept-Encoding allows
    "site-2.test": {"gzip": True},
}
CDXJ_LINE = re.compile(r"(?P<key>\S+) (?P<stamp>\d{14}) (?P<fields>\{.*\})")


@dataclass
class Replay:
    web: TestwebProcess
    wayback: Wayback
    warc_dir: Path
    log: list[dict]  # crawl.log, robots.txt exchanges included
    accept_encoding: dict[str, str | None]  # URL -> the Accept-Encoding the node sent for it
    revisits: list[str]  # URLs archived as revisit records

    def urls(self, status: int, *, kind: str = "page") -> list[str]:
        return sorted(line["url"] for line in self.log if line["status"] == status and line["kind"] == kind)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=5, profile=PROFILE, tmp_dir=tmp) as web:
        node = NodeProcess(node_id="node-1", data_dir=tmp / "node-1", proxy=web.url, seeds=roots(HOSTS))
        try:
            node.start()
            node.wait_idle(timeout_s=120)
        finally:
            code = node.stop()  # SIGTERM: the node closes its WARC file
        assert code == 0, node.log_tail()
        warc_dir = node.data_dir / "warc"
        # Idempotent: a file the writer indexed as it closed it has a current index already.
        index_missing(warc_dir)
        with Wayback(warc_dir, work_dir=tmp / "pywb") as wayback:
            accept_encoding, revisits = archived(warc_dir)
            yield Replay(web=web, wayback=wayback, warc_dir=warc_dir,
                         log=read_crawl_log(node.data_dir, everything=True),
                         accept_encoding=accept_encoding, revisits=revisits)


def archived(warc_dir: Path) -> tuple[dict[str, str | None], list[str]]:
    """The Accept-Encoding the node sent for each URL (its request records), and the URLs
    archived as revisits."""
    sent, revisits = {}, []
    for path in warc_dir.glob("*.warc.gz"):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                url = record.rec_headers.get_header("WARC-Target-URI")
                if record.rec_type == "request":
                    sent[url] = record.http_headers.get_header("Accept-Encoding")
                elif record.rec_type == "revisit":
                    revisits.append(url)
    return sent, revisits


async def served(replay: Replay, url: str) -> tuple[int, dict[str, str], bytes]:
    """What testweb sends for `url` to a client asking as the node did, body undecoded."""
    accept_encoding = replay.accept_encoding[url]
    headers = {"Accept-Encoding": accept_encoding} if accept_encoding else {}
    async with aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=["Accept-Encoding"]) as session:
        async with session.get(url, proxy=replay.web.url, headers=headers, allow_redirects=False) as response:
            return response.status, dict(response.headers), await response.read()


async def assert_replayed_as_served(replay: Replay, url: str) -> str | None:
    """pywb's replay of `url` has testweb's status, type, encoding and body bytes; returns the
    Content-Encoding. Asked with the node's Accept-Encoding, pywb passes a stored encoding and
    its encoded bytes through (it decodes only for a client that does not accept it)."""
    status, headers, body = await served(replay, url)
    replayed = replay.wayback.replay(url, accept_encoding=replay.accept_encoding[url])
    assert (replayed.status, status) == (200, 200), f"{url}\n{replay.wayback.log_tail()}"
    assert replayed.headers.get("Content-Type") == headers.get("Content-Type"), url
    assert replayed.headers.get("Content-Encoding") == headers.get("Content-Encoding"), url
    assert replayed.body == body, url
    return headers.get("Content-Encoding")


async def test_pywb_replays_every_crawled_page_as_served(replay) -> None:
    ok = replay.urls(200)
    assert set(replay.web.expected()) <= set(ok), "the crawl did not cover the test web"
    # What the profile promised: binary bodies, and a revisit that pywb must resolve through
    # the index to its original's payload.
    assert any(url.endswith(".png") for url in ok)
    assert replay.revisits and set(replay.revisits) <= set(ok)
    encoded = [url for url in ok if await assert_replayed_as_served(replay, url)]
    assert "http://site-0.test/bomb" in encoded and any(url.startswith("http://site-2.test/p/") for url in encoded)


async def test_an_archived_404_is_replayed_and_an_unarchived_url_is_not(replay) -> None:
    [url, *_] = replay.urls(404, kind="robots")  # testweb has no robots.txt for these hosts
    status, _, body = await served(replay, url)
    replayed = replay.wayback.replay(url, accept_encoding=replay.accept_encoding[url])
    assert status == 404
    assert (replayed.status, replayed.body) == (status, body)
    assert replayed.headers.get("Memento-Datetime")  # a capture, not pywb's own "not found"
    missing = replay.wayback.replay("http://site-0.test/never-crawled")
    assert missing.status == 404 and missing.headers.get("Memento-Datetime") is None


def test_warcio_check_passes_on_every_warc_file(replay) -> None:
    files = sorted(str(path) for path in replay.warc_dir.glob("*.warc.gz"))
    assert files
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from warcio.cli import main; main(sys.argv[1:])", "check", *files],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_cdxj_line_leads_to_a_record_of_its_url(replay) -> None:
    warc_files = sorted(replay.warc_dir.glob("*.warc.gz"))
    indexes = sorted(replay.warc_dir.glob("*.cdxj"))
    assert indexes == sorted(index_path(path) for path in warc_files)
    for index in indexes:
        lines = index.read_text().splitlines()
        assert lines == sorted(lines), f"{index.name} is not sorted"
        indexed = set()
        for line in lines:
            match = CDXJ_LINE.fullmatch(line)
            assert match, line
            fields = json.loads(match["fields"])
            assert {"url", "status", "offset", "length", "filename"} <= fields.keys(), line
            assert match["key"] == surt.surt(fields["url"])
            with (replay.warc_dir / fields["filename"]).open("rb") as stream:
                stream.seek(int(fields["offset"]))
                record = next(iter(ArchiveIterator(stream)))
                assert record.rec_type in ("response", "revisit"), line
                assert record.rec_headers.get_header("WARC-Target-URI") == fields["url"]
                date = record.rec_headers.get_header("WARC-Date")
                assert re.sub(r"\D", "", date)[:14] == match["stamp"]
                assert str(record.http_headers.get_statuscode()) == fields["status"]
            indexed.add((fields["filename"], int(fields["offset"])))
        # ... and every response and revisit record has its line
        warc_path = index.with_name(index.name.removesuffix(".cdxj") + ".warc.gz")
        with warc_path.open("rb") as stream:
            iterator = ArchiveIterator(stream)
            archived = {(warc_path.name, iterator.get_record_offset())
                        for record in iterator if record.rec_type in ("response", "revisit")}
        assert indexed == archived
