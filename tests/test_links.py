import pickle
import random
import string

import pytest

from crawler_node.core.urls import InvalidURL, normalize_url
from crawler_node.parse import links
from crawler_node.parse.links import MAX_TAG_CHARS, ParsedPage, decode_html, extract_links, refresh_url

PAGE = "http://ex.test/dir/page.html"


@pytest.fixture(autouse=True, params=["as it is when safe", "always flattened"])
def parse_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs both ways a page can be parsed: as it is (small, ordinary pages)
    and flattened first (parse.links._parses_linearly); the answers must not differ."""
    if request.param == "always flattened":
        monkeypatch.setattr(links, "_parses_linearly", lambda text: False)
    return request.param


def links_of(html: str | bytes, url: str = PAGE, **kwargs) -> list[str]:
    body = html.encode() if isinstance(html, str) else html
    return extract_links(body, url, **kwargs).links


def test_all_link_bearing_elements_in_document_order() -> None:
    html = """<html><head><title>T</title>
      <link rel="canonical" href="/canon"><link rel="stylesheet" href="/s.css">
      <link rel="next" href="p2"><link rel="alternate icon" href="/alt"></head>
      <body><a href="a">a</a><map><area href="area"></map>
      <iframe src="frame.html"></iframe>
      <meta http-equiv="refresh" content="5; url=/moved"></body></html>"""
    assert links_of(html) == [
        "http://ex.test/canon",
        "http://ex.test/dir/p2",
        "http://ex.test/alt",
        "http://ex.test/dir/a",
        "http://ex.test/dir/area",
        "http://ex.test/dir/frame.html",
        "http://ex.test/moved",
    ]


def test_frameset_frames() -> None:
    html = (
        "<html><head><title>F</title></head>\n<frameset cols='50%,50%'>\n"
        "<frame src='left.html'>\n<frame src='right.html'>\n</frameset></html>"
    )
    assert links_of(html) == ["http://ex.test/dir/left.html", "http://ex.test/dir/right.html"]


def test_base_href_is_resolved_against_the_page_and_used_for_every_link() -> None:
    html = '<a href="early">x</a><base href="../other/"><a href="late">y</a>'
    assert links_of(html) == ["http://ex.test/other/early", "http://ex.test/other/late"]


def test_broken_base_href_is_ignored() -> None:
    assert links_of('<base href="javascript:x"><a href="a">a</a>') == ["http://ex.test/dir/a"]


def test_invalid_links_are_dropped_silently() -> None:
    html = """<a href="javascript:void(0)">j</a><a href="mailto:a@b.test">m</a>
      <a href="tel:+1">t</a><a href="http://a..b/">bad host</a><a href="http://x.test:99999/">bad port</a>
      <a href="">empty</a><a href="   ">blank</a><a>no href</a><a href="ok">ok</a>"""
    assert links_of(html) == ["http://ex.test/dir/ok"]


def test_links_are_normalised_and_deduplicated_in_order() -> None:
    html = """<a href="B">1</a><a href="http://EX.test:80/dir/B#top">2</a>
      <a href="/%7Euser">3</a><a href="B">4</a><a href="/~user">5</a><a href="C">6</a>"""
    assert links_of(html) == ["http://ex.test/dir/B", "http://ex.test/~user", "http://ex.test/dir/C"]


def test_rel_nofollow_skips_only_that_link() -> None:
    html = '<a href="a" rel="NoFollow noopener">a</a><a href="b">b</a><link rel="next nofollow" href="c">'
    page = extract_links(html.encode(), PAGE)
    assert page.links == ["http://ex.test/dir/b"]
    assert page.nofollow is False


@pytest.mark.parametrize("content", ["nofollow", "NOINDEX, NOFOLLOW", "none"])
def test_meta_robots_nofollow_empties_the_page(content: str) -> None:
    html = f'<head><title>Hidden</title><meta name="Robots" content="{content}"></head><a href="a">a</a>'
    page = extract_links(html.encode(), PAGE)
    assert page == ParsedPage(links=[], title="Hidden", nofollow=True)


def test_meta_robots_index_follow_is_not_nofollow() -> None:
    page = extract_links(b'<meta name="robots" content="noindex"><a href="a">a</a>', PAGE)
    assert page.nofollow is False
    assert page.links == ["http://ex.test/dir/a"]


@pytest.mark.parametrize(
    ("content", "url"),
    [
        ("0; url=http://x.test/", "http://x.test/"),
        ("0;URL='/quoted'", "/quoted"),
        ('3, url="/double"', "/double"),
        ("5;url = /spaced ", "/spaced"),
        ("0; /no-url-prefix", "/no-url-prefix"),
        ("10", None),
        ("", None),
        ("soon; url=/x", None),
    ],
)
def test_refresh_url_parsing(content: str, url: str | None) -> None:
    assert refresh_url(content) == url


def test_title_is_whitespace_collapsed_or_none() -> None:
    assert extract_links(b"<title>\n  Hello \t world </title>", PAGE).title == "Hello world"
    assert extract_links(b"<title>   </title>", PAGE).title is None
    assert extract_links(b"<p>no title</p>", PAGE).title is None


def test_links_in_scripts_and_comments_are_not_links() -> None:
    html = """<script>document.write('<a href="/from-script">x</a>')</script>
      <!-- <a href="/from-comment">x</a> --><style>a[href="/from-style"]{}</style>
      <a title="a > b" href="real">r</a>"""
    assert links_of(html) == ["http://ex.test/dir/real"]


def test_max_links_caps_the_output() -> None:
    html = "".join(f'<a href="/p{i}">{i}</a>' for i in range(100))
    assert links_of(html, max_links=10) == [f"http://ex.test/p{i}" for i in range(10)]


def test_encoding_from_argument_meta_and_fallback() -> None:
    cyrillic = '<meta charset="windows-1251"><title>Привет</title><a href="/Привет">x</a>'
    page = extract_links(cyrillic.encode("windows-1251"), PAGE)
    assert page.title == "Привет"
    assert page.links == ["http://ex.test/%D0%9F%D1%80%D0%B8%D0%B2%D0%B5%D1%82"]
    # The HTTP charset wins over a wrong meta declaration.
    latin = '<meta charset="utf-8"><title>café</title>'.encode("latin-1")
    assert extract_links(latin, PAGE, encoding="ISO-8859-1").title == "café"
    # Undecodable bytes and unknown labels fall back to windows-1252 (WHATWG's default).
    assert extract_links(b"<title>a\xffb</title>", PAGE, encoding="no-such-charset").title == "aÿb"


def test_decode_html_honours_a_bom() -> None:
    assert decode_html("\ufeff<p>é</p>".encode("utf-16-le"), "latin-1") == "<p>é</p>"


def test_invalid_page_url_raises() -> None:
    with pytest.raises(InvalidURL):
        extract_links(b"<a href='x'>", "ftp://ex.test/")


def test_result_pickles_for_the_process_pool() -> None:
    page = extract_links(b"<title>t</title><a href='a'>a</a>", PAGE)
    assert pickle.loads(pickle.dumps(page)) == page


def test_truncation_bounds_the_parsed_input() -> None:
    html = b"<a href='/first'>1</a>" + b" " * 1000 + b"<a href='/beyond'>2</a>"
    assert links_of(html, max_parse_bytes=500) == ["http://ex.test/first"]


def _short_attribute_tags() -> bytes:
    # Link tags just under the size cap, packed with distinct two- and three-letter names.
    letters = string.ascii_lowercase
    names = [a + b for a in letters for b in letters] + [a + b + c for a in letters for b in letters for c in "xyz"]
    tag = "<a href=/x"
    for name in names:
        if len(tag) + len(name) + 2 > MAX_TAG_CHARS:
            break
        tag += " " + name
    tag += ">"
    return tag.encode() * (5_000_000 // len(tag))


HOSTILE = {
    "random bytes": lambda: random.Random(51).randbytes(20_000_000),  # seeded: the same bytes each run
    # Each of these costs Lexbor seconds to minutes when parsed as is (quadratic cases).
    "nested divs": lambda: b"<div>" * 1_000_000,
    "span stack then div pairs": lambda: b"<span>" * 10_000 + b"<div></div>" * 400_000,
    "anchor and bold": lambda: b"<a href=x><b>" * 400_000,
    "attribute flood": lambda: b"<a " + b" ".join(b"x%d=1" % i for i in range(600_000)) + b">",
    "many short attributes": lambda: _short_attribute_tags(),
    "unterminated quotes": lambda: b'<div "' * 1_000_000,
    "long quoted values": lambda: (b'<a "' + b"x" * 2500) * 2000,
    "unterminated comments": lambda: b"<!--" * 1_000_000,
    "distinct links": lambda: b"".join(b'<a href="/x%d">y</a>' % i for i in range(300_000)),
    "javascript links": lambda: b"".join(b'<a href="javascript:%d">y</a>' % i for i in range(300_000)),
    # Link-bearing elements without a link: each is walked and its attributes read.
    "bare anchors": lambda: b"<a>" * 1_600_000,
}


# What makes Lexbor superlinear (see parse.links): nesting, and many attributes in one tag. What
# it is handed bounds both, whatever the page: the tests count them in the tree it built (work
# done, not time taken, so a loaded machine cannot fail them).
MAX_TREE_DEPTH = 32  # html > body > a few levels: random bytes build 5 to 8, a million <div>s a million
MAX_ATTRIBUTES = MAX_TAG_CHARS // 3  # the shortest attribute is " x" plus a separator: a tag's cap bounds them


def _tree_shape(tree) -> tuple[int, int, int]:
    """(deepest element, elements, most attributes on one element) of a Lexbor tree, in one walk."""
    root = tree.root
    depth = {root.mem_id: 0}
    deepest = elements = attributes = 0
    for node in root.traverse():
        parent = node.parent
        level = depth.get(parent.mem_id, 0) + 1 if parent is not None else 0
        depth[node.mem_id] = level
        deepest, elements = max(deepest, level), elements + 1
        attributes = max(attributes, len(node.attributes))
    return deepest, elements, attributes


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_parsed_in_bounded_work_with_bounded_output(name: str, monkeypatch) -> None:
    body = HOSTILE[name]()
    handed: list = []
    real_parser = links.LexborHTMLParser

    def recording_parser(document):
        tree = real_parser(document)
        handed.append((len(document), tree))
        return tree

    monkeypatch.setattr(links, "LexborHTMLParser", recording_parser)
    page = extract_links(body, PAGE, max_links=1000)
    assert len(page.links) <= 1000
    assert page.title is None or len(page.title) <= 1000
    [(size, tree)] = handed  # one parse
    deepest, elements, attributes = _tree_shape(tree)
    # Lexbor reads at most the capped body, builds no more elements than it has characters, never
    # nests deeper than a flat page does, and holds no tag with more attributes than fit in the cap
    # (unguarded, the nested divs alone nest a million deep and take minutes).
    assert size <= links.MAX_PARSE_BYTES
    assert elements <= size + 3, (name, elements, size)  # html, head, body of an empty document
    assert deepest <= MAX_TREE_DEPTH, (name, deepest)
    assert attributes <= MAX_ATTRIBUTES, (name, attributes)


def test_a_shared_memo_never_changes_what_a_page_links_to() -> None:
    from crawler_node.parse.links import LinkMemo

    hrefs = ["/a", "/a/../b", "//other.test/x", "HTTP://Ex.Test:80/c", "https://ex.test/d",
             "e", "../f", "?q=1", "#frag", "", "javascript:void(0)", "http:g", "/%7Euser", "//[::1", "/h i",
             # relative paths, remembered per directory, and look-alikes that read more of the base
             "./g?y=1#s", "..", "g/../../h", "a b:c", "x:y", "http:", "https:g", "g\t:h", "%2e%2e/i", "j?",
             ";p", "@k", "\u00e9l", "m%zz"]
    body = "".join(f'<a href="{h}">x</a>' for h in hrefs)
    pages = [
        ("http://ex.test/dir/page.html", body),
        ("http://ex.test/dir/next.html?x=a/b/c", body),  # same directory; a "/" in the query
        ("http://ex.test/dir/", body),
        ("http://ex.test/dir", body),  # another directory: "/", not "/dir/"
        ("http://ex.test/other/deeper/page.html?x=1", body),  # same origin, another directory
        ("https://ex.test/other/page.html", body),  # same text, another scheme: another origin
        ("http://ex.test:8080/dir/page.html", body),
        ("http://ex.test/dir/page.html", '<base href="http://base.test/x/">' + body),
        ("http://ex.test/dir/page.html", '<base href="../up/">' + body),
        ("http://other.test/", body),
    ]
    for memo in (LinkMemo(), LinkMemo(capacity=3)):  # the small one starts over all the time
        for _ in range(2):
            for url, html in pages:
                assert links_of(html, url, memo=memo) == links_of(html, url), url
        assert len(memo._known) <= memo.capacity


def test_a_memo_normalises_a_link_once_per_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    import crawler_node.parse.links as links_module

    normalised: list[str] = []

    def counting_normalize_url(url: str, base: str | None = None) -> str:
        normalised.append(url)
        return normalize_url(url, base)

    monkeypatch.setattr(links_module, "normalize_url", counting_normalize_url)
    memo = links_module.LinkMemo()
    # Plain links ("../p/9", "/top") take the shortcut (urls.resolve_plain) and never reach
    # the memo; the others are remembered under the part of the base they depend on.
    body = (b'<a href="../p/9">x</a><a href="/top">y</a><a href="../p/%39">z</a><a href="/t%6Fp?a">t</a>'
            b'<a href="?page=2">z</a>')
    for page in ("http://ex.test/p/1", "http://ex.test/p/2?q=1", "http://ex.test/p/3"):
        assert links_of(body, page, memo=memo)[:3] == ["http://ex.test/p/9", "http://ex.test/top",
                                                       "http://ex.test/top?a"]
    assert normalised.count("../p/9") == normalised.count("/top") == 0
    # One normalisation each for the directory's relative link and the root-relative one;
    # "?page=2" reads the page's own path, so every page normalises it.
    assert normalised.count("../p/%39") == 1
    assert normalised.count("/t%6Fp?a") == 1
    assert normalised.count("?page=2") == 3


def test_the_crawl_can_skip_the_title() -> None:
    html = b"<title>Skipped</title><a href='a'>a</a>"
    page = extract_links(html, PAGE, with_title=False)
    assert page == ParsedPage(links=["http://ex.test/dir/a"], title=None, nofollow=False)
    hidden = b"<title>T</title><meta name=robots content=nofollow><a href='a'>a</a>"
    assert extract_links(hidden, PAGE, with_title=False) == ParsedPage(links=[], title=None, nofollow=True)


def test_first_title_and_first_base_with_an_href_win_wherever_they_are() -> None:
    html = """<a href="a">a</a><base target="_top"><base href="/first/"><base href="/second/">
      <title>One</title><title>Two</title><meta name="robots" content="index, follow">"""
    page = extract_links(html.encode(), PAGE)
    assert page.links == ["http://ex.test/first/a"]
    assert page.title == "One"
    # A <base href> without a value is the page itself; a later robots meta still counts.
    page = extract_links(b'<base href><a href="a">a</a><meta name=robots content=none>', PAGE)
    assert page.nofollow is True
    assert links_of(b'<base href><a href="a">a</a>') == ["http://ex.test/dir/a"]


def test_link_tags_longer_than_the_cap_are_dropped_and_shorter_ones_kept() -> None:
    padding = "<p>" + "filler " * (MAX_TAG_CHARS // 7) + "</p>"  # longer than the cap on its own
    oversized = '<a href="/big" title="' + "x>" * MAX_TAG_CHARS + '">big</a>'
    for html in (oversized + '<a href="/small">s</a>', padding + oversized + '<a href="/small">s</a>'):
        assert links_of(html) == ["http://ex.test/small"]
    just_fits = '<a href="/fits" title="' + "y" * (MAX_TAG_CHARS - 30) + '">f</a>'
    assert links_of(padding + just_fits) == ["http://ex.test/fits"]

