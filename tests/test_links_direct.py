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
