import pickle
import random
import time
from urllib.parse import urlsplit

import pytest

from crawler_node.core.addresses import is_ip_literal, is_public_address
from crawler_node.core.scope import Scope
from crawler_node.core.urls import (
    MAX_URL_LENGTH,
    InvalidURL,
    bare_host,
    directory_of,
    host_of,
    normalize_url,
    origin_of,
    resolve_plain,
)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("http://BÜCHER.example/", "http://xn--bcher-kva.example/"),
        ("http://a.test:80/x/../y/./z?#f", "http://a.test/y/z"),
        ("http://a.test/%7e", "http://a.test/~"),
        ("http://a.test/a%2fb", "http://a.test/a%2Fb"),
        ("http://a.test/%41%2d%5F%2E", "http://a.test/A-_."),
        ("http://a.test/%e2%82%ac", "http://a.test/%E2%82%AC"),
        ("http://a.test/a b?c d", "http://a.test/a%20b?c%20d"),
        ("http://a.test/€?q=é", "http://a.test/%E2%82%AC?q=%C3%A9"),
        ("http://a.test/100%", "http://a.test/100%"),  # a lone "%" stays: URL Standard, path state
        ("http://a.test/%zz", "http://a.test/%zz"),
        ("  http://a.test/x \n", "http://a.test/x"),
        ("http://a.te\tst/x\ny", "http://a.test/xy"),  # tab and newline are removed, as browsers do
        ("HTTP://Example.COM", "http://example.com/"),
        ("HTTPS://Example.COM:443/", "https://example.com/"),
        ("https://example.com:80/", "https://example.com:80/"),
        ("http://example.com:443/", "http://example.com:443/"),
        ("http://example.com:08080/", "http://example.com:8080/"),
        ("http://example.com:/x", "http://example.com/x"),
        ("http://user:pw@example.com/x", "http://example.com/x"),
        ("http://example.com./x", "http://example.com/x"),
        ("http://example.com/x?", "http://example.com/x"),
        ("http://example.com/x?b=2&a=1", "http://example.com/x?b=2&a=1"),  # never sorted
        ("http://example.com/x?a=%7e&b=%2F", "http://example.com/x?a=~&b=%2F"),
        ("http://example.com/x?q=a/b?c", "http://example.com/x?q=a/b?c"),
        ("http://example.com/a/b/..", "http://example.com/a/"),
        ("http://example.com/a/./", "http://example.com/a/"),
        ("http://example.com/../../x", "http://example.com/x"),
        ("http://example.com/a//b", "http://example.com/a//b"),
        ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
        ("http://example.com/Case/Kept", "http://example.com/Case/Kept"),
        ("http://example.com#frag", "http://example.com/"),
        ("http://[2001:DB8::0:1]:8080/x", "http://[2001:db8::1]:8080/x"),
        ("http://127.0.0.1/", "http://127.0.0.1/"),
        ("http://my_host.example/", "http://my_host.example/"),
        ("http:///x", "http://x/"),  # special authority ignore slashes state: "x" is the host
        ("http://a.test:0/", "http://a.test:0/"),  # port state: any number up to 65535
    ],
)
def test_canonical_forms(raw: str, canonical: str) -> None:
    assert normalize_url(raw) == canonical


@pytest.mark.parametrize(
    "canonical",
    ["http://xn--bcher-kva.example/", "https://example.com:8443/a/b?x=1&y=%2F", "http://a.test/%E2%82%AC"],
)
def test_normalisation_is_idempotent(canonical: str) -> None:
    assert normalize_url(canonical) == canonical
    assert normalize_url(normalize_url(canonical)) == canonical


# RFC 3986 section 5.4 examples (fragments dropped, since we drop them).
RFC_BASE = "http://a.test/b/c/d;p?q"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("g", "http://a.test/b/c/g"),
        ("./g", "http://a.test/b/c/g"),
        ("g/", "http://a.test/b/c/g/"),
        ("/g", "http://a.test/g"),
        ("//g.test", "http://g.test/"),
        ("?y", "http://a.test/b/c/d;p?y"),
        ("g?y", "http://a.test/b/c/g?y"),
        ("#s", "http://a.test/b/c/d;p?q"),
        ("", "http://a.test/b/c/d;p?q"),
        (".", "http://a.test/b/c/"),
        ("..", "http://a.test/b/"),
        ("../g", "http://a.test/b/g"),
        ("../..", "http://a.test/"),
        ("../../../../g", "http://a.test/g"),
        ("/./g", "http://a.test/g"),
        ("g.", "http://a.test/b/c/g."),
        ("..g", "http://a.test/b/c/..g"),
        ("./g/.", "http://a.test/b/c/g/"),
        ("g;x=1/../y", "http://a.test/b/c/y"),
        ("g?y/../x", "http://a.test/b/c/g?y/../x"),
        ("http:g", "http://a.test/b/c/g"),  # non-strict, like urljoin and browsers
        ("https://other.test/a/../b", "https://other.test/b"),
    ],
)
def test_resolution_against_base(ref: str, expected: str) -> None:
    assert normalize_url(ref, RFC_BASE) == expected


