"""Whether an answer is the site refusing the crawler, not the page (issue 47).

Pure: a response's status, headers and the first bytes of its (decoded) body, plus a small
per-host history, in; ``None`` or a :class:`Refusal` with its evidence out. The kinds are named
for what the node does with them (node.hosts, core.verdict):

- ``challenge``, ``captcha``, ``soft_block``: the site is fighting the crawler. The host's own
  limiter is halved, the host pauses, the URL goes back to its queue with its budget untouched.
- ``login_wall``, ``refusal`` (a 401/403 with no marker): the URL ends with its own outcome;
  the host's health counts it, nothing pauses.

We only detect and back off: no identity rotation, no challenge solving.

Every marker is one line of :data:`MARKERS`, with a comment naming where it comes from, so that
a new one is one line. The first entry that matches wins; vendor markers come before the
generic ones.
"""

from __future__ import annotations

import enum
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

ANY_STATUS: frozenset[int] = frozenset()
_BLOCK = frozenset({401, 403, 429, 503})  # the statuses a vendor's block or challenge page comes with
_FORBIDDEN = frozenset({403})
_REDIRECT = frozenset({301, 302, 303, 307, 308})


class RefusalKind(enum.StrEnum):
    CHALLENGE = "challenge"  # a bot-management interstitial (JavaScript challenge, block page)
    CAPTCHA = "captcha"  # a page that is only a captcha
    LOGIN_WALL = "login_wall"  # content behind a login (a redirect to a login URL, a bare login form)
    SOFT_BLOCK = "soft_block"  # the same small page for every URL, after distinct pages were served
    REFUSAL = "refusal"  # a 401/403 with no marker: forbidden, nothing more is known

    @property
    def pauses(self) -> bool:
        """The site fights the crawler: back off the host, keep the URL for later."""
        return self in _PAUSING


_PAUSING = frozenset({RefusalKind.CHALLENGE, RefusalKind.CAPTCHA, RefusalKind.SOFT_BLOCK})


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: RefusalKind
    evidence: str  # what matched, for crawl.log, the WARC annotation and the host's reasons


@dataclass(frozen=True, slots=True)
class Marker:
    """One recognisable refusal: every condition given must hold."""

    kind: RefusalKind
    evidence: str
    statuses: frozenset[int] = ANY_STATUS  # empty: any status
    header: str | None = None  # a response header (lower-case name) that must be present ...
    header_re: re.Pattern[str] | None = None  # ... and whose (lower-cased) value must match this
    body: tuple[bytes, ...] = ()  # any of these (lower-case) in the body's head
    empty_page: bool = False  # and the page has almost no text besides


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# A path that asks for credentials (a redirect of a content URL to one is a login wall).
LOGIN_PATH = _re(r"(^|/)(log-?in|sign-?in|sign_in|signon|sso|auth|authenticate|session/new|wp-login\.php"
                 r"|accounts?/login|users/sign_in)([/?.#]|$)")

