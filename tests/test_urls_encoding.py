"""A link's query in its page's encoding, as browsers encode it (the URL Standard's "encoding" of a
document's URL parser): the query of a link on a legacy-encoded page is percent-encoded from that
encoding's bytes, its path from UTF-8; a character the encoding lacks becomes an escaped HTML
character reference."""

from __future__ import annotations

import pytest

from crawler_node.core.urls import normalize_url
from crawler_node.parse.charset import url_query_codec
from crawler_node.parse.links import LinkMemo, extract_links

BASE = "http://a.test/dir/page?x=1"


@pytest.mark.parametrize(
    ("encoding", "raw", "expected"),
    [
        ("windows-1252", "s?q=café", "http://a.test/dir/s?q=caf%E9"),
        ("windows-1252", "/café?q=café", "http://a.test/caf%C3%A9?q=caf%E9"),  # the path stays UTF-8
        ("windows-1252", "?q=€", "http://a.test/dir/page?q=%80"),
        ("windows-1252", "?q=✓", "http://a.test/dir/page?q=%26%2310003%3B"),  # no ✓ in windows-1252
        ("windows-1252", "?q=a✓é b'c", "http://a.test/dir/page?q=a%26%2310003%3B%E9%20b%27c"),
        ("windows-1252", "?q=é#é", "http://a.test/dir/page?q=%E9"),  # the fragment goes, whatever it is
        ("windows-1252", "#é", "http://a.test/dir/page?x=1"),  # no query of its own: the base's
        ("windows-1252", "/é", "http://a.test/%C3%A9"),
        ("windows-1252", "?q=%7e%e9", "http://a.test/dir/page?q=~%E9"),  # escapes as written, canonical
        ("windows-1252", "  ?q=\té\n ", "http://a.test/dir/page?q=%E9"),  # stripped, tab and newline removed
        ("iso-8859-2", "?q=ő", "http://a.test/dir/page?q=%F5"),
        ("shift_jis", "?q=日本", "http://a.test/dir/page?q=%93%FA%96{"),  # 0x7B, "{", is not escaped
        ("euc-jp", "?q=日本", "http://a.test/dir/page?q=%C6%FC%CB%DC"),
        ("euc-kr", "?q=한", "http://a.test/dir/page?q=%C7%D1"),
        ("gbk", "?q=中", "http://a.test/dir/page?q=%D6%D0"),
        ("big5", "?q=中", "http://a.test/dir/page?q=%A4%A4"),
        ("koi8-r", "?q=я", "http://a.test/dir/page?q=%D1"),
        # ISO-2022-JP switches to JIS X 0208 and back, once for the run: ESC $ B, the bytes, ESC ( B.
        ("iso-2022-jp", "?q=日本", "http://a.test/dir/page?q=%1B$BF|K\\%1B(B"),
        ("iso-2022-jp", "?q=日✓本", "http://a.test/dir/page?q=%1B$BF|%1B(B%26%2310003%3B%1B$BK\\%1B(B"),
        # UTF-8 and the encodings that get UTF-8 for URLs: the parser's own UTF-8.
        ("utf-8", "?q=é", "http://a.test/dir/page?q=%C3%A9"),
        ("utf-16le", "?q=é", "http://a.test/dir/page?q=%C3%A9"),
        ("replacement", "?q=é", "http://a.test/dir/page?q=%C3%A9"),
    ],
)
def test_query_in_the_documents_encoding(encoding: str, raw: str, expected: str) -> None:
    assert normalize_url(raw, BASE, query_codec=url_query_codec(encoding)) == expected


def test_without_a_codec_the_query_is_utf8() -> None:
    assert normalize_url("?q=é", BASE) == "http://a.test/dir/page?q=%C3%A9"


def _page(body: str, charset: str) -> bytes:
    return f"<html><head><title>t</title></head><body>{body}</body></html>".encode(charset, "xmlcharrefreplace")


def test_links_of_a_legacy_page_have_their_query_in_its_encoding() -> None:
    body = _page('<a href="s?q=café">1</a> <a href="/café?q=é">2</a> <a href="?q=&#10003;">3</a>'
                 ' <a href="p?x=caf%E9">4</a> <a href="../up?q=é#f">5</a>', "cp1252")
    page = extract_links(body, "http://a.test/dir/page", encoding="windows-1252")
    assert page.links == ["http://a.test/dir/s?q=caf%E9", "http://a.test/caf%C3%A9?q=%E9",
                          "http://a.test/dir/page?q=%26%2310003%3B", "http://a.test/dir/p?x=caf%E9",
                          "http://a.test/up?q=%E9"]


def test_the_encoding_a_meta_declares_counts_too() -> None:
    body = b'<meta charset="shift_jis"><a href="/s?q=' + "日本".encode("cp932") + b'">x</a>'
    assert extract_links(body, "http://a.test/").links == ["http://a.test/s?q=%93%FA%96{"]


def test_a_base_href_with_a_query_is_encoded_too() -> None:
    body = _page('<base href="/b/?q=é"><a href="#top">1</a> <a href="x">2</a>', "cp1252")
    page = extract_links(body, "http://a.test/", encoding="windows-1252")
    assert page.links == ["http://a.test/b/?q=%E9", "http://a.test/b/x"]


def test_the_memo_does_not_give_a_utf8_pages_answer_to_a_legacy_page() -> None:
    memo = LinkMemo()
    link = '<a href="/s?q=é">x</a>'
    utf8 = extract_links(_page(link, "utf-8"), "http://a.test/", encoding="utf-8", memo=memo)
    legacy = extract_links(_page(link, "cp1252"), "http://a.test/", encoding="windows-1252", memo=memo)
    again = extract_links(_page(link, "utf-8"), "http://a.test/", encoding="utf-8", memo=memo)
    assert utf8.links == again.links == ["http://a.test/s?q=%C3%A9"]
    assert legacy.links == ["http://a.test/s?q=%E9"]
