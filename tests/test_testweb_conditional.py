"""testweb as a recrawl and an archive test need it: validators and 304s, pages that change
between visits, identical bodies at two URLs, gzip, and the body bytes it served.

One real testweb subprocess per module, reached as a proxy by an aiohttp client that does not
decompress, so every length compared is the length on the wire.
"""

from __future__ import annotations

import gzip
import hashlib
import time
import zlib
from email.utils import formatdate, parsedate_to_datetime
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp.helpers import ETag
from multidict import CIMultiDict

from crawler_node.testweb import TestwebProcess
from crawler_node.testweb.graph import HostFeatures, SyntheticWeb, is_changing
from crawler_node.testweb.profile import ProfileError, parse_profile
from crawler_node.testweb.representations import accepts_gzip, etag_matches

HOSTS, PAGES, SEED = 4, 20, 3
CHANGING, DUPLICATES = 0.5, 3
BOMB_BYTES = 1 << 20
PROFILE = {
    "site-0.test": {"changing": CHANGING, "duplicates": DUPLICATES},
    "site-1.test": {"gzip": True, "robots": "User-agent: *\nAllow: /\n"},
    "site-2.test": {"gzip": True, "gzip_bomb": BOMB_BYTES, "changing": CHANGING},
}
IDENTITY = {"Accept-Encoding": "identity"}


@pytest.fixture(scope="module")
def web():
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=SEED, profile=PROFILE) as process:
        yield process


def in_process_web(**site0: object) -> SyntheticWeb:
    """The graph the served web is built from, with site-0.test's features replaced."""
    features = {
        "site-0.test": HostFeatures(**site0),  # type: ignore[arg-type]
        "site-2.test": HostFeatures(gzip_bomb=True, changing=CHANGING),
    }
    return SyntheticWeb(hosts=[f"site-{k}.test" for k in range(HOSTS)], pages=PAGES, seed=SEED,
                        features=features)


async def fetch(
    web: TestwebProcess, url: str, headers: dict[str, str] | None = None, *, method: str = "GET"
) -> tuple[int, CIMultiDict[str], bytes]:
    async with aiohttp.ClientSession(auto_decompress=False, trust_env=False) as session:
        async with session.request(method, url, proxy=web.url, headers=headers,
                                   allow_redirects=False) as response:
            # Case-insensitive: aiohttp reads the ETag header in as "Etag".
            return response.status, response.headers.copy(), await response.read()


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha1(body).hexdigest()[:16] + '"'


def http_time(headers: CIMultiDict[str]) -> float:
    return parsedate_to_datetime(headers["Last-Modified"]).timestamp()


def paths(urls: list[str], host: str) -> list[str]:
    return [urlsplit(url).path for url in urls if urlsplit(url).hostname == host]


def stable_and_changing_page(web: TestwebProcess) -> tuple[str, str]:
    changing = set(web.changing())
    pages = [url for url in web.expected() if "site-0.test/p/" in url]
    return (next(url for url in pages if url not in changing),
            next(url for url in pages if url in changing))


# --- validators and conditional requests ----------------------------------------------------


async def test_every_200_with_content_has_a_strong_etag_and_a_past_last_modified(web):
    urls = ["http://site-0.test/", "http://site-0.test/p/1", "http://site-0.test/img/0.png",
            "http://site-1.test/robots.txt", "http://site-2.test/bomb", "http://site-0.test/dup/0/a"]
    modified = set()
    for url in urls:
        status, headers, body = await fetch(web, url, IDENTITY)
        assert status == 200, url
        assert headers["ETag"] == etag_of(body), url
        assert http_time(headers) <= time.time(), url
        modified.add(headers["Last-Modified"])
    assert len(modified) == 1  # stable resources: the second testweb started
    status, headers, _ = await fetch(web, "http://site-0.test/p/999")
    assert status == 404 and "ETag" not in headers and "Last-Modified" not in headers


