"""core.refusals: the classifier, table-driven over the shapes each vendor's refusal has in the
wild (headers and body fragments as the vendors document or serve them), and negatives that must
never read as a challenge: a normal 403 page, an article about captchas, a 503 for maintenance."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from crawler_node.core.backoff import NO_BACKOFF, BackoffState, HostBackoffPolicy, RetryPolicy
from crawler_node.core.limiter import Outcome
from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.refusals import (
    MARKERS,
    PAGE_GATE,
    Refusal,
    RefusalKind,
    RefusalRules,
    SoftBlockHistory,
    classify_refusal,
    small_body_digest,
)
from crawler_node.core.response import FetchResult
from crawler_node.core.robots import RobotsStatus
from crawler_node.core.signals import LatencyLevel
from crawler_node.core.verdict import (
    Pause,
    RefusalPolicy,
    ResponseRules,
    RetryAction,
    Verdict,
    judge_page,
    judge_robots,
)

RULES = RefusalRules()
ARTICLE = ("<html><head><title>News</title></head><body><article><h1>A long read</h1>"
           + "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. </p>" * 40
           + "</article></body></html>").encode()

CF_JUST_A_MOMENT = (b'<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>'
                    b'<meta http-equiv="refresh" content="390"></head><body><div class="main-wrapper">'
                    b'<noscript>Enable JavaScript and cookies to continue</noscript></div>'
                    b'<script>(function(){window._cf_chl_opt={cvId: \'3\'};var a=document.createElement(\'script\');'
                    b'a.src=\'/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1?ray=8a\';}());</script>'
                    b'</body></html>')
CF_BLOCKED = (b'<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title></head><body>'
              b'<h1>Sorry, you have been blocked</h1><h2>You are unable to access example.com</h2></body></html>')
AKAMAI = (b'<HTML><HEAD>\n<TITLE>Access Denied</TITLE>\n</HEAD><BODY>\n<H1>Access Denied</H1>\n \n'
          b'You don\'t have permission to access "http&#58;&#47;&#47;www&#46;example&#46;com&#47;" on this server.'
          b'<P>\nReference&#32;&#35;18&#46;2d351ab8&#46;1557333295&#46;a4e16ab\n</BODY>\n</HTML>\n')
AKAMAI_PLAIN = b"<html><body><h1>Access Denied</h1>Reference #18.2d351ab8.1557333295.a4e16ab</body></html>"
DATADOME = (b'<html><head><title>example.com</title></head><body style="margin:0">'
            b'<script>var dd={\'rt\':\'c\',\'cid\':\'AHrlqAAAAAMA\',\'hsh\':\'2211F522\',\'s\':17434};</script>'
            b'<script src="https://ct.captcha-delivery.com/c.js"></script>'
            b'<iframe src="https://geo.captcha-delivery.com/captcha/?initialCid=AHrl" title="DataDome CAPTCHA">'
            b'</iframe></body></html>')
INCAPSULA = (b'<html style="height:100%"><head><META NAME="ROBOTS" CONTENT="NOINDEX, NOFOLLOW">'
             b'</head><body style="margin:0px;height:100%"><iframe id="main-iframe" '
             b'src="/_Incapsula_Resource?CWUDNSAI=24&xinfo=6-1234-0%20NNNN%20RT" frameborder=0 '
             b'width="100%" height="100%">Request unsuccessful. Incapsula incident ID: 1-2</iframe></body></html>')
PERIMETERX = (b'<!DOCTYPE html><html lang="en"><head><title>Access to this page has been denied</title></head>'
              b'<body><div id="px-captcha"></div><p>Press &amp; Hold to confirm you are a human</p>'
              b'<script>window._pxAppId = \'PXu6b0qd2S\'; window._pxJsClientSrc = '
              b'\'/u6b0qd2S/init.js\';</script><script src="https://captcha.px-cdn.net/PXu6b0qd2S/captcha.js">'
              b'</script></body></html>')
PERIMETERX_BLOCK = (b'<html><head><title>Access denied</title></head><body><p>Powered by PerimeterX, Inc.</p>'
                    b'<script src="//client.perimeterx.net/PXabc/main.min.js"></script></body></html>')
RECAPTCHA = (b'<html><head><title>Are you a robot?</title><script src="https://www.google.com/recaptcha/api.js"'
             b' async defer></script></head><body><form action="/verify" method="POST">'
             b'<div class="g-recaptcha" data-sitekey="6Lc_aCMTAAAAABx7u2W0WPXnVbI_v6ZdbM6rYf16"></div>'
             b'<input type="submit" value="Continue"></form></body></html>')
HCAPTCHA = (b'<html><head><script src="https://js.hcaptcha.com/1/api.js" async defer></script></head>'
            b'<body><form method="POST"><div class="h-captcha" data-sitekey="10000000-ffff-ffff-ffff-000000000001">'
            b'</div><button>Submit</button></form></body></html>')
LOGIN_FORM = (b'<html><head><title>Sign in</title></head><body><form action="/session" method="post">'
              b'<label>Email <input type="email" name="email"></label><label>Password '
              b'<input type="password" name="password"></label><button>Sign in</button></form></body></html>')
PLAIN_403 = (b"<html><head><title>403 Forbidden</title></head><body><center><h1>403 Forbidden</h1></center>"
             b"<hr><center>nginx</center></body></html>")
CAPTCHA_ARTICLE = ARTICLE.replace(b"A long read", b"Why captcha and reCAPTCHA annoy everyone: g-recaptcha explained")
MAINTENANCE = b"<html><body><h1>Down for maintenance</h1><p>We will be back shortly.</p></body></html>"

URL = "https://www.example.com/articles/42"

POSITIVES = [
    # (name, status, headers, body, kind)
    ("cloudflare cf-mitigated", 403, [("Server", "cloudflare"), ("cf-mitigated", "challenge"),
                                      ("CF-RAY", "8a1b2c3d4e5f-AMS")], CF_JUST_A_MOMENT, RefusalKind.CHALLENGE),
    ("cloudflare just a moment, no header", 503, [("Server", "cloudflare")], CF_JUST_A_MOMENT,
     RefusalKind.CHALLENGE),
    ("cloudflare cf-mitigated on a 200 xhr", 200, [("cf-mitigated", "challenge")], b"", RefusalKind.CHALLENGE),
    ("cloudflare blocked", 403, [("Server", "cloudflare")], CF_BLOCKED, RefusalKind.CHALLENGE),
    ("akamai reference entity", 403, [("Server", "AkamaiGHost"), ("Mime-Version", "1.0")], AKAMAI,
     RefusalKind.CHALLENGE),
    ("akamai reference plain", 403, [("Server", "AkamaiGHost")], AKAMAI_PLAIN, RefusalKind.CHALLENGE),
    ("datadome captcha", 403, [("X-DataDome", "protected"), ("Set-Cookie", "datadome=abc; Max-Age=31536000")],
     DATADOME, RefusalKind.CAPTCHA),
    ("datadome header only", 403, [("x-datadome", "protected")], b"", RefusalKind.CHALLENGE),
    ("datadome cookie only", 429, [("Set-Cookie", "datadome=4~yX; Path=/; Secure")], b"blocked",
     RefusalKind.CHALLENGE),
    ("incapsula iframe on 200", 200, [("X-Iinfo", "6-12345-0 NNNN RT(1 2) q(0 -1 -1 -1) r(0 -1)")], INCAPSULA,
     RefusalKind.CHALLENGE),
    ("incapsula x-iinfo 403", 403, [("X-Iinfo", "9-1-0 NNNN")], b"<html>Request unsuccessful.</html>",
     RefusalKind.CHALLENGE),
    ("perimeterx press and hold", 403, [("Server", "nginx")], PERIMETERX, RefusalKind.CAPTCHA),
    ("perimeterx block page", 403, [], PERIMETERX_BLOCK, RefusalKind.CHALLENGE),
    ("recaptcha on an empty 200 page", 200, [("Content-Type", "text/html")], RECAPTCHA, RefusalKind.CAPTCHA),
    ("hcaptcha on an empty 200 page", 200, [], HCAPTCHA, RefusalKind.CAPTCHA),
    ("redirect to a login URL", 302, [("Location", "https://www.example.com/login?next=%2Farticles%2F42")], b"",
     RefusalKind.LOGIN_WALL),
    ("relative redirect to accounts/login", 303, [("Location", "/accounts/login/?next=/a")], b"",
     RefusalKind.LOGIN_WALL),
    ("redirect to wp-login.php", 302, [("Location", "https://blog.example/wp-login.php?redirect_to=x")], b"",
     RefusalKind.LOGIN_WALL),
    ("bare login form at a content URL", 200, [], LOGIN_FORM, RefusalKind.LOGIN_WALL),
    ("plain 401", 401, [("WWW-Authenticate", 'Basic realm="x"')], b"", RefusalKind.REFUSAL),
]

NEGATIVES = [
    # (name, status, headers, body, kind or None); none of them may be a challenge
    ("normal 403 page", 403, [("Server", "nginx")], PLAIN_403, RefusalKind.REFUSAL),
    ("403 from cloudflare without a challenge", 403, [("Server", "cloudflare")], PLAIN_403, RefusalKind.REFUSAL),
    ("article mentioning captcha", 200, [("Content-Type", "text/html")], CAPTCHA_ARTICLE, None),
    ("503 maintenance with Retry-After", 503, [("Retry-After", "120"), ("Server", "nginx")], MAINTENANCE, None),
    ("503 maintenance behind cloudflare", 503, [("Retry-After", "120"), ("Server", "cloudflare")], MAINTENANCE,
     None),
    ("a normal page", 200, [("Server", "AkamaiGHost"), ("X-Iinfo", "6-1-0 NNNN")], ARTICLE, None),
    ("datadome site, normal page", 200, [("Set-Cookie", "datadome=abc"), ("x-datadome", "protected")], ARTICLE,
     None),
    ("404 page", 404, [], b"<html><body>Not found</body></html>", None),
    ("redirect to a content page", 301, [("Location", "https://www.example.com/articles/43")], b"", None),
    ("login article", 200, [], ARTICLE.replace(b"A long read", b'Log in <input type="password">'), None),
]


@pytest.mark.parametrize(("name", "status", "headers", "body", "kind"), POSITIVES, ids=[p[0] for p in POSITIVES])
def test_each_vendor_shape_is_recognised(name: str, status: int, headers: list[tuple[str, str]], body: bytes,
                                         kind: RefusalKind) -> None:
    refusal = classify_refusal(url=URL, status=status, headers=headers, body=body, history=None, rules=RULES)
    assert refusal is not None, name
    assert refusal.kind is kind, (name, refusal)
    assert refusal.evidence and f"HTTP {status}" in refusal.evidence


@pytest.mark.parametrize(("name", "status", "headers", "body", "kind"), NEGATIVES, ids=[n[0] for n in NEGATIVES])
def test_negatives_are_never_a_challenge(name: str, status: int, headers: list[tuple[str, str]], body: bytes,
                                         kind: RefusalKind | None) -> None:
    refusal = classify_refusal(url=URL, status=status, headers=headers, body=body, history=SoftBlockHistory(),
                               rules=RULES)
    assert (refusal.kind if refusal else None) is kind, (name, refusal)


def test_the_login_page_itself_is_no_login_wall() -> None:
    for url, status, headers in [("https://ex.test/login", 200, []),
                                 ("https://ex.test/login", 302, [("Location", "/login?step=2")])]:
        assert classify_refusal(url=url, status=status, headers=headers, body=LOGIN_FORM, history=None,
                                rules=RULES) is None


def test_every_marker_has_evidence_and_a_condition() -> None:
    for marker in MARKERS:
        assert marker.evidence
        assert marker.header or marker.body, marker


def test_every_body_marker_a_page_may_carry_passes_the_gate() -> None:
    for marker in MARKERS:
        if marker.body and (not marker.statuses or any(status < 300 for status in marker.statuses)):
            assert all(any(word in needle for word in PAGE_GATE) for needle in marker.body), marker


def test_only_the_head_of_the_body_is_read() -> None:
    late = b"<html>" + b" " * 20_000 + CF_JUST_A_MOMENT
    assert classify_refusal(url=URL, status=503, headers=[("Server", "cloudflare")], body=late, history=None,
                            rules=RULES) is None


def _serve(history: SoftBlockHistory, url: str, body: bytes) -> RefusalKind | None:
    refusal = classify_refusal(url=url, status=200, headers=[], body=body, history=history, rules=RULES)
    if refusal is None:
        history.observe(url, small_body_digest(200, body, RULES), RULES)
    return refusal.kind if refusal else None


def test_soft_block_after_distinct_pages() -> None:
    history = SoftBlockHistory()
    for index in range(5):
        assert _serve(history, f"https://s.test/p{index}", f"<p>page {index}</p>".encode()) is None
    block = b"<html><body>Please slow down.</body></html>"
    kinds = [_serve(history, f"https://s.test/q{index}", block) for index in range(6)]
    assert kinds[:RULES.soft_block_urls - 1] == [None] * (RULES.soft_block_urls - 1)
    assert set(kinds[RULES.soft_block_urls - 1:]) == {RefusalKind.SOFT_BLOCK}
    # The same URL asked again does not make the run longer; a distinct page ends it.
    assert _serve(history, "https://s.test/other", b"<p>back to normal</p>") is None
    assert _serve(history, "https://s.test/q0", block) is None


def test_no_soft_block_on_a_tiny_site_or_the_same_url() -> None:
    history = SoftBlockHistory()
    same = b"<p>hello</p>"
    assert [_serve(history, f"https://t.test/{index}", same) for index in range(8)] == [None] * 8
    history = SoftBlockHistory()
    for index in range(5):
        _serve(history, f"https://u.test/p{index}", f"<p>page {index}</p>".encode())
    assert [_serve(history, "https://u.test/again", same) for _ in range(8)] == [None] * 8


def test_rules_check_themselves() -> None:
    with pytest.raises(ValueError):
        RefusalRules(soft_block_urls=0)


# --- routing: what a refusal's verdict does (core.verdict) ------------------------------------

def _rules(**policy: float) -> ResponseRules:
    backoff = HostBackoffPolicy(initial_s=60.0, cap_s=86_400.0, forgive_after_s=1_800.0, jitter=0.1,
                                rng=random.Random(3))
    return ResponseRules(retry=RetryPolicy(rng=random.Random(3)), host_backoff=HostBackoffPolicy(),
                         host_backoff_after=2, retry_after_cap_s=300.0, latency=None, through_api=False,
                         refusals=RefusalPolicy(backoff=backoff, url_budget=int(policy.get("url_budget", 3))))


@dataclass
class _Host:
    crawl_delay: float = 0.0
    throttle_streak: int = 0
    backoff: BackoffState = NO_BACKOFF
    latency: LatencyLevel | None = None


CHALLENGE = Refusal(RefusalKind.CHALLENGE, "cloudflare cf-mitigated: challenge (HTTP 403)")


def _judge(refusal: Refusal, *, now: float, backoff: BackoffState = NO_BACKOFF, url_refusals: int = 0,
           rules: ResponseRules | None = None) -> Verdict:
    return judge_page(_Host(), FetchResult(url=URL, status=403), attempt=1, in_current_round=True, now=now,
                      rules=rules or _rules(), refusal=refusal, url_refusals=url_refusals, refusal_backoff=backoff)


def test_a_challenge_cuts_the_host_pauses_it_and_keeps_the_url() -> None:
    verdict = _judge(CHALLENGE, now=1000.0)
    assert verdict.signal.outcome is FetchOutcome.BLOCKED_CHALLENGE and verdict.limiter is Outcome.THROTTLED
    assert verdict.retry is RetryAction.POSTPONE and verdict.pause is Pause.REFUSAL and verdict.refusal_incident
    assert 1054.0 <= verdict.next_eligible == verdict.retry_at <= 1066.0  # 60 s +-10%
    # Answers to requests sent before the pause began are the same incident: no doubling.
    echo = _judge(CHALLENGE, now=1001.0, backoff=verdict.refusal_backoff)
    assert not echo.refusal_incident and echo.refusal_backoff == verdict.refusal_backoff
    # After the pause, a new refusal doubles it.
    again = _judge(CHALLENGE, now=verdict.next_eligible + 1, backoff=verdict.refusal_backoff)
    assert again.refusal_incident and again.refusal_backoff.level == 2
    assert 108.0 <= again.next_eligible - (verdict.next_eligible + 1) <= 132.0


def test_the_pause_is_capped_and_forgiven_after_a_quiet_spell() -> None:
    backoff, now = NO_BACKOFF, 0.0
    for _ in range(20):
        verdict = _judge(CHALLENGE, now=now, backoff=backoff)
        backoff, now = verdict.refusal_backoff, verdict.next_eligible
        assert verdict.next_eligible - verdict.refusal_backoff.last_throttle <= 86_400.0
    assert backoff.level == 20
    forgiven = _judge(CHALLENGE, now=now + 1_801.0, backoff=backoff)
    assert forgiven.refusal_backoff.level == 1


def test_a_url_that_keeps_meeting_refusals_ends_blocked() -> None:
    captcha = Refusal(RefusalKind.CAPTCHA, "recaptcha form on an empty page (HTTP 200)")
    assert _judge(captcha, now=0.0, url_refusals=1).retry is RetryAction.POSTPONE
    last = _judge(captcha, now=0.0, url_refusals=2)
    assert (last.retry, last.signal.outcome) == (RetryAction.GIVE_UP, FetchOutcome.BLOCKED_CAPTCHA)


@pytest.mark.parametrize(("kind", "outcome"), [(RefusalKind.LOGIN_WALL, FetchOutcome.LOGIN_WALL),
                                               (RefusalKind.REFUSAL, FetchOutcome.REFUSED)])
def test_a_login_wall_or_a_plain_403_ends_the_url_without_a_pause(kind: RefusalKind, outcome: FetchOutcome) -> None:
    verdict = _judge(Refusal(kind, "x"), now=0.0)
    assert (verdict.signal.outcome, verdict.retry, verdict.pause, verdict.limiter) == (
        outcome, RetryAction.DONE, Pause.NONE, Outcome.NEUTRAL)
    assert verdict.refusal_backoff is None and verdict.next_eligible == 0.0


def test_a_challenged_robots_txt_is_asked_again_not_read_as_no_restrictions() -> None:
    answer = FetchResult(url="https://a.test/robots.txt", status=403,
                         headers=[("cf-mitigated", "challenge"), ("Server", "cloudflare")], body=CF_JUST_A_MOMENT)
    assert judge_robots(answer, now=0.0, rules=_rules()).ready  # a 403 alone: no restrictions (RFC 9309)
    refused = judge_robots(answer, now=0.0, rules=_rules(), refused=True)
    assert not refused.ready and refused.status is RobotsStatus.UNKNOWN and refused.next_eligible > 0.0


def test_one_small_page_for_a_whole_directory_is_what_the_site_is() -> None:
    # Link targets, placeholders: a directory whose URLs all get one small page never served
    # anything else. A soft block answers it where the host served different pages.
    history = SoftBlockHistory()
    for index in range(5):
        assert _serve(history, f"https://v.test/p/{index}", f"<p>page {index}</p>".encode()) is None
    target = b"<html><body>a target</body></html>"
    assert [_serve(history, f"https://v.test/t/{index}", target) for index in range(8)] == [None] * 8
    block = b"<html><body>Please slow down.</body></html>"
    kinds = [_serve(history, f"https://v.test/p/{index}", block) for index in range(5, 11)]
    assert kinds[-1] is RefusalKind.SOFT_BLOCK
