"""The parse stage's unit of work, run in a worker process so CPU spent on HTML (and on
sitemaps) never stalls the event loop that drives the fetches. The scope check runs here too: it is per-link CPU
work, and the node then receives only the links it will keep, each once (see ReturnedLinks)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from crawler_node.core.bounded import TwoGenerationSet
from crawler_node.core.encoding import decode_body
from crawler_node.core.outcomes import Rejection
from crawler_node.core.scope import Scope
from crawler_node.core.urls import InvalidURL, directory_of, host_of, normalize_url, origin_of, resolve_plain
from crawler_node.parse.charset import decode_document
from crawler_node.parse.links import MAX_PARSE_BYTES, LinkMemo, extract_links
from crawler_node.parse.sitemap import read_sitemap
from crawler_node.pipelines import Page
from crawler_node.pipelines.loader import load_pipelines
from crawler_node.pipelines.runner import PageOutput, PipelineRunner


class ReturnedLinks:
    """The links this worker has already handed to the node since the cluster's ring last
    changed. About six of every seven links on a page were found on an earlier page (the
    same navigation everywhere); the node would only learn again that they are duplicates,
    after unpickling them, making their frontier entries and asking its frontier.

    Handed over once is enough: the node commits every link it receives to its frontier or
    to a peer's outbox, both durable, and neither ever drops one (a frontier turns away the
    URLs of a host past its --max-pages-per-host for good, with a crawl.log line). What a node fetches moves
    only when the ring's live members change (a peer down, back, joining), and then links
    must be routed again: a new ``generation`` (the membership version) empties the memory.
    A new worker (after a crash, or a restart of the node) starts empty. Bounded (see
    core.bounded.TwoGenerationSet)."""

    def __init__(self, capacity: int = 32_768) -> None:
        self._urls = TwoGenerationSet(capacity)
        self._generation: int | None = None

    def new_generation(self, generation: int) -> None:
        if generation != self._generation:
            self._generation = generation
            self._urls.clear()

    def fresh(self, urls: list[str]) -> list[str]:
        """The ``urls`` not handed over in this generation yet, now remembered (in order; a URL
        listed twice counts once)."""
        return self._urls.add_new(urls)


@dataclass(frozen=True, slots=True)
class ParseContext:
    scope: Scope
    max_links: int
    delay_s: float = 0.0  # a test hook that stages a slow parser; zero in production
    crash_url: str = ""  # a test hook: the worker process dies on this page; empty in production
    max_parse_bytes: int = MAX_PARSE_BYTES  # links come from this much of an HTML page
    sitemap_max_urls: int = 50_000  # <loc>s read per sitemap file (sitemaps.org's limit)
    sitemap_max_bytes: int = 52_428_800  # uncompressed, per sitemap file (sitemaps.org: 50 MiB)
    outlinks: bool = False  # hand back every link of a page, for its WARC metadata record
    pipelines: PipelineRunner | None = None  # the user's pipelines, run on every HTML page
    memo: LinkMemo = field(default_factory=LinkMemo)  # this worker's, for all its pages
    returned: ReturnedLinks = field(default_factory=ReturnedLinks)
    rejected: TwoGenerationSet = field(default_factory=lambda: TwoGenerationSet(65_536))  # out of scope, logged


def new_context(*, pipeline_specs: tuple[str, ...] = (), pipeline_budget_s: float = 2.0, **options) -> ParseContext:
    """A worker's context, made in the worker: its pipelines are imported there (the specs
    travel, the callables need not pickle). The node checked the specs load before it started."""
    runner = PipelineRunner(load_pipelines(pipeline_specs), pipeline_budget_s) if pipeline_specs else None
    return ParseContext(pipelines=runner, **options)


# One page to parse: body (as received), URL, depth, and optionally the charset label of its
# Content-Type (a label, not the headers: the job is pickled), whether it is HTML (else it is
# a sitemap candidate: see FetchResult.may_be_sitemap), its Content-Encoding, only when there
# are pipelines to show the page to, its status and headers, and whether a body that is not
# XML may be a text sitemap (node.robots_txt.may_be_text_sitemap).
PageMeta = tuple[int, list[tuple[str, str]]]
ParseJob = (tuple[bytes, str, int] | tuple[bytes, str, int, str | None, bool, str | None]
            | tuple[bytes, str, int, str | None, bool, str | None, PageMeta | None]
            | tuple[bytes, str, int, str | None, bool, str | None, PageMeta | None, bool])

# What a page yields: the (url, host) of its links in scope, normalised, that this worker has
# not handed over before (see ReturnedLinks), how many links the page had in all, and (with
# ParseContext.outlinks) all of them, one per line, for the page's WARC metadata record. A
# plain tuple: it crosses the process boundary, where a tuple pickles in a fraction of a
# dataclass's time. A page with more to say returns a PageReport instead.
PageLinks = tuple[list[tuple[str, str]], int, str | None]


@dataclass(frozen=True, slots=True)
class PageReport:
    """What a page yields when it is more than an HTML page read whole: a sitemap, a page
    cut at max_parse_bytes, or a sitemap candidate that could not be read. Rare, so the
    common case keeps the plain tuple."""

    links: list[tuple[str, str]]  # as in PageLinks
    found: int
    kind: str = "page"  # "sitemap": read as one (its URLs are the links)
    truncated: str | None = None  # "bytes": the page or sitemap was cut at its size limit; "urls": at sitemap_max_urls
    error: str | None = None  # why a sitemap candidate could not be read (in whole or to its end)
    outlinks: str | None = None  # as in PageLinks
    # links out of scope with their reasons (Rejection values), new to this worker; too deep ones are not here
    rejected: list[tuple[str, str]] = field(default_factory=list)
    pipelines: PageOutput | None = None  # what the user's pipelines made of the page


def parse_page(context: ParseContext, body: bytes, url: str, depth: int, charset: str | None = None,
               html: bool = True, content_encoding: str | None = None,
               meta: PageMeta | None = None, text_sitemap: bool = False) -> PageLinks | PageReport:
    """The in-scope links of one page found at ``depth`` (see links.extract_links; for a
    sitemap, the URLs it lists: see parse.sitemap) that were not handed over before. The
    body comes as received: its Content-Encoding is undone here, no further than the parser
    reads (a gzip bomb inflates to max_parse_bytes, or a sitemap's limit, and no more)."""
    if context.delay_s:
        time.sleep(context.delay_s)
    if context.crash_url and url == context.crash_url:
        os._exit(70)  # no cleanup, no answer: what a crash in the HTML parser's C code looks like
    limit = (context.max_parse_bytes if html else context.sitemap_max_bytes) + 1  # +1: tells a cut body
    decoded = decode_body(body, content_encoding, limit)
    if decoded.error is not None:
        raise ValueError(decoded.error)
    body = decoded.body
    if not html:
        return _sitemap_links(context, body, url, depth, text_sitemap)
    page = extract_links(body, url, max_links=context.max_links, encoding=charset,
                         max_parse_bytes=context.max_parse_bytes, memo=context.memo, with_title=False)
    outlinks = "\n".join(page.links) if context.outlinks else None
    rejected: list[tuple[str, str]] = []
    output = None
    if context.pipelines is not None:
        output = _run_pipelines(context.pipelines, body, url, depth, charset, meta, page.links)
        links = _fresh_in_scope(context, _followed(page.links, output.links, url), depth, host_of(url), rejected)
    else:
        links = _fresh_in_scope(context, page.links, depth, host_of(url), rejected)
    if page.truncated or rejected or output is not None:
        return PageReport(links, len(page.links), truncated="bytes" if page.truncated else None, outlinks=outlinks,
                          pipelines=output, rejected=rejected)
    return links, len(page.links), outlinks


def _run_pipelines(runner: PipelineRunner, body: bytes, url: str, depth: int, charset: str | None,
                   meta: PageMeta | None, links: list[str]) -> PageOutput:
    # The text as the link extractor read it: the first max_parse_bytes, already decoded
    # from the Content-Encoding (parse_page's limit), in the page's charset.
    status, headers = meta if meta is not None else (200, [])
    content_type = next((value.split(";", 1)[0].strip().lower() for name, value in headers
                         if name.lower() == "content-type"), None)
    text = decode_document(body, charset).text
    return runner.run(Page(url=url, status=status, headers=headers, text=text, links=list(links), depth=depth,
                           content_type=content_type))


def _followed(links: list[str], followed: list[str], base: str) -> list[str]:
    """The page's links, then the ones its pipelines asked for (normalised; invalid ones and
    those the page has already dropped)."""
    if not followed:
        return links
    known = set(links)
    extra = [link for raw in followed if (link := _normalized_or_none(raw, base)) is not None and link not in known]
    return links + extra


def _sitemap_links(context: ParseContext, body: bytes, url: str, depth: int, text: bool) -> PageLinks | PageReport:
    """A sitemap's URLs, as links one level deeper than the sitemap: a sitemap index's are
    sitemaps, those of a urlset, a feed or a text sitemap (only with ``text``) are pages, and
    all are scoped and handed over like a page's links. What is no sitemap yields nothing."""
    sitemap = read_sitemap(body, max_urls=context.sitemap_max_urls, max_bytes=context.sitemap_max_bytes, text=text)
    if sitemap.kind is None:
        return ([], 0, None) if sitemap.error is None else PageReport([], 0, error=sitemap.error)
    origin = origin_of(url)
    directory = directory_of(url, origin)
    found: list[str] = []
    for loc in sitemap.urls:
        # A URL must be absolute (sitemaps.org); a relative one is resolved, as a link is.
        link = resolve_plain(loc, origin, directory) or _normalized_or_none(loc, url)
        if link is not None:
            found.append(link)
    rejected: list[tuple[str, str]] = []
    return PageReport(_fresh_in_scope(context, found, depth, host_of(url), rejected), len(sitemap.urls),
                      kind="sitemap", truncated=sitemap.truncated, error=sitemap.error, rejected=rejected)


def _normalized_or_none(raw: str, base: str) -> str | None:
    try:
        return normalize_url(raw, base)
    except InvalidURL:
        return None


def _fresh_in_scope(context: ParseContext, found: list[str], depth: int, source_host: str,
                    rejected: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """The links in scope not handed over before, of a page at ``depth`` on ``source_host``;
    with ``rejected``, the links out of scope (never fetched: crawl.log says so, once per
    worker, as far as its bounded memory goes) are appended to it with their reasons. A link
    too deep is not: at another depth it may be in scope."""
    # The scope first: a link out of scope at this depth may be in scope at another.
    scope = context.scope
    if scope.too_deep(depth + 1):
        return []
    in_scope, out = scope.split(found, depth + 1, source_host)
    if out and rejected is not None:
        reasons = {link: reason for link, reason in out if reason is not Rejection.TOO_DEEP}
        rejected.extend((link, reasons[link].value) for link in context.rejected.add_new(list(reasons)))
    return [(link, host_of(link)) for link in context.returned.fresh(in_scope)]


# A page's answer from the worker: its links, a report, or why it could not be parsed.
ParseAnswer = PageLinks | PageReport | str


def parse_pages(context: ParseContext, pages: list[ParseJob], generation: int = 0) -> list[ParseAnswer]:
    """Parse a batch in one round trip to the worker: crossing a process boundary costs far
    more than parsing one small page, so the parse stage sends pages in batches. A page that
    cannot be parsed yields its error message instead of failing the batch. ``generation``
    is the cluster's membership version: when it changes, links are handed over again."""
    context.returned.new_generation(generation)
    results: list[ParseAnswer] = []
    for job in pages:
        try:
            results.append(parse_page(context, *job))
        except Exception as exc:  # noqa: BLE001 - one hostile page must not sink its batch
            results.append(f"{type(exc).__name__}: {exc}")
    return results
