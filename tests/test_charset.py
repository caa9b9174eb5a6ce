"""Which encoding a page is read in: the HTML standard's order (BOM, HTTP charset, <meta>
prescan, sniffing, windows-1252) and the WHATWG Encoding Standard's labels; and how much of a
page the parser reads (max_parse_bytes)."""

from __future__ import annotations

import pytest

from crawler_node.core.response import FetchResult
from crawler_node.core.scope import Scope
from crawler_node.parse.charset import ENCODING_OF_LABEL, decode_document, encoding_for_label, prescan
from crawler_node.parse.links import extract_links
from crawler_node.parse.parser_worker import PageReport, ParseContext, parse_pages

PAGE = "http://latin1.test/"
CAFE_LINK = "http://latin1.test/caf%C3%A9.html"  # é percent-encoded as UTF-8, whatever the page's encoding


def source(body: bytes, http_charset: str | None = None) -> tuple[str, str]:
    decoded = decode_document(body, http_charset)
    return decoded.encoding, decoded.source


# ------------------------------------------------------------------------------ the order
def test_a_bom_beats_the_http_charset_which_beats_meta_which_beats_sniffing() -> None:
    meta_koi8 = '<meta charset="koi8-r"><p>café</p>'
    assert source(b"\xef\xbb\xbf" + meta_koi8.encode(), "windows-1251") == ("utf-8", "bom")
    assert source("\ufeff<p>é</p>".encode("utf-16-be"), "latin1") == ("utf-16be", "bom")
    assert source("\ufeff<p>é</p>".encode("utf-16-le"), "latin1") == ("utf-16le", "bom")
    assert source(meta_koi8.encode("utf-8"), "windows-1251") == ("windows-1251", "http")
    assert source(meta_koi8.encode("utf-8")) == ("koi8-r", "meta")
    assert source("<p>café</p>".encode()) == ("utf-8", "sniff")
    assert source("<p>café</p>".encode("latin-1")) == ("windows-1252", "default")
    # The BOM is not part of the text.
    assert decode_document("\ufeff<p>é</p>".encode("utf-16-le"), "latin1").text == "<p>é</p>"


def test_an_unknown_http_label_falls_through_to_meta_then_to_sniffing() -> None:
    assert source(b'<meta charset="windows-1251"><p>\xcf</p>', "no-such-charset") == ("windows-1251", "meta")
    assert source("<p>café</p>".encode(), "latin-1") == ("utf-8", "sniff")  # "latin-1" is no WHATWG label
    assert decode_document(b"<p>a\xffb</p>", "no-such-charset").text == "<p>aÿb</p>"  # windows-1252


def test_the_http_charset_reads_a_latin1_page_right_when_neither_bytes_nor_meta_say_so() -> None:
    body = '<meta charset="utf-8"><title>Café</title><a href="café.html">é</a>'.encode("latin-1")
    page = extract_links(body, PAGE, encoding="ISO-8859-1")
    assert page.title == "Café"
    assert page.links == [CAFE_LINK]  # not caf%EF%BF%BD.html, which 404s


def test_a_page_in_a_legacy_encoding_gives_links_percent_encoded_as_utf8() -> None:
    privet = "http://latin1.test/%D0%9F%D1%80%D0%B8%D0%B2%D0%B5%D1%82"
    body = '<a href="/Привет">x</a>'
    assert extract_links(body.encode("windows-1251"), PAGE, encoding="cp1251").links == [privet]
    assert extract_links(body.encode("koi8-r"), PAGE, encoding="koi8").links == [privet]
    assert extract_links(body.encode("utf-8"), PAGE).links == [privet]


