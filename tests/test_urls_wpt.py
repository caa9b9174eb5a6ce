"""The URL Standard's own suite: web-platform-tests' urltestdata.json (tests/data/urls/README.md), its
http(s) cases, against core/urls.py.

A case whose URL is http(s) must come out as WPT's expected URL in the crawler's canonical form. That
form is built here from WPT's components (see ``_canonical``), not by the code under test: fragment,
userinfo and an empty query dropped, a trailing dot of the host dropped, and escapes of unreserved
characters decoded, the others upper-cased. A case WPT expects to fail must raise InvalidURL. The
plain-link shortcut (urls.resolve_plain) must give the same answer for every case it takes, or none.
A deliberate deviation is an entry in DEVIATIONS, run as a strict expected failure with its reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from crawler_node.core.urls import InvalidURL, directory_of, normalize_url, origin_of, resolve_plain

DATA = Path(__file__).parent / "data" / "urls" / "urltestdata.json"
REASONS = {"scheme", "too_long", "unparsable", "no_host", "host", "port"}
# A scheme the URL parser would read at the start of an input (after the C0 controls and spaces it strips).
_SCHEME = re.compile(r"[\x00-\x20]*([A-Za-z][A-Za-z0-9+.\-]*):")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# Cases where the crawler deliberately parts from the standard: (input, base) -> why.
_NOT_A_DNS_NAME = ("the crawler refuses a host that cannot be a DNS name (an empty label, or characters other than "
                   "letters, digits, '-' and '_'): no resolver finds it (core/urls.py, 'host')")
DEVIATIONS: dict[tuple[str, str | None], str] = {
    ("http://./", None): _NOT_A_DNS_NAME,
    ("http://../", None): _NOT_A_DNS_NAME,
    ("http://!\"$&'()*+,-.;=_`{}~/", None): _NOT_A_DNS_NAME,
    ("http://foo.09..", None): _NOT_A_DNS_NAME,
}


def _is_http(case: dict[str, Any]) -> bool:
    """Whether a case's URL is http(s): its expected protocol, or for a failure, the scheme its input
    names, else its base's (a relative input resolves against the base)."""
    if not case.get("failure"):
        return case["protocol"] in ("http:", "https:")
    match = _SCHEME.match(case["input"])
    if match is not None:
        return match[1].lower() in ("http", "https")
    return (case.get("base") or "").startswith(("http:", "https:"))


def _cases() -> list[Any]:
    cases = [case for case in json.loads(DATA.read_text(encoding="utf-8"))
             if isinstance(case, dict) and _is_http(case)]
    params = []
    for index, case in enumerate(cases):
        reason = DEVIATIONS.get((case["input"], case.get("base")))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(case, id=f"{index}-{case['input'][:40]!r}", marks=marks))
    return params


CASES = _cases()


def _escapes(text: str) -> str:
    def fix(match: re.Match[str]) -> str:
        char = chr(int(match[0][1:], 16))
        return char if char in _UNRESERVED else match[0].upper()
    return _ESCAPE.sub(fix, text)


def _canonical(case: dict[str, Any]) -> str:
    """WPT's expected URL in the crawler's canonical form, from its components."""
    host = case["hostname"]
    if not host.startswith("["):
        host = host.removesuffix(".")
    port = f":{case['port']}" if case["port"] else ""
    query = _escapes(case["search"]) if len(case["search"]) > 1 else ""
    return f"{case['protocol']}//{host}{port}{_escapes(case['pathname'])}{query}"


def test_the_suite_has_its_http_cases() -> None:
    # 445 in the revision of tests/data/urls/README.md; a newer one may have more, never few.
    successes = sum(1 for param in CASES if not param.values[0].get("failure"))
    assert successes >= 247 and len(CASES) - successes >= 198


@pytest.mark.parametrize("case", CASES)
def test_wpt_case(case: dict[str, Any]) -> None:
    raw, base = case["input"], case.get("base")
    if case.get("failure"):
        with pytest.raises(InvalidURL) as caught:
            normalize_url(raw, base)
        assert caught.value.reason in REASONS
        return
    expected = _canonical(case)
    assert normalize_url(raw, base) == expected
    assert normalize_url(expected) == expected  # the canonical form is a fixed point
    if base is not None and base.startswith(("http:", "https:")):
        canonical_base = normalize_url(base)
        origin = origin_of(canonical_base)
        fast = resolve_plain(raw, origin, directory_of(canonical_base, origin))
        assert fast is None or fast == expected, "the shortcut gave another answer"


@pytest.mark.parametrize("case", [param for param in CASES if param.values[0].get("failure")
                                  and (param.values[0].get("base") or "").startswith(("http:", "https:"))])
def test_wpt_failures_are_refused_by_the_shortcut_too(case: dict[str, Any]) -> None:
    canonical_base = normalize_url(case["base"])
    origin = origin_of(canonical_base)
    assert resolve_plain(case["input"], origin, directory_of(canonical_base, origin)) is None