async def test_if_none_match_with_the_current_etag_is_answered_304_without_a_body(web):
    url = "http://site-0.test/"
    _, first, body = await fetch(web, url, IDENTITY)
    etag = first["ETag"]
    matching = [etag, f'"nope", {etag}', f"W/{etag}", "*", f'W/"other" , W/{etag}']
    for value in matching:
        status, headers, answer = await fetch(web, url, {**IDENTITY, "If-None-Match": value})
        assert (status, answer) == (304, b""), value
        assert headers["ETag"] == etag and headers["Last-Modified"] == first["Last-Modified"]
    status, _, answer = await fetch(web, url, {**IDENTITY, "If-None-Match": etag}, method="HEAD")
    assert (status, answer) == (304, b"")
    for stale in ('"0000000000000000"', 'W/"0000000000000000"', "garbage"):
        status, _, answer = await fetch(web, url, {**IDENTITY, "If-None-Match": stale})
        assert (status, answer) == (200, body), stale


async def test_if_modified_since_counts_only_without_if_none_match(web):
    url = "http://site-1.test/p/2"
    _, first, body = await fetch(web, url, IDENTITY)
    modified = http_time(first)
    for since in (modified, modified + 3600):
        status, headers, answer = await fetch(
            web, url, {**IDENTITY, "If-Modified-Since": formatdate(since, usegmt=True)}
        )
        assert (status, answer) == (304, b"") and headers["ETag"] == first["ETag"]
    for since in (formatdate(modified - 1, usegmt=True), "not a date"):
        status, _, answer = await fetch(web, url, {**IDENTITY, "If-Modified-Since": since})
        assert (status, answer) == (200, body), since
    # A stale ETag wins over a date that would match (RFC 9110 section 13.2.2).
    both = {**IDENTITY, "If-None-Match": '"0000000000000000"',
            "If-Modified-Since": first["Last-Modified"]}
    status, _, answer = await fetch(web, url, both)
    assert (status, answer) == (200, body)


# --- pages that change between visits -------------------------------------------------------


async def test_the_changing_set_is_what_is_changing_computes(web):
    expected = web.expected()
    computed = sorted(
        f"http://{host}{path}"
        for host in ("site-0.test", "site-2.test")
        for path in paths(expected, host)
        if is_changing(path, CHANGING)
    )
    assert web.changing() == computed and 0 < len(computed) < len(expected)
    assert in_process_web(changing=CHANGING, duplicates=DUPLICATES).changing_urls(expected) == computed
    assert not is_changing("/", 1.0) and not is_changing("/dup/0/a", 1.0)
    assert is_changing("/p/1", 1.0) and not is_changing("/p/1", 0.0)
    share = sum(is_changing(f"/p/{k}", 0.1) for k in range(1, 10_001)) / 10_000
    assert 0.08 < share < 0.12


async def test_a_changing_page_changes_on_every_visit_and_a_stable_one_never(web):
    stable, changing = stable_and_changing_page(web)
    visits = [await fetch(web, changing, IDENTITY) for _ in range(3)]
    assert len({body for _, _, body in visits}) == 3
    assert len({headers["ETag"] for _, headers, _ in visits}) == 3
    assert all(headers["ETag"] == etag_of(body) for _, headers, body in visits)
    times = [http_time(headers) for _, headers, _ in visits]
    assert times == sorted(times) and times[-1] <= time.time()
    # Whatever a client kept from its last visit, the page has changed since.
    _, last, _ = visits[-1]
    for validators in ({"If-None-Match": last["ETag"]}, {"If-Modified-Since": last["Last-Modified"]}):
        status, _, body = await fetch(web, changing, {**IDENTITY, **validators})
        assert status == 200 and b'class="revision"' in body
    first, second = await fetch(web, stable, IDENTITY), await fetch(web, stable, IDENTITY)
    assert first[2] == second[2] and first[1]["ETag"] == second[1]["ETag"]
    assert first[1]["Last-Modified"] == second[1]["Last-Modified"]
    assert b'class="revision"' not in first[2]