# ------------------------------------------------------------------------------ WHATWG labels
@pytest.mark.parametrize(("label", "encoding"), [
    ("latin1", "windows-1252"), ("ISO-8859-1", "windows-1252"), ("us-ascii", "windows-1252"),
    ("ascii", "windows-1252"), ("iso_8859-1:1987", "windows-1252"), ("l1", "windows-1252"),
    ("utf8", "utf-8"), (" UTF-8\t", "utf-8"), ("unicode-1-1-utf-8", "utf-8"),
    ("gb2312", "gbk"), ("x-sjis", "shift_jis"), ("ms932", "shift_jis"), ("ks_c_5601-1987", "euc-kr"),
    ("iso-8859-9", "windows-1254"), ("tis-620", "windows-874"), ("utf-16", "utf-16le"),
    ("ucs-2", "utf-16le"), ("iso-2022-kr", "replacement"), ("x-user-defined", "x-user-defined"),
])
def test_labels_mean_what_the_encoding_standard_says(label: str, encoding: str) -> None:
    assert encoding_for_label(label) == encoding


@pytest.mark.parametrize("label", ["latin-1", "utf-32", "ucs-4", "x-nope", "", "\u212aoi8-r", "utf_8"])
def test_labels_python_knows_but_the_standard_does_not_are_unknown(label: str) -> None:
    # "latin-1", "utf_8" and "utf-32" are Python codec names, not WHATWG labels; the Kelvin
    # sign lower-cases to "k" in Python but is no ASCII letter.
    assert encoding_for_label(label) is None


def test_every_label_decodes() -> None:
    for label in ENCODING_OF_LABEL:
        decode_document(b"<p>\x80\xa4\xe9\xff ok</p>", label)


def test_legacy_labels_decode_as_the_standard_supersets() -> None:
    # windows-1252, not ISO-8859-1: 0x80 is the euro sign; its five undefined bytes are C1 controls.
    assert decode_document(b"\x80\x81", "iso-8859-1").text == "€\x81"
    assert decode_document(b"\x80", "us-ascii").text == "€"
    # gbk decodes as gb18030; shift_jis is Windows-31J (NEC's circled digits); euc-kr is windows-949.
    assert decode_document("鍅".encode("gb18030"), "gb2312").text == "鍅"
    assert decode_document("①".encode("cp932"), "shift_jis").text == "①"
    assert decode_document("똠".encode("cp949"), "euc-kr").text == "똠"
    assert decode_document(b"a\x80\xff", "x-user-defined").text == "a\uf780\uf7ff"
    # The replacement encoding hides the whole document (what ISO-2022-KR could smuggle).
    assert decode_document(b"<a href=/x>x</a>", "iso-2022-kr").text == "\ufffd"
    assert extract_links(b"<a href=/x>x</a>", PAGE, encoding="hz-gb-2312").links == []


# ------------------------------------------------------------------------------ the prescan
@pytest.mark.parametrize(("head", "encoding"), [
    (b'<meta charset="windows-1251">', "windows-1251"),
    (b"<META CHARSET=KOI8-R>", "koi8-r"),
    (b"<meta/charset=euc-jp>", "euc-jp"),
    (b'<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-2">', "iso-8859-2"),
    (b"<meta content='text/html;charset = \"big5\"' http-equiv=content-type>", "big5"),
    (b'<meta charset="utf-16le">', "utf-8"),  # read as ASCII, so it cannot be UTF-16
    (b'<meta charset="x-user-defined">', "windows-1252"),
    (b'<meta charset="gbk" charset="koi8-r">', "gbk"),  # the first of an attribute counts
    (b'<meta content="text/html; charset=koi8-r" charset="big5">', "big5"),  # charset beats content
    (b"<!-- <meta charset=koi8-r> --><meta charset=gbk>", "gbk"),  # comments are skipped
    (b'<!--><meta charset="big5">', "big5"),  # "<!-->" is a whole comment
    (b'<p title="<meta charset=koi8-r>"><meta charset=gbk>', "gbk"),  # so are attribute values
    (b"<?xml version='1.0'?><meta charset=euc-kr>", "euc-kr"),
    (b'<\x00?\x00x\x00m\x00l\x00', "utf-16le"),
])
def test_the_prescan_finds_what_a_browser_finds(head: bytes, encoding: str) -> None:
    assert prescan(head) == encoding


