"""Store: WARC files read back by warcio equal what was fetched; the crawl log has every try."""

from __future__ import annotations

import gzip
import json
import math
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_node.store.writer import CrawlLog, FetchRecord, Store, WarcWriter, iso_utc

NODE = "node-1"
HTML = b"<html><body><a href='/next'>next</a></body></html>"
BINARY = bytes(range(256)) * 40
GZIPPED_ORIGINAL = b'{"greeting": "hello"}' * 50
LOG_FIELDS = {
    "url", "host", "status", "outcome", "bytes", "node", "attempt", "fetched_at", "elapsed_ms",
    "error", "kind", "location", "truncated", "parse_truncated", "content_type", "depth", "via", "visit",
    "digest", "warc_type", "warc_file", "warc_offset", "warc_length",
}


def record(url: str, status: int | None, body: bytes = b"", **fields) -> FetchRecord:
    host = url.split("/")[2]
    defaults = dict(
        url=url,
        host=host,
        node_id=NODE,
        attempt=1,
        fetched_at=1_700_000_000.123,
        outcome="ok",
        status=status,
        request_headers=[("User-Agent", "crawler-node/test"), ("Accept-Encoding", "gzip")],
        response_headers=[("Content-Type", "text/html"), ("Content-Length", str(len(body)))],
        body=body,
        remote_addr="127.0.0.1",
        elapsed_s=0.0125,
    )
    defaults.update(fields)
    return FetchRecord(**defaults)


def sample_records() -> list[FetchRecord]:
    return [
        record("http://a.test/", 200, HTML),
        record("http://a.test/missing", 404, b"not found", outcome="http_error"),
        record(
            "http://a.test/old", 301, b"", outcome="redirect",
            response_headers=[("Location", "http://a.test/new"), ("Content-Length", "0")],
        ),
        record(
            "http://b.test/blob.bin?x=1", 200, BINARY,
            response_headers=[("Content-Type", "application/octet-stream")],
            content_type="application/octet-stream",
        ),
        # The server sent gzip, chunked; the client de-chunked it and kept it gzipped.
        record(
            "http://b.test/data.json", 200, gzip.compress(GZIPPED_ORIGINAL, mtime=0),
            response_headers=[
                ("Content-Type", "application/json"),
                ("Content-Encoding", "gzip"),
                ("Transfer-Encoding", "chunked"),
            ],
        ),
        record(
            "http://c.test/slow", None, outcome="timeout", error="read timeout", remote_addr=None
        ),
    ]


def read_warcs(directory: Path) -> list[list]:
    """Every file's records as (type, headers, http headers, payload), in order."""
    files = []
    for path in sorted(directory.glob("*.warc.gz")):
        with open(path, "rb") as handle:
            files.append([
                (r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read())
                for r in ArchiveIterator(handle)
            ])
    return files


def test_warc_round_trip(tmp_path: Path) -> None:
    records = sample_records()
    with_status = [r for r in records if r.status is not None]
    store = Store(tmp_path, node_id=NODE)
    store.write(records)
    store.close()

    (contents,) = read_warcs(tmp_path / "warc")
    warcinfo_type, warcinfo_headers, _, warcinfo_body = contents[0]
    assert warcinfo_type == "warcinfo"
    assert warcinfo_headers.protocol == "WARC/1.1"
    assert b"software: crawler-node/" in warcinfo_body
    assert f"node-id: {NODE}".encode() in warcinfo_body

    responses = [item for item in contents if item[0] == "response"]
    requests = [item for item in contents if item[0] == "request"]
    assert len(responses) == len(requests) == len(with_status)
    for fetched, (_, headers, http, payload) in zip(with_status, responses):
        assert headers.get_header("WARC-Target-URI") == fetched.url
        assert int(http.get_statuscode()) == fetched.status
        # warcio's content stream undoes the chunking and the Content-Encoding
        assert payload == (GZIPPED_ORIGINAL if fetched.url.endswith("data.json") else fetched.body)
        assert headers.get_header("WARC-IP-Address") == "127.0.0.1"
        assert headers.get_header("WARC-Date").startswith("2023-11-14T22:13:20.123")

    # Each request points at its response.
    response_ids = {h.get_header("WARC-Record-ID") for _, h, _, _ in responses}
    assert {h.get_header("WARC-Concurrent-To") for _, h, _, _ in requests} == response_ids
    request_lines = {h.get_header("WARC-Target-URI"): http for _, h, http, _ in requests}
    blob_request = request_lines["http://b.test/blob.bin?x=1"]
    assert (blob_request.protocol, blob_request.statusline) == ("GET", "/blob.bin?x=1 HTTP/1.1")
    assert blob_request.get_header("Host") == "b.test"
    assert blob_request.get_header("User-Agent") == "crawler-node/test"


