"""Which pages Lexbor parses as they are and which are flattened first (parse.links); that
both ways give the same links, tests/test_links.py checks by running every test both ways."""

import pytest

from crawler_node.parse import links

PAGE = "http://ex.test/dir/page.html"


def links_of(html: str) -> list[str]:
    return links.extract_links(html.encode(), PAGE).links


def test_ordinary_pages_are_parsed_as_they_are_and_what_could_be_slow_is_flattened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ordinary = "<html><head><title>T</title></head><body>" + '<p>Text <a href="/x" class="c">x</a></p>' * 300
    assert links._parses_linearly(ordinary)
    for name, text in {
        "more tags than the bound": "<div>" * (links._DIRECT_MAX_TAGS + 1),
        "a tag longer than the segment bound": "<div " + "a" * links._DIRECT_MAX_SEGMENT + ">",
        "a tag split by quoted '>'s": "<div " + " ".join(f'a{i}=">"' for i in range(100)) + ">",
        # the attributes between two quoted values, each hiding the angle that would end a segment
        "attributes behind a quoted '>'": '<div a=">" ' + " ".join(f"b{i}" for i in range(3000)) + ' c="<">',
        "attributes behind a quoted '<>'": '<div a = \'><\' ' + " ".join(f"b{i}" for i in range(3000)) + ">",
        "a quoted value never closed": '<div a="' + "x" * 100 + "<b>",
        "longer than the size bound": "<p>" + "x" * links._DIRECT_MAX_CHARS,
    }.items():
        assert not links._parses_linearly(text), name
    flattened: list[int] = []
    flatten = links._flatten

    def counted(text: str) -> str:
        flattened.append(len(text))
        return flatten(text)

    monkeypatch.setattr(links, "_flatten", counted)
    assert len(links_of(ordinary)) == 1 and flattened == []
    assert links_of("<div " + " ".join(f'a{i}=">"' for i in range(100)) + '><a href="/y">') == ["http://ex.test/y"]
    assert len(flattened) == 1


def test_utf8_pages_reach_lexbor_as_their_own_bytes_and_give_what_their_text_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Lexbor reads bytes as UTF-8; a page's bytes skip selectolax's re-encoding of the text only
    # when they are exactly that text's UTF-8. Each case: (body, HTTP charset, bytes expected).
    page = ('<html><head><title>Caf\u00e9 \u2014 \U0001f600</title></head><body>'
            '<a href="/caf\u00e9">c</a> <a href="na\u00efve.html">n</a> <a href="/x?q=\u00fc">q</a></body></html>')
    cases = {
        "utf-8 by sniffing": (page.encode(), None, True),
        "utf-8 by HTTP": (page.encode(), "UTF-8", True),
        "utf-8 by meta": (('<meta charset="utf-8">' + page).encode(), None, True),
        "utf-8 after a BOM": (b"\xef\xbb\xbf" + page.encode(), None, False),
        "utf-8 declared, one invalid byte": (page.encode().replace(b"na\xc3\xafve", b"na\xefve"), "utf-8", False),
        "utf-8 with a U+FFFD of its own": (page.replace("\u2014", "\ufffd").encode(), None, False),
        "windows-1252 by meta": (('<meta charset="windows-1252">' + page.replace("\U0001f600", "")
                                  ).encode("cp1252", "replace"), None, False),
        "shift_jis by HTTP": (page.replace("\U0001f600", "\u65e5").encode("shift_jis", "replace"), "shift_jis", False),
        "ascii, undeclared": (page.encode("ascii", "xmlcharrefreplace"), None, True),
    }
    given: list[type] = []
    parser = links.LexborHTMLParser

    def spy(source: str | bytes) -> object:
        given.append(type(source))
        return parser(source)

    monkeypatch.setattr(links, "LexborHTMLParser", spy)
    for name, (body, charset, as_bytes) in cases.items():
        given.clear()
        got = links.extract_links(body, PAGE, encoding=charset)
        assert given == [bytes if as_bytes else str], name
        with monkeypatch.context() as text_only:
            text_only.setattr(links, "_lexbor_input", lambda read, decoded, complete: decoded.text)
            assert got == links.extract_links(body, PAGE, encoding=charset), name
        assert got.links and got.title, name
    # A body cut at the parse bound mid-character: the text leaves the cut character out.
    body = cases["utf-8 by sniffing"][0]
    cut = body.index("\u00e9".encode()) + 1
    given.clear()
    assert links.extract_links(body, PAGE, max_parse_bytes=cut).truncated and given == [str]
