"""The refusals a synthetic host can answer with instead of its page (issue 47): the shapes the
crawler's classifier (core.refusals) must recognise, served by the profile keys

    challenge_rps     a Cloudflare-style challenge (403, cf-mitigated: challenge, "Just a moment...")
                      once the host sees more than this many requests in one second, for refusal_for_s
    captcha           this fraction of page URLs (the same ones every time) answer a reCAPTCHA page
    login_wall        this fraction of page URLs redirect to /login?next=...
    soft_block_after  after this many pages, every URL answers the same small page for refusal_for_s
    forbidden         this fraction of page URLs answer a plain 403 with no marker
    refusal_for_s     how long a triggered challenge or soft block lasts (then the site recovers)

Which URLs are refused is decided by the URL (a hash), not by a draw, so a retry meets the same
answer. State per host is a few numbers, kept on the host's runtime record.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

from crawler_node.testweb.profile import HostProfile

CHALLENGE_BODY = (b'<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title></head><body>'
                  b'<noscript>Enable JavaScript and cookies to continue</noscript><script>'
                  b'window._cf_chl_opt={cType:"managed"};</script>'
                  b'<script src="/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1"></script></body></html>')
CAPTCHA_BODY = (b'<html><head><title>Are you a robot?</title>'
                b'<script src="https://www.google.com/recaptcha/api.js" async defer></script></head><body>'
                b'<form method="POST" action="/verify"><div class="g-recaptcha" data-sitekey="testweb"></div>'
                b'<input type="submit" value="Continue"></form></body></html>')
SOFT_BLOCK_BODY = b"<html><body><p>Service temporarily limited.</p></body></html>"
FORBIDDEN_BODY = b"<html><head><title>403 Forbidden</title></head><body><h1>403 Forbidden</h1></body></html>"
KINDS = ("challenge", "captcha", "login_wall", "soft_block", "forbidden")


@dataclass(frozen=True, slots=True)
class RefusalAnswer:
    kind: str  # one of KINDS: what testweb's stats count it as
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class RefusalState:
    """One host's refusal bookkeeping (testweb's monotonic clock)."""

    recent: deque[float] = field(default_factory=deque)  # request times within the last second
    challenge_until: float = 0.0
    pages_served: int = 0
    soft_block_until: float | None = None  # None: not triggered yet


def refuses(profile: HostProfile) -> bool:
    return bool(profile.challenge_rps or profile.captcha or profile.login_wall or profile.soft_block_after
                or profile.forbidden)


def answer(profile: HostProfile, state: RefusalState, *, host: str, path: str, now: float) -> RefusalAnswer | None:
    """The refusal this page request gets, or None for the page itself."""
    if profile.challenge_rps:
        recent = state.recent
        recent.append(now)
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        if len(recent) > profile.challenge_rps and now >= state.challenge_until:
            state.challenge_until = now + profile.refusal_for_s
        if now < state.challenge_until:
            return RefusalAnswer("challenge", 403, {"Server": "cloudflare", "cf-mitigated": "challenge",
                                                    "Content-Type": "text/html"}, CHALLENGE_BODY)
    if profile.forbidden and _chosen(host, path, "forbidden", profile.forbidden):
        return RefusalAnswer("forbidden", 403, {"Content-Type": "text/html"}, FORBIDDEN_BODY)
    if profile.login_wall and _chosen(host, path, "login", profile.login_wall):
        return RefusalAnswer("login_wall", 302, {"Location": f"/login?next={path}"}, b"")
    if profile.captcha and _chosen(host, path, "captcha", profile.captcha):
        return RefusalAnswer("captcha", 200, {"Content-Type": "text/html"}, CAPTCHA_BODY)
    if profile.soft_block_after:
        if state.soft_block_until is None and state.pages_served >= profile.soft_block_after:
            state.soft_block_until = now + profile.refusal_for_s
        if state.soft_block_until is not None and now < state.soft_block_until:
            return RefusalAnswer("soft_block", 200, {"Content-Type": "text/html"}, SOFT_BLOCK_BODY)
    state.pages_served += 1
    return None


def _chosen(host: str, path: str, salt: str, fraction: float) -> bool:
    """The same URLs every time: a hash of the URL against the fraction."""
    return zlib.crc32(f"{salt}|{host}|{path}".encode()) / 0xFFFFFFFF < fraction