def test_every_digest_checks_out_with_warcio(tmp_path: Path) -> None:
    # What `warcio check` does: recompute each record's block and payload digests.
    awkward = record(
        "http://a.test/odd", 200, HTML + b"<!-- odd -->",
        # A non-UTF-8 header byte (as aiohttp hands it over) and a value that tries to start
        # a new header line: the record stays well-formed and the byte survives.
        response_headers=[("Content-Type", "text/html"), ("X-Raw", "caf\udce9"), ("X-Evil", "a\r\nWARC-Type: x")],
    )
    store = Store(tmp_path, node_id=NODE)
    store.write([*sample_records(), awkward])
    store.close()

    (path,) = (tmp_path / "warc").glob("*.warc.gz")
    checked = 0
    with open(path, "rb") as handle:
        for item in ArchiveIterator(handle, check_digests=True):
            item.content_stream().read()
            # warcio checks no digest of a revisit record (it has no payload)
            expected = None if item.rec_type == "revisit" else True
            assert item.digest_checker.passed is expected, (item.rec_type, list(item.digest_checker.problems))
            if item.rec_type == "response" and item.rec_headers.get_header("WARC-Target-URI").endswith("/odd"):
                assert item.http_headers.get_header("X-Evil") == "a  WARC-Type: x"
                assert item.http_headers.get_header("X-Raw").encode("latin-1") == b"caf\xe9"
            checked += 1
    assert checked == 1 + 2 * sum(r.status is not None for r in sample_records()) + 2


def test_records_are_stored_as_received(tmp_path: Path) -> None:
    # The status line, the headers and the (still gzipped) body as the server sent them;
    # a chunked body framed again in one chunk, so the headers stay true.
    store = Store(tmp_path, node_id=NODE)
    data = next(r for r in sample_records() if r.url.endswith("data.json"))
    data.status_line = "HTTP/1.0 200 Fine"
    store.write([data])
    store.close()

    (path,) = (tmp_path / "warc").glob("*.warc.gz")
    with open(path, "rb") as handle:
        for response in ArchiveIterator(handle):
            if response.rec_type == "response":
                assert response.http_headers.statusline == "200 Fine"
                assert response.http_headers.protocol == "HTTP/1.0"
                assert response.http_headers.headers == data.response_headers
                raw = response.raw_stream.read()
    gzipped = data.body
    assert raw == b"%x\r\n%b\r\n0\r\n\r\n" % (len(gzipped), gzipped)
    with open(path, "rb") as handle:
        decoded = [r.content_stream().read() for r in ArchiveIterator(handle) if r.rec_type == "response"]
    assert decoded == [GZIPPED_ORIGINAL]