@pytest.mark.parametrize("head", [
    b'<meta content="text/html; charset=koi8-r">',  # content without the http-equiv pragma
    b'<meta http-equiv="refresh" content="0; charset=koi8-r">',
    b'<meta charset="no-such">',
    b'<meta name="description" content="a charset=koi8-r">',
    b'<meta charset="koi8-r"',  # the input ends inside the tag
    b"<!-- <meta charset=koi8-r>",  # ... or inside a comment
    b"<p>plain text, no meta at all</p>",
])
def test_the_prescan_ignores_what_a_browser_ignores(head: bytes) -> None:
    assert prescan(head) is None


def test_a_meta_after_the_first_1024_bytes_does_not_count() -> None:
    late = b"<p>" + b"x" * 1024 + b'<meta charset="koi8-r"><p>\xc1</p>'
    assert source(late) == ("windows-1252", "default")
    early = b'<meta charset="koi8-r">' + b"x" * 1024 + b"<p>\xc1</p>"
    assert decode_document(early).text.endswith("<p>а</p>")  # Cyrillic a in KOI8-R


# ------------------------------------------------------------------------------ sniffing
def test_sniffing_takes_valid_utf8_and_leaves_a_character_cut_at_the_parse_limit_alone() -> None:
    body = "<p>é</p>".encode()
    assert source(body[:-5]) == ("windows-1252", "default")  # ends inside "é": not UTF-8 when complete
    cut = decode_document(body[:-5], complete=False)
    assert (cut.encoding, cut.text) == ("utf-8", "<p>")


# ------------------------------------------------------------------------------ the HTTP header
@pytest.mark.parametrize(("content_type", "label"), [
    ("text/html; charset=ISO-8859-1", "ISO-8859-1"),
    ('text/html;charset="latin1"', "latin1"),
    ("text/html; Charset = utf-8 ", "utf-8"),
    ("text/html; foo=bar; charset=koi8-r; charset=utf-8", "koi8-r"),
    ("text/html", None),
    ("text/html; charset=", None),
])
def test_the_fetch_result_names_the_charset_label_of_its_content_type(content_type: str, label: str | None) -> None:
    assert FetchResult(url=PAGE, headers=[("Content-Type", content_type)]).charset == label


def test_the_parse_worker_reads_a_page_in_its_http_charset() -> None:
    body = '<a href="/café.html">é</a>'.encode("latin-1")
    context = ParseContext(scope=Scope(), max_links=10)
    [(links, found, _outlinks)] = parse_pages(context, [(body, PAGE, 0, "iso-8859-1", True)])
    assert [url for url, _host in links] == [CAFE_LINK]


# ------------------------------------------------------------------------------ max_parse_bytes
def test_links_come_from_the_first_max_parse_bytes_and_a_cut_page_says_so() -> None:
    body = b'<a href="/early">e</a>' + b" " * 1000 + b'<a href="/late">l</a>'
    whole = extract_links(body, PAGE, max_parse_bytes=len(body))
    assert (whole.links, whole.truncated) == (["http://latin1.test/early", "http://latin1.test/late"], False)
    cut = extract_links(body, PAGE, max_parse_bytes=500)
    assert (cut.links, cut.truncated) == (["http://latin1.test/early"], True)


def test_a_link_tag_cut_at_the_limit_is_dropped_not_followed_half_written() -> None:
    body = b'<a href="/early">e</a><a href="/a-long-path/page.html">x</a>'
    cut = extract_links(body, PAGE, max_parse_bytes=body.index(b"-path"))
    assert cut.links == ["http://latin1.test/early"]


def test_the_parse_worker_reports_a_page_cut_at_max_parse_bytes() -> None:
    body = b'<a href="/early">e</a>' + b" " * 1000 + b'<a href="/late">l</a>'
    context = ParseContext(scope=Scope(), max_links=10, max_parse_bytes=500)
    [cut, whole] = parse_pages(context, [(body, PAGE, 0, None, True), (body[:500], PAGE + "b", 0, None, True)])
    assert isinstance(cut, PageReport) and cut.truncated == "bytes" and cut.kind == "page"
    assert [url for url, _host in cut.links] == ["http://latin1.test/early"]
    assert whole == ([], 1, None)  # whole, and its one link already handed over