# --- duplicates --------------------------------------------------------------------------------


async def test_duplicate_pairs_serve_identical_bytes_and_are_expected(web):
    expected = web.expected()
    pairs = [(f"http://site-0.test/dup/{k}/a", f"http://site-0.test/dup/{k}/b")
             for k in range(DUPLICATES)]
    assert {url for pair in pairs for url in pair} == {u for u in expected if "/dup/" in u}
    plain_web = in_process_web(changing=CHANGING)
    assert len(expected) == len(plain_web.expected_urls()) + 2 * DUPLICATES
    assert expected == in_process_web(changing=CHANGING, duplicates=DUPLICATES).expected_urls()
    graph = in_process_web(duplicates=DUPLICATES)
    for first, second in pairs:
        one, other = await fetch(web, first, IDENTITY), await fetch(web, second, IDENTITY)
        assert one[0] == other[0] == 200
        assert one[2] == other[2] and one[1]["ETag"] == other[1]["ETag"]
        path = urlsplit(first).path
        assert set(graph.links("site-0.test", path)) == {"http://site-0.test/", first, second}
    assert (await fetch(web, "http://site-0.test/dup/3/a"))[0] == 404
    assert (await fetch(web, "http://site-1.test/dup/0/a"))[0] == 404


# --- gzip ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "gzipped"),
    [("gzip", True), ("gzip, deflate, br", True), ("x-gzip", True), ("*", True),
     ("br;q=1, gzip;q=0.5", True), ("identity", False), ("gzip;q=0", False),
     ("*;q=0", False), ("*, gzip;q=0", False), ("br", False), ("", False)],
)
def test_accepts_gzip_reads_weights(accept: str, gzipped: bool):
    assert accepts_gzip(accept) is gzipped


