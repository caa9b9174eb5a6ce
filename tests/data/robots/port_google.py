"""Port google/robotstxt's robots_test.cc to google_robots_test.json (see README.md here).

    python tests/data/robots/port_google.py path/to/robots_test.cc > tests/data/robots/google_robots_test.json

Every ``EXPECT_TRUE/FALSE(IsUserAgentAllowed(robotstxt, agent, url))`` becomes a case read
from the C++ source itself (string literals concatenated and unescaped as the compiler does),
and every ``IsValidUserAgentToObey`` check an agent case. The few expectations that are not of
those shapes are written out below by hand, each beside the C++ it stands for:
GoogleOnly_LineTooLong (its bodies are built in a loop), and the parser-level checks
(ID_LinesNumbersAreCountedCorrectly, ID_UTF8ByteOrderMarkIsSkipped,
ID_NonStandardLineExample_Sitemap), which count directives through a parse handler the node
does not have: each is restated as decisions (or sitemaps) that fail unless the parser read the
file the way the count says. The deliberate deviations (RFC 9309 over Google's test) are in
DEVIATIONS, keyed by case id.
"""

from __future__ import annotations

import json
import re
import sys

# A case's id is "<TEST name>#<n>": the n-th expectation of that kind in that TEST (from 1).
DEVIATIONS = {
    "ID_Encoding#3": (
        "RFC 9309 2.2.2: both sides are percent-encoded before comparison, so the node encodes "
        "the URL's ツ and the allow rule matches (the node only ever asks with normalised URLs)"),
    "ID_Encoding#5": (
        "RFC 9309 2.2.2: both sides are percent-encoded before comparison, so the node encodes "
        "the URL's ツ and the allow rule matches (the node only ever asks with normalised URLs)"),
    "ID_Encoding#6": (
        "RFC 9309 2.2.2: a percent-encoded unreserved octet (%62 = b) MUST be unencoded before "
        "comparison, so /foo/bar/%62%61%7A and /foo/bar/baz are the same path; Google's test "
        "itself says this case 'should not be relied on'"),
}

_TOKEN = re.compile(r'''
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<number>[0-9]+)
  | (?P<punct>::|[^\sA-Za-z0-9_])
''', re.VERBOSE | re.DOTALL)

_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\", '"': b'"', "'": b"'", "0": b"\0"}


def unescape(literal: str) -> bytes:
    """The bytes of one C++ string literal (the source is UTF-8)."""
    out = bytearray()
    body = literal[1:-1]
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode("utf-8")
            i += 1
            continue
        kind = body[i + 1]
        if kind == "x":  # greedy, as in C++; the file only has two-digit ones
            match = re.match(r"[0-9A-Fa-f]+", body[i + 2:])
            assert match and len(match.group()) == 2, literal
            out.append(int(match.group(), 16))
            i += 2 + len(match.group())
        else:
            out += _ESCAPES[kind]
            i += 2
    return bytes(out)


def tokens(source: str) -> list[tuple[str, str, int]]:
    found = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup
        assert kind is not None
        if kind not in ("ws", "comment"):
            found.append((kind, match.group(), source.count("\n", 0, match.start()) + 1))
    return found


def text(data: bytes) -> str:
    """Bytes as JSON text: what is not UTF-8 becomes lone surrogates (Python's surrogateescape)."""
    return data.decode("utf-8", "surrogateescape")