MARKERS: tuple[Marker, ...] = (
    # Cloudflare: every challenge response carries "cf-mitigated: challenge"
    # (developers.cloudflare.com/cloudflare-challenges/challenge-types/challenge-pages/detect-response)
    Marker(RefusalKind.CHALLENGE, "cloudflare cf-mitigated: challenge", header="cf-mitigated",
           header_re=_re("challenge")),
    # Cloudflare: the interstitial "<title>Just a moment...</title>", loading /cdn-cgi/challenge-platform
    # from challenges.cloudflare.com (403/503 with "server: cloudflare"; seen on any CF-fronted site)
    Marker(RefusalKind.CHALLENGE, "cloudflare challenge page", statuses=_BLOCK, header="server",
           header_re=_re("cloudflare"),
           body=(b"<title>just a moment", b"challenges.cloudflare.com", b"/cdn-cgi/challenge-platform/")),
    # Cloudflare WAF/bot block: "Attention Required! | Cloudflare" / "Sorry, you have been blocked" (1020)
    Marker(RefusalKind.CHALLENGE, "cloudflare block page", statuses=_BLOCK, header="server",
           header_re=_re("cloudflare"), body=(b"attention required! | cloudflare", b"you have been blocked")),
    # Akamai Bot Manager / Edge: "Access Denied ... Reference #18.xxxx" from "server: AkamaiGHost"
    Marker(RefusalKind.CHALLENGE, "akamai access denied (reference #)", statuses=_BLOCK, header="server",
           header_re=_re("akamaighost"), body=(b"reference &#35;", b"reference&#32;&#35;", b"reference #")),
    # DataDome: the captcha page loads from geo.captcha-delivery.com (docs.datadome.co, "captcha page")
    Marker(RefusalKind.CAPTCHA, "datadome captcha (captcha-delivery.com)", body=(b"captcha-delivery.com",)),
    # DataDome: a blocked response carries "x-datadome: protected" (the header on a 403/429)
    Marker(RefusalKind.CHALLENGE, "datadome x-datadome", statuses=_BLOCK, header="x-datadome"),
    # DataDome: the "datadome=" cookie set by a blocked response
    Marker(RefusalKind.CHALLENGE, "datadome cookie", statuses=_BLOCK, header="set-cookie",
           header_re=_re(r"(^|[\s,;])datadome=")),
    # Imperva/Incapsula: the challenge iframe loads "/_Incapsula_Resource?..." (often with a 200)
    Marker(RefusalKind.CHALLENGE, "incapsula _Incapsula_Resource", body=(b"_incapsula_resource",)),
    # Imperva/Incapsula: "x-iinfo" is on every response of an Incapsula site; a 403 with it is theirs
    Marker(RefusalKind.CHALLENGE, "incapsula x-iinfo on 403", statuses=_FORBIDDEN, header="x-iinfo"),
    # PerimeterX/HUMAN: the "Press & Hold" page: <div id="px-captcha">, window._pxCaptcha...
    Marker(RefusalKind.CAPTCHA, "perimeterx px-captcha", body=(b"px-captcha", b"_pxcaptcha")),
    # PerimeterX/HUMAN: a block page naming them (client.perimeterx.net, captcha.px-cdn.net)
    Marker(RefusalKind.CHALLENGE, "perimeterx block page", statuses=_BLOCK,
           body=(b"perimeterx", b"px-cdn.net", b"px-cloud.net")),
    # reCAPTCHA (developers.google.com/recaptcha: class="g-recaptcha", recaptcha/api.js) alone on a page
    Marker(RefusalKind.CAPTCHA, "recaptcha form on an empty page", empty_page=True,
           body=(b"g-recaptcha", b"google.com/recaptcha/", b"recaptcha.net/recaptcha/")),
    # hCaptcha (docs.hcaptcha.com: class="h-captcha", js.hcaptcha.com/1/api.js) alone on a page
    Marker(RefusalKind.CAPTCHA, "hcaptcha form on an empty page", empty_page=True,
           body=(b"h-captcha", b"hcaptcha.com/1/api.js")),
    # A content URL redirected to a login URL (Location: /login?next=..., /accounts/login, wp-login.php)
    Marker(RefusalKind.LOGIN_WALL, "redirect to a login URL", statuses=_REDIRECT, header="location",
           header_re=LOGIN_PATH),
    # A bare login form (a password field) on a page with almost nothing else, at a content URL
    Marker(RefusalKind.LOGIN_WALL, "login form on an empty page", statuses=frozenset({200, 401, 403}),
           empty_page=True, body=(b'type="password"', b"type=password", b"type='password'")),
)

# Every body marker a 2xx answer may match contains one of these (checked by a test).
PAGE_GATE = (b"captcha", b"incapsula", b"password")
PAGE_GATE_BYTES = 4096
# The header names some marker reads: only these are gathered from a response.
_MARKER_HEADERS = frozenset(marker.header for marker in MARKERS if marker.header)
_TAG = re.compile(rb"<script\b.*?</script\s*>|<style\b.*?</style\s*>|<[^>]*>|&[#a-z0-9]+;", re.S)


@dataclass(frozen=True, slots=True)
class RefusalRules:
    body_head_bytes: int = 16_384  # how much of a body is looked at
    # A 2xx body larger than this is a page, not an interstitial (those are a few KiB), and its
    # body is not searched: most answers cost a header scan only.
    interstitial_bytes: int = 32_768
    empty_page_chars: int = 400  # a page with fewer visible characters is "otherwise empty"
    soft_block_bytes: int = 8_192  # a body this small may be a soft block's one page
    soft_block_urls: int = 4  # distinct URLs answered with the same small page in a row
    soft_block_after_pages: int = 3  # distinct pages the host served before (else: a tiny site)

    def __post_init__(self) -> None:
        if min(self.body_head_bytes, self.interstitial_bytes, self.soft_block_bytes, self.soft_block_urls) < 1:
            raise ValueError("body_head_bytes, interstitial_bytes, soft_block_bytes and soft_block_urls must be >= 1")
        if self.empty_page_chars < 0 or self.soft_block_after_pages < 0:
            raise ValueError("empty_page_chars and soft_block_after_pages must be >= 0")