def test_base_without_path_gets_a_slash() -> None:
    assert normalize_url("x", "http://a.test") == "http://a.test/x"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("a b:c", "http://a.test/b/a%20b:c"),  # not a scheme (a space): a relative path
        ("1a:b", "http://a.test/b/1a:b"),  # a scheme starts with a letter
        ("./x:y", "http://a.test/b/x:y"),
        ("HTTP:g", "http://a.test/b/g"),  # the same scheme in another case: still relative
    ],
)
def test_text_before_a_colon_is_a_scheme_only_if_it_has_scheme_syntax(ref: str, expected: str) -> None:
    assert normalize_url(ref, "http://a.test/b/c") == expected


def test_an_invalid_scheme_name_with_valid_syntax_is_rejected() -> None:
    with pytest.raises(InvalidURL) as caught:
        normalize_url("x+y.z-1:g", "http://a.test/b/c")
    assert caught.value.reason == "scheme"


def test_errors_name_their_own_url_when_the_authority_was_seen_before() -> None:
    # Canonical origins are cached per authority; the errors must still carry each URL.
    for url in ("http://a..b/one", "http://a..b/two"):
        with pytest.raises(InvalidURL) as caught:
            normalize_url(url)
        assert (caught.value.reason, caught.value.url) == ("host", url)
        assert isinstance(caught.value.__cause__, ValueError)
    for url in ("http://a.test:99999/one", "http://a.test:99999/two"):
        with pytest.raises(InvalidURL) as caught:
            normalize_url(url)
        assert (caught.value.reason, caught.value.url) == ("port", url)
    assert normalize_url("HTTP://User@A.Test:80/x") == "http://a.test/x"
    assert normalize_url("https://User@A.Test:80/y") == "https://a.test:80/y"  # one authority, two schemes


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("javascript:alert(1)", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("mailto:someone@example.com", "scheme"),
        ("ftp://example.com/", "scheme"),
        ("data:text/html,hi", "scheme"),
        ("//example.com/no-scheme", "scheme"),
        ("/relative/without/base", "scheme"),
        ("http://user@/x", "no_host"),
        ("http://:80/", "no_host"),
        ("http://a.test:65536/", "port"),
        ("http://a.test:8o/", "port"),
        ("http://a.test:-1/", "port"),
        ("http://[::1]x/", "port"),
        ("http://[::1/", "unparsable"),
        ("http://a..b/", "host"),
        ("http://a b/", "host"),
        ("http://exa*mple.com/", "host"),
        ("http://" + "a" * 64 + ".test/", "host"),
        ("http://[not-ipv6]/", "host"),
    ],
)
def test_rejections_carry_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as caught:
        normalize_url(raw)
    assert caught.value.reason == reason


def test_relative_javascript_link_is_rejected_even_with_a_base() -> None:
    with pytest.raises(InvalidURL) as caught:
        normalize_url("javascript:void(0)", "http://a.test/")
    assert caught.value.reason == "scheme"


def test_too_long_before_and_after_resolution() -> None:
    with pytest.raises(InvalidURL) as caught:
        normalize_url("http://a.test/" + "x" * MAX_URL_LENGTH)
    assert caught.value.reason == "too_long"
    # Short enough as written, too long once every space becomes %20.
    with pytest.raises(InvalidURL) as caught:
        normalize_url("http://a.test/" + "a " * 700 + "a")
    assert caught.value.reason == "too_long"
    assert normalize_url("http://a.test/" + "x" * 10, max_length=30) == "http://a.test/xxxxxxxxxx"


def test_invalid_url_pickles_with_its_reason() -> None:
    error = InvalidURL("scheme", "javascript:x")
    restored = pickle.loads(pickle.dumps(error))
    assert isinstance(restored, ValueError)
    assert (restored.reason, restored.url) == ("scheme", "javascript:x")
    assert "scheme" in str(restored)