class Reader:
    """Walks one TEST's tokens, keeping the string variables it declares."""

    def __init__(self, name: str, toks: list[tuple[str, str, int]]) -> None:
        self.name, self.toks, self.at = name, toks, 0
        self.strings: dict[str, bytes] = {}
        self.counts: dict[str, int] = {}

    def peek(self, ahead: int = 0) -> str:
        return self.toks[self.at + ahead][1] if self.at + ahead < len(self.toks) else ""

    def take(self, expected: str | None = None) -> str:
        value = self.toks[self.at][1]
        assert expected is None or value == expected, (self.name, expected, value, self.toks[self.at][2])
        self.at += 1
        return value

    def argument(self) -> bytes:
        """A string argument: literals (concatenated), a declared variable, or an empty view."""
        if self.peek() == "absl::string_view" and self.peek(1) == "(" and self.peek(2) == ")":
            self.at += 3
            return b""
        if self.toks[self.at][0] == "string":
            value = b""
            while self.at < len(self.toks) and self.toks[self.at][0] == "string":
                value += unescape(self.take())
            return value
        return self.strings[self.take()]

    def walk(self) -> tuple[list[dict], list[dict]]:
        decisions: list[dict] = []
        agents: list[dict] = []
        while self.at < len(self.toks):
            kind, value, line = self.toks[self.at]
            if value in ("absl::string_view", "std::string") and self.toks[self.at + 1][0] == "name" \
                    and self.peek(2) == "=" and self.toks[self.at + 3][0] == "string":
                name = self.toks[self.at + 1][1]
                self.at += 3
                self.strings[name] = self.argument()
            elif value in ("EXPECT_TRUE", "EXPECT_FALSE") and self.peek(2) == "IsUserAgentAllowed":
                self.at += 3
                self.take("(")
                body = self.argument()
                self.take(",")
                agent = self.argument()
                self.take(",")
                url = self.argument()
                self.take(")")
                decisions.append(self.case("", line, robotstxt=text(body), agent=text(agent), url=text(url),
                                           allowed=value == "EXPECT_TRUE"))
            elif value in ("EXPECT_TRUE", "EXPECT_FALSE") and self.peek(2) == "RobotsMatcher::IsValidUserAgentToObey":
                self.at += 3
                self.take("(")
                agent = self.argument()
                self.take(")")
                agents.append(self.case("agent", line, agent=text(agent), valid=value == "EXPECT_TRUE"))
            else:
                self.at += 1
        return decisions, agents

    def case(self, kind: str, line: int, **fields: object) -> dict:
        number = self.counts[kind] = self.counts.get(kind, 0) + 1
        case_id = f"{self.name}#{kind}{number}" if kind else f"{self.name}#{number}"
        entry: dict[str, object] = {"id": case_id, "test": self.name, "line": line, **fields}
        if case_id in DEVIATIONS:
            entry["deviation"] = DEVIATIONS[case_id]
        return entry


def line_of(source: str, needle: str, start_test: str) -> int:
    start = source.index(f"RobotsUnittest, {start_test})")
    return source.count("\n", 0, source.index(needle, start)) + 1


def line_too_long(source: str) -> list[dict]:
    """GoogleOnly_LineTooLong: a line is read up to 2083 * 8 - 1 bytes, the rest dropped. The
    long runs are written as "<a*N>" (N times the letter) so the data stays small; the test
    expands them (see README.md)."""
    max_line = 2083 * 8
    runs = []
    # longline = "/x/" + a's until len(longline) == kMaxLineLen - 3 - len("disallow: ") + 1
    a_disallow = max_line - 3 - len("disallow: ") + 1 - 3
    a_allow = max_line - 3 - len("allow: ") + 1 - 3
    test = "GoogleOnly_LineTooLong"
    first = f"user-agent: FooBot\ndisallow: /x/<a*{a_disallow}>/qux\n"
    second = (f"user-agent: FooBot\ndisallow: /\nallow: /x/<a*{a_allow}>/qux\n"
              f"allow: /x/<b*{a_allow}>/qux\n")
    checks = [
        (first, "http://foo.bar/fux", True, "EXPECT_TRUE(IsUserAgentAllowed(robotstxt, \"FooBot\", \"http://foo.bar/fux\"))"),
        (first, f"http://foo.bar/x/<a*{a_disallow}>/fux", False, 'absl::StrCat("http://foo.bar", longline, "/fux")'),
        (second, "http://foo.bar/", False, 'IsUserAgentAllowed(robotstxt, "FooBot", "http://foo.bar/"))'),
        (second, f"http://foo.bar/x/<a*{a_allow}>/qux", True, 'absl::StrCat("http://foo.bar", longline_a, "/qux")'),
        (second, f"http://foo.bar/x/<b*{a_allow}>/fux", True, 'absl::StrCat("http://foo.bar", longline_b, "/fux")'),
    ]
    for number, (body, url, allowed, needle) in enumerate(checks, 1):
        runs.append({"id": f"{test}#{number}", "test": test, "line": line_of(source, needle, test),
                     "robotstxt": body, "agent": "FooBot", "url": url, "allowed": allowed})
    return runs