def test_an_identical_payload_is_a_revisit_of_the_first(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE)
    store.write([record("http://a.test/one", 200, HTML)])
    store.close()
    store = Store(tmp_path, node_id=NODE)  # the digest index outlives the process
    store.write([record("http://a.test/two", 200, HTML), record("http://a.test/three", 200, HTML + b" ")])
    store.close()

    records = [r for contents in read_warcs(tmp_path / "warc") for r in contents if r[0] in ("response", "revisit")]
    kinds = {headers.get_header("WARC-Target-URI"): (kind, headers) for kind, headers, _, _ in records}
    assert kinds["http://a.test/one"][0] == kinds["http://a.test/three"][0] == "response"
    kind, revisit = kinds["http://a.test/two"]
    original = kinds["http://a.test/one"][1]
    assert kind == "revisit"
    assert revisit.get_header("WARC-Profile").endswith("/revisit/identical-payload-digest")
    assert revisit.get_header("WARC-Refers-To") == original.get_header("WARC-Record-ID")
    assert revisit.get_header("WARC-Refers-To-Target-URI") == "http://a.test/one"
    assert revisit.get_header("WARC-Refers-To-Date") == original.get_header("WARC-Date")
    assert revisit.get_header("WARC-Payload-Digest") == original.get_header("WARC-Payload-Digest")
    lines = [json.loads(line) for line in (tmp_path / "crawl.log").read_text().splitlines()]
    assert [line["warc_type"] for line in lines] == ["response", "revisit", "response"]
    assert lines[0]["digest"] == lines[1]["digest"] != lines[2]["digest"]


def test_identical_payloads_in_one_batch_are_one_response_and_revisits_of_it(tmp_path: Path) -> None:
    # The digest index is asked once per batch: a payload first archived in the batch must
    # still make the later ones in the same batch revisits, and be in the index afterwards.
    store = Store(tmp_path, node_id=NODE)
    store.write([record("http://a.test/one", 200, HTML), record("http://a.test/other", 200, HTML + b"!"),
                 record("http://a.test/two", 200, HTML), record("http://a.test/three", 200, HTML)])
    store.write([record("http://a.test/four", 200, HTML + b"!")])
    store.close()

    records = [r for contents in read_warcs(tmp_path / "warc") for r in contents if r[0] in ("response", "revisit")]
    kinds = {headers.get_header("WARC-Target-URI"): (kind, headers) for kind, headers, _, _ in records}
    assert {url: kind for url, (kind, _) in kinds.items()} == {
        "http://a.test/one": "response", "http://a.test/other": "response", "http://a.test/two": "revisit",
        "http://a.test/three": "revisit", "http://a.test/four": "revisit"}
    assert kinds["http://a.test/two"][1].get_header("WARC-Refers-To") == kinds["http://a.test/one"][1].get_header(
        "WARC-Record-ID") == kinds["http://a.test/three"][1].get_header("WARC-Refers-To")
    assert kinds["http://a.test/four"][1].get_header("WARC-Refers-To-Target-URI") == "http://a.test/other"
    from crawler_node.store.digests import DIGESTS_FILENAME, DigestIndex

    index = DigestIndex(tmp_path / DIGESTS_FILENAME)
    assert len(index) == 2  # one entry per payload, its first record
    index.close()


def test_a_not_modified_answer_is_a_server_not_modified_revisit(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE)
    store.write([record("http://a.test/", 304, b"", outcome="not_modified", visit=1,
                        response_headers=[("ETag", '"v1"')])])
    store.close()
    ((kind, headers, http, payload),) = [r for r in read_warcs(tmp_path / "warc")[0] if r[0] != "warcinfo"
                                         and r[0] != "request"]
    assert kind == "revisit" and payload == b""
    assert headers.get_header("WARC-Profile").endswith("/revisit/server-not-modified")
    assert http.get_statuscode() == "304" and http.get_header("ETag") == '"v1"'


def test_the_digest_index_stays_bounded(tmp_path: Path) -> None:
    from crawler_node.store.digests import DigestIndex, Original

    index = DigestIndex(tmp_path / "d.sqlite3", max_entries=10)
    for n in range(3000):
        index.add(f"sha1:{n}", Original(f"<urn:{n}>", f"http://a.test/{n}", "2024"))
        if n % 100 == 99:
            index.commit()
    index.commit()
    assert len(index) <= 10 + 1024
    assert index.lookup("sha1:2999") is not None and index.lookup("sha1:0") is None
    index.close()