@dataclass(slots=True)
class SoftBlockHistory:
    """One host's recent small pages: the current run of one digest over distinct URLs, how
    many distinct pages came before it, and which directories (a URL up to its last ``/``) have
    served different pages. A run counts only URLs of such directories: a soft block answers
    the one page where the host served several, while a directory whose URLs all get the same
    small page (link targets, placeholders) is what the site is. Owned by the host's state;
    ``observe`` after each 200 that is no refusal."""

    run_digest: bytes | None = None
    run_urls: set[str] = field(default_factory=set)
    pages_before: int = 0  # distinct pages served before the current run (capped)
    # directory -> the last small digest it served (None: it served different pages)
    directories: dict[str, bytes | None] = field(default_factory=dict)

    def observe(self, url: str, digest: bytes | None, rules: RefusalRules) -> None:
        """``digest``: the small body's (see :func:`small_body_digest`), None for any other page."""
        directory = _directory(url)
        known = self.directories.get(directory, _UNSEEN)
        if known is _UNSEEN:
            if len(self.directories) < _DIRECTORIES_KEPT:
                self.directories[directory] = digest
        elif known is not None and known != digest:
            self.directories[directory] = None
        if digest is not None and digest == self.run_digest:
            if len(self.run_urls) < 4 * rules.soft_block_urls:  # enough to judge; bounded
                self.run_urls.add(url)
            return
        if self.run_digest is not None:
            self.pages_before += 1  # the run ended: its page was one distinct page
        if digest is None:
            self.pages_before += 1  # a larger page: distinct by its size alone
        self.pages_before = min(self.pages_before, 1_000)
        self.run_digest, self.run_urls = digest, ({url} if digest is not None else set())

    def same_page_urls(self, url: str, digest: bytes) -> int:
        """Distinct URLs of the run this page would extend (itself included), of directories
        that served different pages before."""
        if digest != self.run_digest:
            return 1
        varied = self.directories
        count = sum(1 for seen in self.run_urls if varied.get(_directory(seen), _UNSEEN) is None)
        return count + (url not in self.run_urls and varied.get(_directory(url), _UNSEEN) is None)


_UNSEEN = b"unseen"  # a sentinel no digest equals (digests are 8 bytes)
_DIRECTORIES_KEPT = 512


def _directory(url: str) -> str:
    return url.partition("?")[0].rpartition("/")[0]


def small_body_digest(status: int | None, body: bytes, rules: RefusalRules) -> bytes | None:
    """The digest a soft block is recognised by: of a whole 200 body under the size limit. Its
    length and CRC-32: it tells a handful of one host's recent pages apart (a collision costs
    one URL a pause, never the page), at a fifth of blake2b's cost."""
    if status != 200 or len(body) > rules.soft_block_bytes:
        return None
    return len(body).to_bytes(4, "big") + zlib.crc32(body).to_bytes(4, "big")


def classify_refusal(*, url: str, status: int | None, headers: Sequence[tuple[str, str]], body: bytes,
                     history: SoftBlockHistory | None, rules: RefusalRules) -> Refusal | None:
    """``body``: the decoded body (only its first ``rules.body_head_bytes`` are read); ``history``
    None: no soft-block judgment. A response with no status (a network error) is never one."""
    if status is None:
        return None
    found: dict[str, str] = {}
    for name, value in headers:
        lowered = name.lower()
        if lowered in _MARKER_HEADERS:
            found[lowered] = f"{found[lowered]}, {value.lower()}" if lowered in found else value.lower()
    head = b""  # empty: no body marker can match, none is looked for
    if status >= 300:
        head = body[:rules.body_head_bytes].lower()
    elif len(body) <= rules.interstitial_bytes:
        # Most answers are pages: three searches of their start say whether any marker a 2xx
        # may carry can be there at all (tests/test_refusals.py checks each such marker has one
        # of them); an interstitial names its captcha, iframe or form early.
        if any(word in body[:PAGE_GATE_BYTES].lower() for word in PAGE_GATE):
            head = body[:rules.body_head_bytes].lower()
    login_url = LOGIN_PATH.search(_path_of(url)) is not None
    empty: bool | None = None  # worked out only when a marker asks
    for marker in MARKERS:
        if marker.statuses and status not in marker.statuses:
            continue
        if marker.header is not None:
            header_value = found.get(marker.header)
            if header_value is None or (marker.header_re is not None and not marker.header_re.search(
                    _path_of(header_value) if marker.header == "location" else header_value)):
                continue
        if marker.body:
            if not head:
                continue
            needle = next((needle for needle in marker.body if needle in head), None)
            if needle is None:
                continue
        if marker.kind is RefusalKind.LOGIN_WALL and login_url:
            continue  # the login page itself, or its own redirect
        if marker.empty_page:
            if empty is None:
                empty = _visible_chars(head) < rules.empty_page_chars
            if not empty:
                continue
        return Refusal(marker.kind, _evidence(marker, status))
    if status in (401, 403):
        return Refusal(RefusalKind.REFUSAL, f"HTTP {status} with no marker")
    if history is not None and status == 200:
        digest = small_body_digest(status, body, rules)
        if digest is not None and history.pages_before >= rules.soft_block_after_pages:
            same = history.same_page_urls(url, digest)
            if same >= rules.soft_block_urls:
                return Refusal(RefusalKind.SOFT_BLOCK,
                               f"the same {len(body)}-byte page for {same} distinct URLs ({digest.hex()[:12]})")
    return None


def _evidence(marker: Marker, status: int) -> str:
    return f"{marker.evidence} (HTTP {status})"


def _path_of(url: str) -> str:
    """The path and query of a URL or a (possibly relative) Location, lower-cased."""
    rest = url.split("://", 1)[1] if "://" in url else url
    if "://" in url or rest.startswith("//"):
        rest = rest.lstrip("/")
        slash = rest.find("/")
        rest = rest[slash:] if slash >= 0 else "/"
    return rest.lower()


def _visible_chars(head: bytes) -> int:
    """Characters of text left once tags, scripts, styles and entities are taken out."""
    return len(b"".join(_TAG.sub(b" ", head).split()))
