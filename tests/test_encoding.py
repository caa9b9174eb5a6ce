"""core.encoding: a body as the server sent it, decoded within a limit."""

from __future__ import annotations

import gzip
import zlib

from crawler_node.core.encoding import ACCEPT_ENCODING, codings, decode_body
from crawler_node.core.scope import Scope
from crawler_node.parse.parser_worker import ParseContext, parse_pages

TEXT = b"<html><body>" + b"".join(b"<a href='/p%d'>p</a>" % n for n in range(50)) + b"</body></html>"


def test_the_codings_the_node_asks_for_are_the_ones_it_decodes() -> None:
    assert ACCEPT_ENCODING == "gzip, deflate"
    for coding, encoded in (("gzip", gzip.compress(TEXT)), ("x-gzip", gzip.compress(TEXT)),
                            ("deflate", zlib.compress(TEXT)), ("Deflate", zlib.compress(TEXT)[2:-4]),
                            ("identity", TEXT), (None, TEXT), ("", TEXT)):
        decoded = decode_body(encoded, coding, 1_000_000)
        assert (decoded.body, decoded.truncated, decoded.error) == (TEXT, False, None), coding


def test_codings_are_undone_last_applied_first() -> None:
    assert codings("gzip, identity,  DEFLATE") == ["gzip", "deflate"]
    twice = gzip.compress(zlib.compress(TEXT))
    assert decode_body(twice, "deflate, gzip", 1_000_000).body == TEXT


def test_every_gzip_member_is_read() -> None:
    assert decode_body(gzip.compress(b"one ") + gzip.compress(b"two"), "gzip", 100).body == b"one two"


def test_a_bomb_inflates_to_the_limit_and_no_further() -> None:
    bomb = gzip.compress(bytes(50_000_000))
    assert len(bomb) < 100_000
    decoded = decode_body(bomb, "gzip", 1_000_000)
    assert (len(decoded.body), decoded.truncated, decoded.error) == (1_000_000, True, None)


def test_a_stream_cut_short_yields_what_came_before_the_cut() -> None:
    encoded = gzip.compress(TEXT * 20)
    decoded = decode_body(encoded[: len(encoded) // 2], "gzip", 1_000_000)
    assert decoded.error is None and 0 < len(decoded.body) < len(TEXT) * 20
    assert (TEXT * 20).startswith(decoded.body)


def test_what_cannot_be_decoded_says_why() -> None:
    assert "br" in (decode_body(b"\x8b\x02\x80", "br", 100).error or "")
    assert decode_body(b"not gzip at all", "gzip", 100).error is not None
    assert decode_body(TEXT, None, 10) .truncated


def test_the_parser_reads_a_gzip_page_as_sent() -> None:
    context = ParseContext(scope=Scope(), max_links=1000)
    [(links, found, _)] = parse_pages(context, [(gzip.compress(TEXT), "http://g.test/", 0, None, True, "gzip")])
    assert found == 50 and links[0] == ("http://g.test/p0", "g.test")
    [error] = parse_pages(context, [(b"garbage", "http://g.test/x", 0, None, True, "br")])
    assert isinstance(error, str) and "br" in error