def test_a_parsed_page_gets_a_metadata_record_of_its_outlinks(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE)
    store.write([record("http://a.test/p", 200, HTML, depth=2, via="http://a.test/",
                        outlinks="http://a.test/next\nhttp://b.test/")])
    store.close()
    contents = read_warcs(tmp_path / "warc")[0]
    response_id = next(h.get_header("WARC-Record-ID") for kind, h, _, _ in contents if kind == "response")
    ((_, headers, _, block),) = [r for r in contents if r[0] == "metadata"]
    assert headers.get_header("WARC-Concurrent-To") == response_id
    assert headers.get_header("Content-Type") == "application/warc-fields"
    assert block.decode().splitlines() == ["via: http://a.test/", "hopsFromSeed: LL",
                                           "outlink: http://a.test/next", "outlink: http://b.test/"]


def test_warcinfo_says_what_crawl_this_is(tmp_path: Path) -> None:
    from crawler_node.store.writer import CrawlInfo

    store = Store(tmp_path, node_id=NODE, info=CrawlInfo(crawl_name="docs-2026", operator="ops@example.org",
                                                         user_agent="crawler-node/test (+ops@example.org)"))
    store.write([record("http://a.test/", 200, HTML)])
    store.close()
    (_, _, _, body) = read_warcs(tmp_path / "warc")[0][0]
    fields = dict(line.split(": ", 1) for line in body.decode().splitlines())
    assert fields["isPartOf"] == "docs-2026" and fields["operator"] == "ops@example.org"
    assert fields["http-header-user-agent"] == "crawler-node/test (+ops@example.org)"
    assert fields["software"].startswith("crawler-node/") and fields["robots"] == "obey"


def test_each_crawl_log_line_leads_to_its_record(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE, warc_max_bytes=3_000)
    records = sample_records() + [record(f"http://a.test/{n}", 200, BINARY[n:] + HTML) for n in range(20)]
    store.write(records)
    store.close()
    lines = [json.loads(line) for line in (tmp_path / "crawl.log").read_text().splitlines()]
    assert len({line["warc_file"] for line in lines if line["warc_file"]}) > 1
    for line in lines:
        if line["status"] is None:
            assert line["warc_file"] is None
            continue
        with open(tmp_path / "warc" / line["warc_file"], "rb") as handle:
            handle.seek(line["warc_offset"])
            member = handle.read(line["warc_length"])
        (item,) = list(ArchiveIterator(__import__("io").BytesIO(member)))
        assert item.rec_type == line["warc_type"]
        assert item.rec_headers.get_header("WARC-Target-URI") == line["url"]


def test_the_crawl_log_rotates_by_size(tmp_path: Path) -> None:
    log = CrawlLog(tmp_path / "crawl.log", max_file_bytes=2_000)
    for n in range(40):
        log.write([record(f"http://a.test/{n}", 200, HTML)])
    log.close()
    files = sorted(tmp_path.glob("crawl.log.[0-9]*")) + [tmp_path / "crawl.log"]
    assert len(files) > 2 and log.rotated == files[:-1]
    urls = [json.loads(line)["url"] for path in files for line in path.read_text().splitlines()]
    assert urls == [f"http://a.test/{n}" for n in range(40)]


def test_rotation_keeps_every_file_valid(tmp_path: Path) -> None:
    writer = WarcWriter(tmp_path, node_id=NODE, max_file_bytes=4_000)
    bodies = [bytes([n]) * 3_000 + BINARY[: 500 + n] for n in range(12)]
    writer.write([record(f"http://a.test/{n}", 200, body) for n, body in enumerate(bodies)])
    writer.close()

    files = read_warcs(tmp_path)
    assert len(files) > 1 and len(files) == len(writer.files)
    assert all(contents[0][0] == "warcinfo" for contents in files)
    payloads = [
        payload for contents in files for kind, _, _, payload in contents if kind == "response"
    ]
    assert payloads == bodies
    for path in writer.files:
        gzip.decompress(path.read_bytes())  # a whole, valid gzip stream
        assert path.name.startswith(f"{NODE}-") and path.name.endswith(".warc.gz")
    serials = [int(path.name.rsplit("-", 1)[1].split(".")[0]) for path in writer.files]
    assert serials == sorted(serials) and len(set(serials)) == len(serials)