async def test_gzip_is_sent_only_when_accept_encoding_allows_it(web):
    url = "http://site-1.test/p/3"
    status, identity, plain_body = await fetch(web, url, IDENTITY)
    assert status == 200 and "Content-Encoding" not in identity
    assert identity["Vary"] == "Accept-Encoding"
    status, encoded, gzip_body = await fetch(web, url, {"Accept-Encoding": "gzip"})
    assert status == 200 and encoded["Content-Encoding"] == "gzip"
    assert encoded["Vary"] == "Accept-Encoding"
    assert gzip.decompress(gzip_body) == plain_body and gzip_body[4:8] == b"\0\0\0\0"  # mtime 0
    assert encoded["ETag"] == etag_of(gzip_body) != identity["ETag"]
    assert (await fetch(web, url, {"Accept-Encoding": "gzip"}))[2] == gzip_body
    for refusing in ({"Accept-Encoding": "gzip;q=0, identity"}, {"Accept-Encoding": "br"}):
        status, headers, body = await fetch(web, url, refusing)
        assert "Content-Encoding" not in headers and body == plain_body
    async with aiohttp.ClientSession(auto_decompress=False, trust_env=False,
                                     skip_auto_headers=["Accept-Encoding"]) as session:
        async with session.get(url, proxy=web.url) as response:
            assert "Content-Encoding" not in response.headers
            assert await response.read() == plain_body
    # Each coding is validated by its own ETag; the 304 still says Vary.
    status, headers, _ = await fetch(web, url, {"Accept-Encoding": "gzip", "If-None-Match": encoded["ETag"]})
    assert status == 304 and headers["Vary"] == "Accept-Encoding"
    status, _, _ = await fetch(web, url, {"Accept-Encoding": "gzip", "If-None-Match": identity["ETag"]})
    assert status == 200
    # Not HTML, not gzipped; a host without gzip never gzips.
    assert "Content-Encoding" not in (await fetch(web, "http://site-1.test/robots.txt"))[1]
    assert "Content-Encoding" not in (await fetch(web, "http://site-1.test/img/0.png"))[1]
    _, headers, _ = await fetch(web, "http://site-3.test/", {"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in headers and "Vary" not in headers


async def test_the_gzip_bomb_still_explodes_on_a_gzip_host(web):
    status, headers, body = await fetch(web, "http://site-2.test/bomb", IDENTITY)
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["ETag"] == etag_of(body)
    inflated = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(body)
    assert len(inflated) == BOMB_BYTES and len(body) < BOMB_BYTES // 100


# --- body bytes and 304s in the stats -------------------------------------------------------


async def test_body_bytes_are_what_the_client_received_and_304s_are_counted(web):
    stable, changing = stable_and_changing_page(web)
    web.reset()
    received: dict[str, int] = {}
    answers_304: dict[str, int] = {}
    requests = [
        ("GET", stable, IDENTITY),
        ("GET", changing, {"Accept-Encoding": "gzip"}),
        ("GET", "http://site-1.test/", {"Accept-Encoding": "gzip"}),
        ("GET", "http://site-1.test/", IDENTITY),
        ("HEAD", "http://site-1.test/p/1", IDENTITY),
        ("GET", "http://site-1.test/robots.txt", IDENTITY),
        ("GET", "http://site-1.test/no-such-page", IDENTITY),
        ("GET", "http://site-2.test/bomb", IDENTITY),
        ("GET", "http://site-2.test/", {"Accept-Encoding": "gzip"}),
        ("GET", "http://site-0.test/dup/1/b", IDENTITY),
    ]
    etags: dict[tuple[str, str], str] = {}
    for method, url, headers in requests:
        status, answer, body = await fetch(web, url, headers, method=method)
        host = urlsplit(url).hostname or ""
        received[host] = received.get(host, 0) + len(body)
        if status == 200:
            etags[(url, headers["Accept-Encoding"])] = answer["ETag"]
    for (url, accept), etag in etags.items():
        status, _, body = await fetch(web, url, {"Accept-Encoding": accept, "If-None-Match": etag})
        host = urlsplit(url).hostname or ""
        received[host] = received.get(host, 0) + len(body)
        answers_304[host] = answers_304.get(host, 0) + (status == 304)
    stats = web.stats()
    for host, stat in stats["hosts"].items():
        assert stat["body_bytes"] == received.get(host, 0), host
        assert stat["not_modified"] == answers_304.get(host, 0), host
    totals = stats["totals"]
    assert totals["body_bytes"] == sum(received.values()) > 0
    # Every 200 but the changing page's came back as a 304.
    assert totals["not_modified"] == sum(answers_304.values()) == len(etags) - 1
    assert web.stats(summary=True)["totals"]["body_bytes"] == totals["body_bytes"]
    web.reset()
    assert web.stats(summary=True)["totals"]["body_bytes"] == 0


# --- pure pieces and profiles -----------------------------------------------------------------


def test_weak_comparison_and_star():
    assert etag_matches("abc", (ETag(value="abc", is_weak=True),))
    assert etag_matches("abc", (ETag(value="x"), ETag(value="abc")))
    assert etag_matches("abc", (ETag(value="*"),))
    assert not etag_matches("abc", (ETag(value="abd"),)) and not etag_matches("abc", ())


def test_new_profile_settings_are_validated():
    host = parse_profile({"site-0.test": {"gzip": True, "changing": 0.25, "duplicates": 4}})
    settings = host.for_host("site-0.test")
    assert (settings.gzip, settings.changing, settings.duplicates) == (True, 0.25, 4)
    for bad in ({"gzip": "yes"}, {"changing": 1.5}, {"changing": -0.1}, {"duplicates": 1001},
                {"duplicates": 1.5}):
        with pytest.raises(ProfileError):
            parse_profile({"site-0.test": bad})