def test_normalize_is_fast() -> None:
    urls = [f"https://site-{i % 50}.example.com/path/{i}/page.html?a={i}&b=2" for i in range(20_000)]
    started = time.perf_counter()
    for url in urls:
        normalize_url(url)
    per_call_us = (time.perf_counter() - started) / len(urls) * 1e6
    # Typically ~3 us; the bound leaves room for slow, shared CI machines.
    assert per_call_us < 25


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://a.test/x", "a.test"),
        ("https://a.test:8443/x?y", "a.test:8443"),
        ("http://[::1]:8080/", "[::1]:8080"),
    ],
)
def test_host_of(url: str, host: str) -> None:
    assert host_of(url) == host


def test_host_of_drops_default_port_through_normalisation() -> None:
    assert host_of(normalize_url("HTTPS://A.test:443/x")) == "a.test"


def test_scope_allows_any_host_for_a_url_without_a_source_by_default() -> None:
    # A seed or a submitted URL has no page it was found on: its host is the scope.
    assert Scope().check("http://anything.test/", 1000) is None


def test_scope_host_globs() -> None:
    scope = Scope(allow_hosts=["*.example.com", "site-?.test", "LOCALHOST:8080"])
    assert scope.check("http://www.example.com/", 0) is None
    assert scope.check("http://site-7.test:9000/", 0) is None  # the bare host matches
    assert scope.check("http://localhost:8080/", 0) is None
    assert scope.check("http://localhost:9090/", 0) == "host_not_allowed"
    assert scope.check("http://example.com/", 0) is None  # "*.example.com" names the apex too
    assert scope.check("http://notexample.com/", 0) == "host_not_allowed"
    assert scope.check("http://evil.test/", 0) == "host_not_allowed"


def test_scope_globs_are_compared_in_idna_form() -> None:
    scope = Scope(allow_hosts=["*.bücher.example"])
    assert scope.check(normalize_url("http://www.BÜCHER.example/"), 0) is None


def test_scope_depth() -> None:
    scope = Scope(max_depth=2)
    assert scope.check("http://a.test/", 2) is None
    assert scope.check("http://a.test/", 3) == "too_deep"


def test_scope_validates() -> None:
    with pytest.raises(TypeError):
        Scope(allow_hosts="*.example.com")
    with pytest.raises(ValueError):
        Scope(max_depth=-1)


@pytest.mark.parametrize(
    ("ip", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("127.0.0.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("239.1.2.3", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:8.8.8.8", True),
        ("2002:7f00:1::", False),  # 6to4 wrapping 127.0.0.1
        ("64:ff9b::a00:1", False),  # NAT64 wrapping 10.0.0.1
        ("not an ip", False),
        ("", False),
    ],
)
def test_is_public_address(ip: str, public: bool) -> None:
    assert is_public_address(ip) is public


@pytest.mark.parametrize(
    ("raw", "host"),
    [
        ("http://2130706433/", "127.0.0.1"),
        ("http://0177.0.0.1/", "127.0.0.1"),
        ("http://127.1/", "127.0.0.1"),
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://0X7F000001/", "127.0.0.1"),
        ("http://%30x7f.1/", "127.0.0.1"),  # escapes in the host are decoded before the IPv4 parser
        ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "127.0.0.1"),  # fullwidth digits: UTS 46 maps them
        ("http://127.0.0.1./", "127.0.0.1"),
        ("http://0xa9fea9fe/", "169.254.169.254"),  # cloud metadata
        ("http://10.0.0.1:8080/", "10.0.0.1"),
        ("http://[::1]/", "[::1]"),
        ("http://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]"),  # IPv4-mapped, written in hex by the standard
        ("http://[0:0:0:0:0:FFFF:A00:1]/", "[::ffff:a00:1]"),
        ("http://[2002:7f00:1::]/", "[2002:7f00:1::]"),  # 6to4 around 127.0.0.1
        ("http://[64:ff9b::10.0.0.1]/", "[64:ff9b::a00:1]"),  # NAT64 around 10.0.0.1
    ],
)
def test_address_spellings_reach_the_private_address_guard_as_addresses(raw: str, host: str) -> None:
    # The parser writes every spelling of an address in one form; the guard's checks (the
    # fetcher's on urlsplit's hostname, the IP gates' on bare_host) see an address, not a name.
    url = normalize_url(raw)
    assert bare_host(host_of(url)) == host
    hostname = urlsplit(url).hostname or ""
    assert is_ip_literal(hostname) and is_ip_literal(bare_host(host_of(url)))
    assert not is_public_address(hostname)


