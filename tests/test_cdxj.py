"""The CDXJ index beside each WARC file: what pywb's own indexer gives, sorted, a torn tail left
out, and index_missing indexing only what lacks a current index."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import surt
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler_node.store.cdxj import WarcIndexError, index_missing, index_path, write_index
from crawler_node.store.writer import FetchRecord, WarcWriter

# Not in SURT order, and one host twice: the index must sort them.
URLS = ["http://b.test/", "http://a.test/p/2", "http://c.test/search?q=1", "http://a.test/", "http://b.test/p/1"]


def node_warc(directory: Path, urls: Sequence[str] = URLS) -> Path:
    """A WARC file written by the node's own writer, one exchange per URL, and no index yet."""
    writer = WarcWriter(directory, node_id="node-1")
    writer.write([
        FetchRecord(url=url, host=urlsplit(url).netloc, node_id="node-1", attempt=1,
                    fetched_at=1_700_000_000.0 + number, outcome="ok", status=200,
                    request_headers=[("User-Agent", "test-crawler"), ("Accept-Encoding", "gzip, deflate")],
                    response_headers=[("Content-Type", "text/html; charset=utf-8")],
                    body=f"<html><title>{url}</title>{'<p>text</p>' * 100 * (number + 1)}</html>".encode())
        for number, url in enumerate(urls)
    ])
    writer.close()
    [path] = writer.files
    index_path(path).unlink(missing_ok=True)  # whether or not the writer indexes a file it closes
    return path


def entries(index: Path) -> list[tuple[str, str, dict]]:
    return [(key, stamp, json.loads(data))
            for key, stamp, data in (line.split(" ", 2) for line in index.read_text().splitlines())]


def records(warc_path: Path) -> list[tuple[str, str | None, int, int]]:
    """(type, target URI, offset, length) of every record in the file."""
    found = []
    with warc_path.open("rb") as stream:
        iterator = ArchiveIterator(stream)
        for record in iterator:
            record.content_stream().read()
            found.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                          iterator.get_record_offset(), iterator.get_record_length()))
    return found