def test_nothing_is_written_without_an_exchange(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE)
    store.write([record("http://a.test/", None, outcome="error", error="dns failure")])
    store.close()

    assert list((tmp_path / "warc").glob("*.warc.gz")) == []
    assert len((tmp_path / "crawl.log").read_text().splitlines()) == 1


def test_crawl_log_has_one_line_per_attempt(tmp_path: Path) -> None:
    records = sample_records()
    store = Store(tmp_path, node_id=NODE)
    store.write(records)
    store.flush(fsync=True)

    lines = [json.loads(line) for line in (tmp_path / "crawl.log").read_text().splitlines()]
    assert len(lines) == len(records) == store.records_written
    for fetched, line in zip(records, lines):
        assert set(line) == LOG_FIELDS
        assert (line["url"], line["host"], line["status"], line["outcome"]) == (
            fetched.url, fetched.host, fetched.status, fetched.outcome
        )
        assert (line["bytes"], line["node"], line["attempt"]) == (len(fetched.body), NODE, 1)
        assert line["fetched_at"] == "2023-11-14T22:13:20.123Z"
        assert datetime.fromisoformat(line["fetched_at"]).utcoffset().total_seconds() == 0
        assert line["elapsed_ms"] == 12.5
        assert line["error"] == fetched.error
    assert store.bytes_written > 0
    store.close()


def test_crawl_log_appends_across_opens(tmp_path: Path) -> None:
    for _ in range(2):
        log = CrawlLog(tmp_path / "crawl.log")
        log.write([record("http://a.test/", 200, HTML, fetched_at=time.time())])
        log.close()

    assert len((tmp_path / "crawl.log").read_text().splitlines()) == 2


def test_write_after_close_is_an_error(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE)
    store.close()
    store.close()  # idempotent

    with pytest.raises(ValueError):
        store.write([record("http://a.test/", 200, HTML)])


def test_rejects_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        WarcWriter(tmp_path, node_id=NODE, max_file_bytes=0)
    with pytest.raises(ValueError):
        WarcWriter(tmp_path, node_id="a/b")


def test_a_torn_last_line_is_cut_when_the_log_reopens(tmp_path):
    from crawler_node.store.writer import CrawlLog

    path = tmp_path / "crawl.log"
    path.write_text('{"url": "http://a.test/"}\n{"url": "http://a.te')
    log = CrawlLog(path)
    log.close()
    assert path.read_text() == '{"url": "http://a.test/"}\n'
    # set aside, not destroyed
    assert (tmp_path / "crawl.log.torn").read_text() == '{"url": "http://a.te\n'


def test_a_record_crosses_to_the_store_worker_whole() -> None:
    import pickle

    for original in sample_records():
        assert pickle.loads(pickle.dumps(original, pickle.HIGHEST_PROTOCOL)) == original


def test_iso_utc_is_what_datetime_writes() -> None:
    rng = random.Random(7)
    epochs = [0.0, 1e-7, 0.9999995, 0.9999994, 1_700_000_000.123, 1_700_000_000.9999996, -1.5,
              -0.0000004, 253_402_300_799.5, -62_135_596_800.0]
    epochs += [rng.uniform(-2e9, 4e9) for _ in range(20_000)]
    # Halves of a microsecond, where fromtimestamp rounds half to even.
    epochs += [1_700_000_000 + (n + 0.5) / 1e6 for n in range(2_000)]
    epochs += [math.nextafter(e, math.inf) for e in epochs[-50:]]
    for epoch in epochs:
        moment = datetime.fromtimestamp(epoch, tz=UTC)
        for timespec in ("seconds", "milliseconds", "microseconds"):
            expected = moment.isoformat(timespec=timespec).replace("+00:00", "Z")
            assert iso_utc(epoch, timespec=timespec) == expected, (epoch, timespec)
    with pytest.raises(ValueError):
        iso_utc(0.0, timespec="hours")


AWKWARD = [
    "", "plain", 'say "hi"', "back\\slash", "\\u0041 is not A", "tab\tnew\nline\rcr", "\x00\x01\x1f\x7f",
    "caf\u00e9", "\u2028\u2029", "\U0001f600 emoji", "lone \ud800 surrogate", "\udce9", "</script>", "\ufeff",
]


