"""A robots.txt read line by line and group by group as Google's reference parser reads it
(github.com/google/robotstxt, robots.cc), keeping only what one product token obeys.

Why this exists, in front of protego (core.robots hands protego only what this returns): the
reference's tests (tests/data/robots/) showed protego reading the file differently in four
ways, each of which made the node crawl what a site forbids or skip what it allows:

- a UTF-8 byte-order mark (written by Windows editors) before ``User-agent: *`` hid the group,
  so every rule after it applied to nobody; the reference skips a BOM, even a partial one;
- a line protego does not know (``Crawl-delay``, a typo, anything) ended the group in protego;
  RFC 9309 2.1 and 2.2.4 and the reference end a group only with a ``User-agent`` line that
  follows a rule;
- a ``User-agent`` value is its product token, the leading ``[A-Za-z_-]`` characters
  (``Googlebot/2.1`` is ``Googlebot``, ``Foo Bar`` is ``Foo``), compared whole and
  case-insensitively with the crawler's token (RFC 9309 2.2.1); protego searched the value in
  the crawler's name, so ``User-agent: crawler`` applied to ``crawler-node``;
- a line is read up to 2083 * 8 - 1 bytes and the rest dropped, as the reference does.

Matching a URL against the rules stays protego's (longest match, ``*`` and ``$``, allow on a
tie, percent-encoding normalised as RFC 9309 2.2.2 asks). What would take this further: the
same fixes in protego itself (its parser could take the grouping and the token rule upstream,
and this module would go), or the reference parser through bindings: ``fast-robotstxt``
(ctypes over robots.cc) passes Google's suite as the node does, ``jwm.robotstxt`` (pybind11)
all but the two partial-BOM cases its ``str`` API cannot carry; but their API takes the whole
file with every URL and parses it each time: on this machine, 33 µs a decision on 2.5 KiB
files and 75 µs on 29 KiB ones for fast-robotstxt, 424 and 1424 µs for jwm.robotstxt, against
10 and 17 µs for a parsed rule set here (the parse, once per file: 0.37 and 3.5 ms;
bench/robots_decide.py, docs/politeness.md). A binding that kept the parsed file would beat both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BOM = b"\xef\xbb\xbf"
MAX_LINE_BYTES = 2083 * 8 - 1  # the reference's line buffer (kMaxLineLen) less its final NUL
_LINE_ENDS = re.compile(rb"\r\n|\r|\n")
_TOKEN = re.compile(r"[A-Za-z_-]*")
_WHITESPACE = " \t\n\v\f\r"  # ASCII only, as absl::StripAsciiWhitespace
_DISALLOW_TYPOS = ("dissallow", "dissalow", "disalow", "diasllow", "disallaw")


def product_token(value: str) -> str:
    """The product token a ``User-agent`` value names: its leading letters, ``_`` and ``-``
    (the reference's ``ExtractUserAgent``: "Googlebot/2.1" and "Googlebot Images" name
    "Googlebot")."""
    match = _TOKEN.match(value)
    return match.group() if match else ""


def valid_product_token(agent: str) -> bool:
    """A crawler's product token as RFC 9309 2.2.1 defines it: letters, ``_`` and ``-`` only,
    not empty (the reference's ``IsValidUserAgentToObey``). A token that is not one matches no
    group of any robots.txt."""
    return bool(agent) and _TOKEN.fullmatch(agent) is not None


@dataclass(slots=True)
class AgentRules:
    """What one product token obeys in one robots.txt: its groups' rules (or the ``*``
    groups' when none names it), their Crawl-delay values as written, and the file's sitemaps."""

    rules: list[tuple[bool, str]] = field(default_factory=list)  # (allow, pattern) in file order
    crawl_delays: list[str] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)


def lines(body: bytes) -> list[str]:
    """The file's lines: a leading byte-order mark (or the start of one) skipped, CR, LF and
    CRLF all ending a line, each line cut at MAX_LINE_BYTES, then decoded (bytes that are not
    UTF-8 become U+FFFD, as before)."""
    skip = 0
    while skip < len(BOM) and skip < len(body) and body[skip] == BOM[skip]:
        skip += 1
    return [raw[:MAX_LINE_BYTES].decode("utf-8", "replace") for raw in _LINE_ENDS.split(body[skip:])]


def key_and_value(line: str) -> tuple[str, str] | None:
    """A line's ``key: value`` (the comment cut, whitespace stripped), or None. The colon may be
    missing when exactly two words remain ("disallow /"), as the reference accepts."""
    line = line.partition("#")[0].strip(_WHITESPACE)
    if not line:
        return None
    key, colon, value = line.partition(":")
    if not colon:
        cut = min((at for at in (line.find(" "), line.find("\t")) if at != -1), default=-1)
        if cut == -1:
            return None
        key, value = line[:cut], line[cut:].lstrip(" \t")
        if " " in value or "\t" in value:
            return None
    key = key.strip(_WHITESPACE)
    return (key.lower(), value.strip(_WHITESPACE)) if key else None


def kind_of(key: str) -> str:
    """The reference's key rule: a key that starts with a known name is that name (typos it
    accepts included); ``crawl-delay`` is the node's addition. Anything else is "other"."""
    if key.startswith(("user-agent", "useragent", "user agent")):
        return "user-agent"
    if key.startswith("allow"):
        return "allow"
    if key.startswith(("disallow", *_DISALLOW_TYPOS)):
        return "disallow"
    if key.startswith(("sitemap", "site-map")):
        return "sitemap"
    if key.startswith(("crawl-delay", "crawl delay")):
        return "crawl-delay"
    return "other"


def agent_rules(body: bytes, agent: str) -> AgentRules:
    """What ``agent`` (a product token) obeys in ``body``, group by group as the reference's
    RobotsMatcher reads it: a ``User-agent`` line after a rule starts a new group; rules go to
    the agent's own groups, else to the ``*`` groups; once any group names the agent, the ``*``
    groups do not apply (RFC 9309 2.2.1)."""
    agent = agent.lower()
    specific, wildcard, sitemaps = AgentRules(), AgentRules(), []
    named = ever_named = is_wildcard = after_rule = False
    for line in lines(body):
        pair = key_and_value(line)
        if pair is None:
            continue
        kind, value = kind_of(pair[0]), pair[1]
        if kind == "user-agent":
            if after_rule:
                named = is_wildcard = after_rule = False
            if value[:1] == "*" and (len(value) == 1 or value[1] in _WHITESPACE):
                is_wildcard = True  # "* anything" is still the global group, as in the reference
            elif product_token(value).lower() == agent:
                named = ever_named = True
        elif kind == "sitemap":
            sitemaps.append(value)
        elif kind in ("allow", "disallow") and (named or is_wildcard):
            after_rule = True
            into = specific if named else wildcard
            into.rules.append((kind == "allow", value))
            if kind == "allow":
                into.rules.extend(_index_html(value))
        elif kind == "crawl-delay" and (named or is_wildcard):
            (specific if named else wildcard).crawl_delays.append(value)
    chosen = specific if ever_named else wildcard
    return AgentRules(rules=chosen.rules, crawl_delays=chosen.crawl_delays, sitemaps=sitemaps)


def _index_html(pattern: str) -> list[tuple[bool, str]]:
    """The reference reads ``Allow: /dir/index.htm...`` as allowing ``/dir/`` too."""
    slash = pattern.rfind("/")
    if slash != -1 and pattern.startswith("/index.htm", slash):
        return [(True, pattern[: slash + 1] + "$")]
    return []