def pywb_index(warc_path: Path) -> list[str]:
    """What pywb's own `cdx-indexer` writes with the options `wb-manager reindex` uses:
    CDXJ (-j), sorted (-s), POST bodies appended to the key (-p)."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from pywb.indexer.cdxindexer import main; main(sys.argv[1:])",
         "-j", "-s", "-p", warc_path.name],
        cwd=warc_path.parent, capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.splitlines()


def comparable(line: str) -> tuple:
    """A line less the two things in which the indexers differ, neither of them read by pywb's
    replay as a difference: pywb writes the digest without cdxj-indexer's "sha1:" label (pywb
    compares digests only with those of the same index), and it gives a revisit no status of
    its own (pywb's replay takes the original's status for a revisit it resolves)."""
    key, stamp, data = line.split(" ", 2)
    fields = json.loads(data)
    fields["digest"] = fields.get("digest", "").removeprefix("sha1:")
    if fields["mime"] == "warc/revisit":
        fields.pop("status", None)
    return key, stamp, sorted(fields.items())


def test_the_index_is_beside_its_warc_file() -> None:
    warc_path = Path("/data/warc/node-1-20240501120000000-00003.warc.gz")
    assert index_path(warc_path) == Path("/data/warc/node-1-20240501120000000-00003.cdxj")
    for name in ("crawl.warc", "crawl.cdxj", ".warc.gz"):
        with pytest.raises(ValueError):
            index_path(Path(name))


def test_an_index_has_a_sorted_line_per_response_leading_to_it(tmp_path: Path) -> None:
    warc_path = node_warc(tmp_path)
    index = write_index(warc_path)
    assert index == index_path(warc_path) and index.exists()
    lines = index.read_text().splitlines()
    assert lines == sorted(lines) and len(lines) == len(URLS)  # no line for warcinfo or request records
    assert [key for key, _, _ in entries(index)] == sorted(surt.surt(url) for url in URLS)
    for key, stamp, fields in entries(index):
        assert key == surt.surt(fields["url"]) and len(stamp) == 14 and stamp.isdigit()
        assert fields["filename"] == warc_path.name and fields["status"] == "200"
        assert fields["mime"] == "text/html"
        with warc_path.open("rb") as stream:
            stream.seek(int(fields["offset"]))
            member = stream.read(int(fields["length"]))
        [record] = list(ArchiveIterator(io.BytesIO(member)))  # exactly one whole record
        assert record.rec_type == "response"
        assert record.rec_headers.get_header("WARC-Target-URI") == fields["url"]
    assert not list(tmp_path.glob("*.tmp"))


def test_the_index_is_what_pywbs_own_indexer_writes(tmp_path: Path) -> None:
    warc_path = node_warc(tmp_path)
    ours = write_index(warc_path).read_text().splitlines()
    assert [comparable(line) for line in ours] == [comparable(line) for line in pywb_index(warc_path)]


def test_revisits_are_indexed_and_requests_and_warc_fields_metadata_are_not(tmp_path: Path) -> None:
    # Written by warcio, as any WARC writer would: a response, its request, a metadata record
    # of outlinks, and a revisit (identical payload) of another URL.
    warc_path = tmp_path / "other-20240501120000000-00000.warc.gz"
    with warc_path.open("wb") as out:
        writer = WARCWriter(out, gzip=True, warc_version="1.1")
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        response = writer.create_warc_record("http://a.test/", "response", payload=io.BytesIO(b"<html>same</html>"),
                                             http_headers=http,
                                             warc_headers_dict={"WARC-Date": "2024-05-01T12:00:00Z"})
        response_id = response.rec_headers.get_header("WARC-Record-ID")
        request = writer.create_warc_record(
            "http://a.test/", "request", payload=io.BytesIO(b""),
            http_headers=StatusAndHeaders("GET / HTTP/1.1", [("Host", "a.test")], is_http_request=True),
            warc_headers_dict={"WARC-Concurrent-To": response_id, "WARC-Date": "2024-05-01T12:00:00Z"})
        metadata = writer.create_warc_record("http://a.test/", "metadata",
                                             payload=io.BytesIO(b"outlink: http://b.test/ L a/@href\r\n"),
                                             warc_content_type="application/warc-fields",
                                             warc_headers_dict={"WARC-Concurrent-To": response_id})
        digest = response.rec_headers.get_header("WARC-Payload-Digest")
        revisit = writer.create_revisit_record("http://b.test/copy", digest, "http://a.test/", "2024-05-01T12:00:00Z",
                                               http_headers=http)
        for record in (response, request, metadata, revisit):
            writer.write_record(record)
    ours = write_index(warc_path).read_text().splitlines()
    assert [(fields["url"], fields["mime"]) for _, _, fields in entries(index_path(warc_path))] == [
        ("http://a.test/", "text/html"), ("http://b.test/copy", "warc/revisit")]
    assert [comparable(line) for line in ours] == [comparable(line) for line in pywb_index(warc_path)]


def test_a_torn_tail_is_indexed_up_to_the_last_complete_record(tmp_path: Path, caplog) -> None:
    warc_path = node_warc(tmp_path)
    full = write_index(warc_path).read_text().splitlines()
    data = warc_path.read_bytes()
    ends = {line: int(fields["offset"]) + int(fields["length"])
            for line, (_, _, fields) in zip(full, entries(index_path(warc_path)), strict=True)}
    members = records(warc_path)
    last_response = max(offset for kind, _, offset, _ in members if kind == "response")
    last_kind, _, last_offset, last_length = members[-1]
    assert last_kind == "request"  # the file ends: ..., response, request

    def index_of_cut(cut: int) -> list[str]:
        warc_path.write_bytes(data[:cut])
        return write_index(warc_path).read_text().splitlines()

    # Killed in the middle of the last member (the request record): every response is indexed.
    assert index_of_cut(last_offset + last_length // 2) == full
    # In the middle of the last response's member, or in its gzip trailer: that one is not.
    with caplog.at_level(logging.WARNING, logger="crawler_node.store"):
        assert index_of_cut(last_response + 40) == [line for line in full if ends[line] <= last_response]
    assert any("torn after byte" in message for message in caplog.messages)
    assert index_of_cut(last_offset - 3) == [line for line in full if ends[line] <= last_response]
    # At every cut over the last two exchanges: exactly the records that are whole.
    for cut in range(members[-4][2], len(data) + 1, 5):
        assert index_of_cut(cut) == [line for line in full if ends[line] <= cut], cut
    # Torn in its warcinfo record, or empty (killed as it was created): an empty index.
    assert index_of_cut(members[0][3] // 2) == []
    assert index_of_cut(0) == []


def test_bytes_that_are_no_gzip_member_are_an_error_not_a_torn_tail(tmp_path: Path) -> None:
    warc_path = node_warc(tmp_path)
    warc_path.write_bytes(warc_path.read_bytes() + b"this is no gzip member\r\n" * 10)
    with pytest.raises(WarcIndexError) as error:
        write_index(warc_path)
    assert error.value.warc_path == warc_path
    assert not index_path(warc_path).exists()


def test_an_index_is_replaced_whole(tmp_path: Path) -> None:
    warc_path = node_warc(tmp_path)
    index = index_path(warc_path)
    index.write_text("stale\n")
    # What a run killed while indexing leaves: overwritten, then renamed into place.
    index.with_name(index.name.removesuffix(".cdxj") + ".cdxj.tmp").write_text("half")
    write_index(warc_path)
    assert len(index.read_text().splitlines()) == len(URLS)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([warc_path.name, index.name])


def test_index_missing_indexes_only_files_without_a_current_index(tmp_path: Path) -> None:
    current, missing, stale, open_file = (node_warc(tmp_path, [f"http://{name}.test/"])
                                          for name in ("current", "missing", "stale", "open"))
    write_index(current)
    write_index(stale)
    # Back-dated, not waited for: the stale index is older than its file.
    before = stale.stat().st_mtime - 60
    os.utime(index_path(stale), (before, before))
    current_stat = index_path(current).stat()

    written = index_missing(tmp_path, skip=[open_file])
    assert sorted(written) == sorted([index_path(missing), index_path(stale)])
    assert index_path(stale).stat().st_mtime >= stale.stat().st_mtime
    assert index_path(current).stat().st_mtime_ns == current_stat.st_mtime_ns  # not rewritten
    assert index_path(current).stat().st_ino == current_stat.st_ino
    assert not index_path(open_file).exists()
    assert index_missing(tmp_path, skip=[open_file]) == []  # idempotent
    assert index_missing(tmp_path) == [index_path(open_file)]


def test_a_file_that_cannot_be_indexed_is_logged_and_the_others_are_indexed(tmp_path: Path, caplog) -> None:
    good = node_warc(tmp_path)
    broken = tmp_path / "node-1-20240501120000000-00099.warc.gz"
    broken.write_bytes(b"neither gzip nor WARC\r\n" * 10)
    with caplog.at_level(logging.ERROR, logger="crawler_node.store"):
        assert index_missing(tmp_path) == [index_path(good)]
    assert not index_path(broken).exists()
    assert [record.name for record in caplog.records] == ["crawler_node.store"]
    assert broken.name in caplog.messages[0]


def test_the_writers_own_index_is_cdxj_indexers(tmp_path: Path) -> None:
    # The writer makes each line as it writes the record (store.cdxj.index_line); reading the
    # file back with cdxj-indexer must give the very same lines.
    from crawler_node.store.writer import FetchRecord, Store

    def record(url: str, status: int, body: bytes, headers: list[tuple[str, str]], **fields) -> FetchRecord:
        fields.setdefault("outcome", "ok")
        return FetchRecord(url=url, host=url.split("/")[2].lower(), node_id="n", attempt=1,
                           fetched_at=1_700_000_000.5 + len(url), status=status,
                           response_headers=headers, body=body, **fields)

    page = b"<html><a href='/x'>x</a></html>"
    store = Store(tmp_path, node_id="n")
    store.write([
        record("http://Site-1.test/p/1?b=2&a=1", 200, page, [("Content-Type", "text/html; charset=utf-8")],
               outlinks="http://site-1.test/x"),
        record("http://site-1.test/p/2", 200, page, [("Content-Type", "text/html")]),  # a revisit of p/1
        record("http://site-1.test/r", 301, b"", [("Location", "/x")], outcome="redirect"),
        record("http://site-1.test/nm", 304, b"", [("ETag", '"x"')], outcome="not_modified", visit=1),
        record("http://site-1.test/img.png", 200, b"\x89PNG", []),
        record("https://www.site-2.test:8443/a%20b", 404, b"gone", [("content-type", "Text/Plain ;x")],
               outcome="http_error"),
    ])
    store.close()
    (warc_path,) = (tmp_path / "warc").glob("*.warc.gz")
    ours = index_path(warc_path).read_text()
    assert ours.count("\n") == 6
    assert write_index(warc_path).read_text() == ours


def test_an_index_line_is_json_dumps_of_its_fields_for_any_string() -> None:
    # index_line builds the JSON itself; it must be the text json.dumps makes of the same
    # fields (what cdxj-indexer writes), for any URL, media type and file name.
    import json
    import random

    from crawler_node.store.cdxj import _RE_SPACE, _timestamp, index_line
    from crawler_node.store.surt_key import url_key

    rng = random.Random(7)
    alphabet = "aZ09/:.?&=%;\\\" \t\n\x00\x7f\u00e9\u202e\u4e2d\U0001f600\ud800"

    def junk(n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(n)))

    for n in range(3000):
        url = f"http://site-{n % 7}.test/{junk(30)}"
        content_type = rng.choice([None, "", " ", "text/html; charset=utf-8", junk(20)])
        warc_type = rng.choice(["response", "revisit"])
        digest = rng.choice([None, "", "sha1:ABC" + junk(5)])
        status, offset, length = rng.choice([200, 304, 404]), rng.randrange(10**12), rng.randrange(10**7)
        filename = rng.choice(["n-20240501120000000-00001.warc.gz", junk(12)])
        date = "2024-05-01T12:00:00.123456Z"
        fields: dict[str, str] = {"url": url}
        if warc_type == "revisit":
            fields["mime"] = "warc/revisit"
        elif content_type and (mime := _RE_SPACE.split(content_type, 1)[0].strip()):
            fields["mime"] = mime
        fields["status"] = str(status)
        if digest:
            fields["digest"] = digest
        fields["length"], fields["offset"], fields["filename"] = str(length), str(offset), filename
        expected = f"{url_key(url)} {_timestamp(date)} {json.dumps(fields)}\n"
        assert index_line(url, date, warc_type=warc_type, status=status, content_type=content_type, digest=digest,
                          offset=offset, length=length, filename=filename) == expected