def test_crawl_log_lines_are_what_json_dumps_writes(tmp_path: Path) -> None:
    rng = random.Random(3)
    alphabet = "".join(map(chr, range(0, 0x250))) + "\u2028\ud800\udfff\U0001f600"
    strings = AWKWARD + ["".join(rng.choices(alphabet, k=rng.randrange(40))) for _ in range(300)]
    records = [
        record(f"http://a.test/{text}", status, body=b"x" * n, host=text, outcome=text, node_id=text,
               error=error, attempt=n, elapsed_s=elapsed, fetched_at=1_700_000_000 + n / 7)
        for n, text in enumerate(strings)
        for status, error, elapsed in ((200, None, n / 1000.0), (None, text, 1e9 + n), (503, text, 0.0))
    ]
    log = CrawlLog(tmp_path / "crawl.log")
    assert log.write(records) == len(records)
    log.close()

    raw = (tmp_path / "crawl.log").read_bytes()
    assert log.bytes_written == len(raw)
    lines = raw.decode("ascii").split("\n")
    assert lines.pop() == ""
    for fetched, line in zip(records, lines, strict=True):
        entry = {
            "url": fetched.url, "host": fetched.host, "status": fetched.status,
            "outcome": fetched.outcome, "bytes": len(fetched.body), "node": fetched.node_id,
            "attempt": fetched.attempt, "fetched_at": iso_utc(fetched.fetched_at),
            "elapsed_ms": round(fetched.elapsed_s * 1000.0, 1), "error": fetched.error,
            "kind": fetched.kind, "location": fetched.location, "truncated": fetched.truncated,
            "parse_truncated": fetched.parse_truncated, "content_type": fetched.content_type,
            "depth": fetched.depth, "via": fetched.via, "visit": fetched.visit, "digest": None, "warc_type": None,
            "warc_file": None, "warc_offset": None, "warc_length": None,
        }
        assert line == json.dumps(entry, separators=(",", ":"))
        assert json.loads(line) == entry


def test_record_ids_are_unique_across_batches(tmp_path: Path) -> None:
    store = Store(tmp_path, node_id=NODE, warc_max_bytes=20_000)
    for batch in range(5):
        store.write([record(f"http://a.test/{batch}/{n}", 200, HTML + b"%d" % (batch * 40 + n)) for n in range(40)])
    store.close()

    files = read_warcs(tmp_path / "warc")
    ids = [headers.get_header("WARC-Record-ID") for contents in files for _, headers, _, _ in contents]
    assert len(files) > 1 and len(ids) == len(files) + 2 * 5 * 40  # a warcinfo record per file
    assert len(set(ids)) == len(ids)


def test_a_torn_warc_tail_is_cut_and_set_aside_at_the_next_start(tmp_path: Path) -> None:
    from crawler_node.store.cdxj import index_path

    store = Store(tmp_path, node_id=NODE)
    store.write([record(f"http://a.test/{n}", 200, BINARY[n:] + HTML) for n in range(6)])
    store.flush()
    (path,) = (tmp_path / "warc").glob("*.warc.gz")
    # A kill mid-write: the last member half there, and no index (the file was never closed).
    whole = path.read_bytes()
    lines = [json.loads(line) for line in (tmp_path / "crawl.log").read_text().splitlines()]
    last = lines[-1]
    store.warc._file = None  # abandon the file as a killed process would, without closing it
    store.close()
    cut_at = last["warc_offset"] + last["warc_length"] // 2
    path.write_bytes(whole[:cut_at])
    index_path(path).unlink(missing_ok=True)

    Store(tmp_path, node_id=NODE).close()  # the next start
    assert path.read_bytes() == whole[:last["warc_offset"]]  # up to the last whole record
    assert path.with_name(path.name + ".torn").read_bytes() == whole[last["warc_offset"]:cut_at]
    with open(path, "rb") as handle:
        uris = [r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(handle, check_digests=True)
                if r.rec_type == "response"]
    assert uris == [f"http://a.test/{n}" for n in range(5)]
    assert index_path(path).read_text().count("\n") == 5