def test_a_public_address_in_another_spelling_is_public() -> None:
    url = normalize_url("http://134744072/")  # 8.8.8.8
    assert url == "http://8.8.8.8/"
    assert is_public_address(urlsplit(url).hostname or "")


@pytest.mark.parametrize("raw", ["http://1.2.3.4.5/", "http://09/", "http://0x100000000/", "http://1.256.0.0.1/",
                                 "http://[fe80::1%25eth0]/", "http://[::1%eth0]/", "http://[::1]]/"])
def test_what_ends_in_a_number_but_is_no_address_is_refused(raw: str) -> None:
    # A host whose last label is a number is an IPv4 address or nothing; an IPv6 zone id is refused.
    with pytest.raises(InvalidURL) as caught:
        normalize_url(raw)
    assert caught.value.reason in ("host", "port")


PLAIN_BASES = ["http://ex.test/dir/page.html?x=a/b", "https://ex.test/", "http://ex.test:8080/a/b/", "http://ex.test/dir"]


def _normalized(ref: str, base: str) -> str | None:
    try:
        return normalize_url(ref, base)
    except InvalidURL:
        return None


@pytest.mark.parametrize("base", PLAIN_BASES)
def test_the_plain_link_shortcut_answers_for_common_links_as_normalize_url_does(base: str) -> None:
    origin = origin_of(base)
    directory = directory_of(base, origin)
    common = ["/p/1", "p/1", "./1", "../p/1", "..", ".", "/", "a#s2", "../#s1", "/p/1#top",
              "http://site-1.test/p/1", "HTTP://SITE-1.TEST/", "http://site-1.test:80/p/1#s",
              "//site-1.test/p/1", "https://site-1.test", "http://site-1.test.:8080/a/./b/../c"]
    for ref in common:
        assert resolve_plain(ref, origin, directory) == normalize_url(ref, base), (ref, base)
    # What it leaves to normalize_url: None, never a different answer.
    others = ["", "#top", "?q=1", "http:p", "http:/p", "//[::1]/", "/%7Euser", "/a b", "mailto:x",
              "//x:99999/", "//", "///p", "//x..y/", "/é", "a:b", "\tx", "/" + "a" * MAX_URL_LENGTH]
    for ref in others:
        assert resolve_plain(ref, origin, directory) is None, (ref, base)


def test_the_plain_link_shortcut_never_disagrees_with_normalize_url() -> None:
    # Differential fuzzing: links built from the pieces that decide how one resolves.
    pieces = ["a", "Z", "0", "-", ".", "_", "~", "/", "//", "..", "./", ":", "#", "?", "%2e", "%",
              "@", " ", "\t", "http:", "HTTPS://", "x.test", ":80", ":8", "[", "é", "\x00", "p"]
    rng = random.Random(1)
    shortcut = 0
    for _ in range(20_000):
        ref = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))
        for base in PLAIN_BASES:
            origin = origin_of(base)
            fast = resolve_plain(ref, origin, directory_of(base, origin))
            if fast is not None:
                shortcut += 1
                assert fast == _normalized(ref, base), (ref, base)
    assert shortcut > 5_000  # the fuzzing reached the shortcut often, not only its refusals


def test_the_link_memo_never_gives_another_bases_answer() -> None:
    # Differential fuzzing of parse.links.LinkMemo: a link is remembered under the part of the
    # base its canonical form depends on by the URL Standard (backslashes, scheme-relative forms
    # and "http:x" included); bases that agree on that part and differ elsewhere share one memo.
    from crawler_node.parse.links import LinkMemo

    pieces = ["a", "/", "//", "\\", "\\\\", "..", ".", "%2e", ":", "http:", "HTTPS:", "?q", "#f", "\t", " ",
              "x.test", ":8080", "@", "é", "%7e"]
    bases = ["http://ex.test/dir/page?x=1", "http://ex.test/dir/other", "http://ex.test/dir/",
             "https://ex.test/dir/page", "http://ex.test:8080/dir/page", "http://ex.test/dir2/page",
             "http://other.test/dir/page"]
    rng = random.Random(7)
    memo = LinkMemo()
    for _ in range(5_000):
        ref = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        for base in rng.sample(bases, len(bases)):
            origin = origin_of(base)
            assert memo.normalize(ref, base, origin, directory_of(base, origin)) == _normalized(ref, base), (ref, base)