# The parser-level checks, restated as decisions. Each: (test, the C++ they stand for, body,
# agent, url, allowed). "<bom>" marks where the C++ body has its byte-order-mark bytes.
_FILE = ("User-Agent: foo{eol}Allow: /some/path{eol}User-Agent: bar{eol}{eol}{eol}Disallow: /{end}")
_LINE_ENDINGS = [
    ("kUnixFile", _FILE.format(eol="\n", end="\n")),
    ("kDosFile", _FILE.format(eol="\r\n", end="\r\n")),
    ("kMacFile", _FILE.format(eol="\r", end="\r")),
    ("kNoFinalNewline", _FILE.format(eol="\n", end="")),
    ("kMixedFile", "User-Agent: foo\nAllow: /some/path\r\nUser-Agent: bar\n\r\n\nDisallow: /"),
]
# Each BOM file is the C++ one with "Disallow: /" added after it, so that whether its lines
# were read shows in a decision: "User-Agent: foo" read = /x disallowed for foo;
# "Allow: /AnyValue" read = /AnyValue allowed for foo.
_READ = [("/x", False), ("/AnyValue", True)]
_BOM = [
    ("kUtf8FileFullBOM", "\udcef\udcbb\udcbf", "User-Agent: foo\nAllow: /AnyValue\n", _READ),
    ("kUtf8FilePartial2BOM", "\udcef\udcbb", "User-Agent: foo\nAllow: /AnyValue\n", _READ),
    ("kUtf8FilePartial1BOM", "\udcef", "User-Agent: foo\nAllow: /AnyValue\n", _READ),
    # the broken BOM spoils the first line: no group, so the rules after it apply to nobody
    ("kUtf8FileBrokenBOM", "\udcef\x11\udcbf", "User-Agent: foo\nAllow: /AnyValue\n", [("/x", True)]),
    # a BOM in the middle spoils its own line: the Allow is not read
    ("kUtf8BOMSomewhereInMiddleOfFile", "", "User-Agent: foo\n\udcef\udcbb\udcbfAllow: /AnyValue\n",
     [("/AnyValue", False)]),
]


def parser_level(source: str) -> tuple[list[dict], list[dict]]:
    decisions: list[dict] = []
    test = "ID_LinesNumbersAreCountedCorrectly"
    for number, (name, body) in enumerate(_LINE_ENDINGS, 1):
        # 4 directives and the last on line 6: "Disallow: /" is read, in bar's group, and foo's
        # "Allow: /some/path" in foo's
        base = {"test": test, "line": line_of(source, f"char {name}[]", test), "robotstxt": body,
                "derived": f"{name}: EXPECT_EQ(4, valid_directives()), EXPECT_EQ(6, last_line_seen())"}
        decisions.append({"id": f"{test}#{2 * number - 1}", **base, "agent": "bar", "url": "http://foo.bar/x",
                          "allowed": False})
        decisions.append({"id": f"{test}#{2 * number}", **base, "agent": "foo", "url": "http://foo.bar/x",
                          "allowed": True})
    test = "ID_UTF8ByteOrderMarkIsSkipped"
    number = 0
    for name, prefix, body, checks in _BOM:
        for path, allowed in checks:
            number += 1
            decisions.append({
                "id": f"{test}#{number}", "test": test, "line": line_of(source, f"char {name}[]", test),
                "robotstxt": prefix + body + "Disallow: /\n", "agent": "foo", "url": f"http://foo.bar{path}",
                "allowed": allowed,
                "derived": f"{name} with 'Disallow: /' appended: the directive counts of the C++ test, as decisions"})
    test = "ID_NonStandardLineExample_Sitemap"
    group = "User-Agent: foo\nAllow: /some/path\nUser-Agent: bar\n\n\n"
    sitemap = "http://foo.bar/sitemap.xml"
    sitemaps = [
        {"id": f"{test}#1", "test": test, "line": line_of(source, "EXPECT_EQ(sitemap_loc", test),
         "robotstxt": f"{group}Sitemap: {sitemap}\n", "sitemaps": [sitemap]},
        {"id": f"{test}#2", "test": test, "line": line_of(source, "A sitemap line may appear anywhere", test),
         "robotstxt": f"Sitemap: {sitemap}\n{group}", "sitemaps": [sitemap]},
    ]
    return decisions, sitemaps


def main() -> None:
    source = open(sys.argv[1], encoding="utf-8").read()
    starts = [(match.group(1), match.start()) for match in re.finditer(r"TEST\(RobotsUnittest, (\w+)\)", source)]
    decisions: list[dict] = []
    agents: list[dict] = []
    for index, (name, start) in enumerate(starts):
        end = starts[index + 1][1] if index + 1 < len(starts) else len(source)
        if name == "GoogleOnly_LineTooLong":
            decisions += line_too_long(source)
            continue
        toks = tokens(source[:end])
        first = next(i for i, tok in enumerate(toks) if tok[2] >= source.count("\n", 0, start) + 1)
        found, valid = Reader(name, toks[first:]).walk()
        decisions += found
        agents += valid
    derived, sitemaps = parser_level(source)
    missing = set(DEVIATIONS) - {case["id"] for case in decisions}
    assert not missing, missing
    # One case a line: the file reads (and diffs) case by case.
    sections = {"decisions": decisions, "agents": agents, "parser_level": derived, "sitemaps": sitemaps}
    out = ",\n".join(f' "{name}": [\n' + ",\n".join("  " + json.dumps(case) for case in cases) + "\n ]"
                     for name, cases in sections.items())
    sys.stdout.write("{\n" + out + "\n}\n")


if __name__ == "__main__":
    main()
