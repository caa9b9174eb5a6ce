"""The synthetic web's link graph: pure and deterministic from a seed (the bytes: `pages`).

Every decision is drawn from a `random.Random` seeded by a string naming the seed, the host and
the page, so a page's bytes never depend on the order in which pages are requested, and two
processes with the same seed serve byte-identical pages. No I/O happens here.

Layout of one host (P pages): `/` and `/p/1` … `/p/{P-1}`, plus `/img/0.png` … (small PNGs).
Each page `i >= 1` hangs under a parent page chosen among the earlier non-redirecting pages, so
a spanning tree makes every page reachable from `/`; extra random links are added on top.
With `tree_only`, a host is its spanning tree and nothing more: every page but `/` is linked
from exactly one page (its parent), no page links back to `/` or to another host, so a URL a
crawler loses is never found again (the web for testing what a crawler can lose).
Optional features: redirecting pages and the `/loop/a` <-> `/loop/b` loop, the `/calendar/`
spider trap, the `/trap/redirect/x` redirect trap (each hop's path one `/x` longer, so no two
URLs of the chain are alike), the `/bomb` gzip bomb, robots.txt rules (evaluated with protego),
`duplicates` pairs `/dup/K/a` and `/dup/K/b` (linked from `/`, the same bytes at both URLs, linking
only to `/` and to each other), `changing` pages (a fraction of the `/p/N` pages, picked by
`is_changing`, whose bytes the server makes differ on every visit), and `sitemaps`: for each
format F of them, robots.txt names `/sitemap.F`, which lists the pages `/listed/F/0` ...
(`LISTED_PAGES` of them, linked from no page; each links only to `/`).

Links are written in many spellings (relative, `../`, root-relative, absolute, upper-case
scheme and host, explicit `:80`, scheme-relative, `#fragment`, under a `<base href>`), while the
ground truth always uses the canonical form `http://site-1.test/p/3`.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from protego import Protego

from crawler_node.testweb import url_shapes
from crawler_node.testweb.pages import pad, render_html, render_sitemap, tiny_png, words

ROBOTS_AGENT = "crawler-node"
IMAGES_PER_HOST = 3  # the default; `images=` picks 0 to MAX_IMAGES_PER_HOST
MAX_IMAGES_PER_HOST = 10  # image paths are /img/0.png ... /img/9.png
TRAP_ENTRY = "/calendar/2026/01"
REDIRECT_TRAP_ENTRY = "/trap/redirect/x"
# Hops of the redirect trap before its chain ends in a 404: a crawler without a hop limit
# spends this many fetches on it (about what the real site of issue 13 cost: 202).
REDIRECT_TRAP_HOPS = 250
# Pairs of duplicate pages a host can have: each pair is two links on the root page.
MAX_DUPLICATES = 1000
# The sitemap formats a host can serve (`sitemaps`), each also gzip'd as "F.gz", and the pages
# each sitemap lists (reachable through it alone).
SITEMAP_FORMATS = ("xml", "txt", "rss", "atom")
LISTED_PAGES = 3

_PAGE_PATH = re.compile(r"/p/([1-9][0-9]{0,8})")
_IMAGE_PATH = re.compile(r"/img/([0-9])\.png")
_DUPLICATE_PATH = re.compile(r"/dup/(0|[1-9][0-9]{0,3})/[ab]")
_SITEMAP_PATH = re.compile(r"/sitemap\.([a-z]+(?:\.gz)?)")
_LISTED_PATH = re.compile(r"/listed/([a-z]+(?:\.gz)?)/([0-9])")
_REDIRECT_TRAP_PATH = re.compile(r"/trap/redirect((?:/x)+)")
_CALENDAR_PATH = re.compile(
    r"/calendar/([12][0-9]{3})/(0[1-9]|1[0-2])(?:/(0[1-9]|1[0-9]|2[0-8]))?"
)


@dataclass(frozen=True, slots=True)
class HostFeatures:
    """The parts of a host's profile that change its graph (not its timing)."""

    redirects: float = 0.0
    trap: bool = False
    redirect_trap: bool = False
    gzip_bomb: bool = False
    page_bytes: int | None = None
    robots: str | None = None
    duplicates: int = 0  # pairs /dup/K/a, /dup/K/b for K < duplicates
    changing: float = 0.0  # fraction of /p/N pages that change on every visit (is_changing)
    sitemaps: tuple[str, ...] = ()  # formats of /sitemap.F, named by robots.txt (SITEMAP_FORMATS, or F.gz)
    url_shapes: bool = False  # / also links to /shapes/ and /shapes/legacy (see testweb.url_shapes)


@dataclass(frozen=True, slots=True)
class Resource:
    """What lives at a path: kind is page, image, redirect, calendar, bomb, duplicate, sitemap
    (`format` says which) or listed (a page only a sitemap lists)."""

    kind: str
    index: int = 0
    status: int = 200
    location: str | None = None  # canonical absolute URL, for redirects
    format: str = ""  # a sitemap's or a listed page's sitemap format


@dataclass(slots=True)
class _HostLayout:
    redirects: dict[int, tuple[int, int]]  # page -> (status, target page)
    same_links: list[list[str]]  # per page: same-host target paths, in page order
    cross_links: list[list[tuple[str, str]]]  # per page: (host, path) on other hosts
    filler: str = field(repr=False, default="")


class SyntheticWeb:
    """The whole synthetic web: which resources exist, what links where, and page bytes."""

    def __init__(
        self,
        *,
        hosts: Sequence[str],
        pages: int,
        seed: int,
        cross_link_prob: float = 0.2,
        images: int = IMAGES_PER_HOST,
        features: Mapping[str, HostFeatures] | None = None,
        tree_only: bool = False,
    ) -> None:
        """`tree_only`: only the spanning tree's links (see the module's docstring); the
        features that link outside it (redirects, traps, duplicates) are refused with it."""
        if pages < 1:
            raise ValueError(f"pages must be >= 1, got {pages}")
        if not 0 <= images <= MAX_IMAGES_PER_HOST:
            raise ValueError(f"images must be between 0 and {MAX_IMAGES_PER_HOST}, got {images}")
        if not 0.0 <= cross_link_prob <= 1.0:
            raise ValueError(f"cross_link_prob must be between 0 and 1, got {cross_link_prob}")
        if len(set(hosts)) != len(hosts):
            raise ValueError("host names must be unique")
        self.hosts: tuple[str, ...] = tuple(hosts)
        self.pages = pages
        self.seed = seed
        self.cross_link_prob = cross_link_prob
        self.images = images
        # host -> its position in `hosts`: a cross-host link is drawn as an index, in O(1).
        self._host_index = {host: position for position, host in enumerate(self.hosts)}
        self._features = {h: (features or {}).get(h, HostFeatures()) for h in self.hosts}
        if tree_only:
            off_tree = sorted(host for host, f in self._features.items()
                              if f.redirects or f.trap or f.redirect_trap or f.duplicates or f.sitemaps)
            if off_tree:
                raise ValueError(f"tree_only: {off_tree[0]} has redirects, a trap, duplicates or sitemaps,"
                                 " which link outside the spanning tree")
        self.tree_only = tree_only
        self._layouts: dict[str, _HostLayout] = {}

    def has_host(self, host: str) -> bool:
        return host in self._host_index

    def features(self, host: str) -> HostFeatures:
        return self._features[host]

    # --- structure ---------------------------------------------------------------------------

    def resolve(self, host: str, path: str) -> Resource | None:
        """The resource at `path` of a known host, or None (404)."""
        features = self._features[host]
        if path == "/":
            return Resource("page", 0)
        if match := _PAGE_PATH.fullmatch(path):
            index = int(match.group(1))
            if index >= self.pages:
                return None
            redirect = self._layout(host).redirects.get(index)
            if redirect is not None:
                status, target = redirect
                return Resource("redirect", index, status, self._url(host, _page_path(target)))
            return Resource("page", index)
        if match := _IMAGE_PATH.fullmatch(path):
            index = int(match.group(1))
            return Resource("image", index) if index < self.images else None
        if features.redirects > 0 and path in ("/loop/a", "/loop/b"):
            other = "/loop/b" if path == "/loop/a" else "/loop/a"
            return Resource("redirect", 0, 302, self._url(host, other))
        if features.trap and _CALENDAR_PATH.fullmatch(path):
            return Resource("calendar")
        if features.redirect_trap and (match := _REDIRECT_TRAP_PATH.fullmatch(path)):
            hop = len(match.group(1)) // 2  # /x per hop: the entry is hop 1
            if hop >= REDIRECT_TRAP_HOPS:
                return None
            return Resource("redirect", hop, 302, self._url(host, path + "/x"))
        if features.gzip_bomb and path == "/bomb":
            return Resource("bomb")
        if features.duplicates and (match := _DUPLICATE_PATH.fullmatch(path)):
            index = int(match.group(1))
            return Resource("duplicate", index) if index < features.duplicates else None
        if features.sitemaps:
            if (match := _SITEMAP_PATH.fullmatch(path)) and match.group(1) in features.sitemaps:
                return Resource("sitemap", format=match.group(1))
            if (match := _LISTED_PATH.fullmatch(path)) and match.group(1) in features.sitemaps:
                index = int(match.group(2))
                return Resource("listed", index, format=match.group(1)) if index < LISTED_PAGES else None
        if features.url_shapes and (kind := url_shapes.kind_of(path)):
            return Resource(kind)
        return None

    def robots_txt(self, host: str) -> str | None:
        """The host's robots.txt: its profile's, and a Sitemap line for each of its sitemaps
        (after an allow-all group when the profile has none); None: 404."""
        features = self._features[host]
        if not features.sitemaps:
            return features.robots
        lines = "".join(f"Sitemap: {self._url(host, '/sitemap.' + name)}\n" for name in features.sitemaps)
        rules = features.robots if features.robots is not None else "User-agent: *\nDisallow:\n"
        return f"{rules.rstrip()}\n\n{lines}"

    def sitemap(self, host: str, path: str) -> bytes:
        """The bytes of the sitemap at `path` (a `sitemap` resource): the URLs of its listed pages."""
        resource = self.resolve(host, path)
        if resource is None or resource.kind != "sitemap":
            raise KeyError(f"no sitemap at http://{host}{path}")
        return render_sitemap(resource.format, self.links(host, path))

    def changes(self, host: str, path: str) -> bool:
        """Whether the page at `path` differs on every visit: a `/p/N` page (not a redirect)
        that `is_changing` picks for the host's `changing` fraction."""
        fraction = self._features[host].changing
        if not fraction or not is_changing(path, fraction):
            return False
        resource = self.resolve(host, path)
        return resource is not None and resource.kind == "page"

    def changing_urls(self, urls: Iterable[str]) -> list[str]:
        """Those of `urls` (canonical, e.g. `expected_urls()`) whose page changes on every visit."""
        return [url for url in urls if self.changes(*_split(url))]

    def links(self, host: str, path: str) -> list[str]:
        """Canonical URLs an HTML resource links to (empty for anything else)."""
        return [self._url(h, p) for h, p in self._link_targets(host, path)]

    def expected_urls(self) -> list[str]:
        """Every URL reachable from the host roots by links and redirects, minus robots-
        disallowed URLs and the spider traps (calendar, redirect trap). A redirect's own URL is
        included (it is fetched)."""
        robots = {
            host: Protego.parse(features.robots)
            for host, features in self._features.items()
            if features.robots is not None
        }
        seen: set[tuple[str, str]] = set()
        reachable: list[str] = []
        queue = deque((host, "/") for host in self.hosts)
        # robots.txt names the sitemaps: the crawler reads them on first contact with the host.
        queue.extend((host, f"/sitemap.{name}") for host in self.hosts for name in self._features[host].sitemaps)
        seen.update(queue)
        while queue:
            host, path = queue.popleft()
            url = self._url(host, path)
            if path.startswith(("/calendar/", "/trap/")):
                continue
            rules = robots.get(host)
            if rules is not None and not rules.can_fetch(url, ROBOTS_AGENT):
                continue
            reachable.append(url)
            resource = self.resolve(host, path)
            if resource is None:
                continue
            if resource.kind == "redirect":
                successors = [_split(resource.location or "")]
            else:
                successors = self._link_targets(host, path)
            for successor in successors:
                if successor not in seen:
                    seen.add(successor)
                    queue.append(successor)
        return sorted(reachable)

    def _link_targets(self, host: str, path: str) -> list[tuple[str, str]]:
        resource = self.resolve(host, path)
        if resource is None:
            return []
        if resource.kind == "calendar":
            return [(host, p) for p in _calendar_links(path)]
        if resource.kind == "duplicate":
            return [(host, p) for p in ("/", *_duplicate_pair(resource.index))]
        if resource.kind == "sitemap":
            return [(host, f"/listed/{resource.format}/{index}") for index in range(LISTED_PAGES)]
        if resource.kind == "listed":
            return [(host, "/")]
        if resource.kind in url_shapes.KINDS:
            return [(host, p) for p in url_shapes.targets(host, resource.kind)]
        if resource.kind != "page":
            return []
        layout = self._layout(host)
        features = self._features[host]
        if self.tree_only:  # no link back to "/": the root would have parents
            return [(host, p) for p in layout.same_links[resource.index]]
        targets = [(host, p) for p in _special_links(resource.index, features)]
        targets += [(host, p) for p in layout.same_links[resource.index]]
        targets += layout.cross_links[resource.index]
        return targets

    def _layout(self, host: str) -> _HostLayout:
        layout = self._layouts.get(host)
        if layout is None:
            layout = self._layouts[host] = self._build_layout(host)
        return layout

    def _build_layout(self, host: str) -> _HostLayout:
        pages = self.pages
        features = self._features[host]
        rng = random.Random(f"{self.seed}|{host}|layout")
        redirect_count = round(features.redirects * (pages - 1))
        redirecting = set(rng.sample(range(1, pages), redirect_count))
        settled = [i for i in range(pages) if i not in redirecting]
        redirects = {
            page: (rng.choice((301, 302)), rng.choice(settled)) for page in sorted(redirecting)
        }
        # Spanning tree: each page hangs under an earlier page that serves links (not a
        # redirect), so every page is reachable from "/" whatever the redirect set is.
        children: list[list[int]] = [[] for _ in range(pages)]
        parents_so_far = [0]
        for page in range(1, pages):
            children[rng.choice(parents_so_far)].append(page)
            if page not in redirecting:
                parents_so_far.append(page)
        image_holders = [rng.choice(settled) for _ in range(self.images)]

        # The other hosts are the host list without this host. Drawing an index below
        # len(hosts) - 1 and stepping over this host's own index picks exactly what
        # `rng.choice(others)` picked (choice is `seq[randbelow(len(seq))]`, and so is
        # `randrange(n)`), so graphs stay byte-identical, in O(1) per link instead of O(hosts).
        other_count = len(self.hosts) - 1
        own_index = self._host_index[host]
        same_links: list[list[str]] = [[] for _ in range(pages)]
        cross_links: list[list[tuple[str, str]]] = [[] for _ in range(pages)]
        for page in settled:
            page_rng = random.Random(f"{self.seed}|{host}|{page}")
            targets = list(children[page])
            if self.tree_only:
                page_rng.shuffle(targets)
                same_links[page] = [_page_path(t) for t in targets]
                same_links[page] += [f"/img/{k}.png" for k, holder in enumerate(image_holders) if holder == page]
                continue
            wanted = min(page_rng.randint(3, 8), pages - 1)
            for _ in range(4 * wanted):  # bounded: small hosts may not have enough pages
                if len(targets) >= wanted:
                    break
                candidate = page_rng.randrange(pages)
                if candidate != page and candidate not in targets:
                    targets.append(candidate)
            page_rng.shuffle(targets)
            paths = [_page_path(t) for t in targets]
            paths += [f"/img/{k}.png" for k, holder in enumerate(image_holders) if holder == page]
            same_links[page] = paths
            if other_count and page_rng.random() < self.cross_link_prob:
                for _ in range(page_rng.randint(1, 3)):
                    drawn = page_rng.randrange(other_count)
                    other = self.hosts[drawn + (drawn >= own_index)]
                    cross_links[page].append((other, _page_path(page_rng.randrange(pages))))
        filler = words(rng, 2000) if features.page_bytes else ""
        return _HostLayout(redirects, same_links, cross_links, filler)

    @staticmethod
    def _url(host: str, path: str) -> str:
        return f"http://{host}{path}"

    # --- bytes -------------------------------------------------------------------------------

    def render(self, host: str, path: str) -> bytes:
        """The HTML of a page, calendar page, duplicate or listed page (byte-identical on every
        call; the server adds the revision of a changing page)."""
        resource = self.resolve(host, path)
        if resource is not None and resource.kind in url_shapes.KINDS:
            return url_shapes.render(host, resource.kind)
        if resource is None or resource.kind not in ("page", "calendar", "duplicate", "listed"):
            raise KeyError(f"no HTML at http://{host}{path}")
        targets = self._link_targets(host, path)
        if resource.kind == "duplicate":
            # Both URLs of a pair render as their shared directory, so nothing in the bytes
            # (RNG seed, relative links, footer) depends on which of the two was asked for.
            path = f"/dup/{resource.index}/"
        rng = random.Random(f"{self.seed}|{host}|{path}|render")
        body = render_html(host, path, targets, rng)
        page_bytes = self._features[host].page_bytes
        if page_bytes and len(body) < page_bytes:
            body = pad(body, page_bytes, self._layout(host).filler)
        return body.encode("utf-8")

    def image(self, host: str, index: int) -> bytes:
        rng = random.Random(f"{self.seed}|{host}|img|{index}")
        return tiny_png(rng.randrange(256), rng.randrange(256), rng.randrange(256))


# --- pure helpers ----------------------------------------------------------------------------


def _page_path(index: int) -> str:
    return "/" if index == 0 else f"/p/{index}"


def _split(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    host, _, path = rest.partition("/")
    return host, "/" + path


def _special_links(index: int, features: HostFeatures) -> list[str]:
    links = []
    if index != 0:
        links.append("/")
    if features.trap:
        links.append(TRAP_ENTRY)
    if index == 0 and features.redirect_trap:
        links.append(REDIRECT_TRAP_ENTRY)
    if index == 0 and features.redirects > 0:
        links.append("/loop/a")
    if index == 0 and features.gzip_bomb:
        links.append("/bomb")
    if index == 0:
        for pair in range(features.duplicates):
            links += _duplicate_pair(pair)
    if index == 0 and features.url_shapes:
        links += [url_shapes.ENTRY, url_shapes.LEGACY]
    return links


def _duplicate_pair(index: int) -> tuple[str, str]:
    return f"/dup/{index}/a", f"/dup/{index}/b"


def is_changing(path: str, fraction: float) -> bool:
    """Whether a host whose profile says `changing: fraction` makes the page at `path` differ on
    every visit. Only `/p/N` paths can be picked (never `/`); the pick is a stable hash of the
    path alone, so the same paths change on every host and in every process. The server applies
    it to pages only: a `/p/N` that redirects stays a redirect (see `SyntheticWeb.changes`)."""
    if fraction <= 0 or not _PAGE_PATH.fullmatch(path):
        return False
    point = int.from_bytes(hashlib.sha1(path.encode()).digest()[:8], "big") / 2**64
    return point < fraction


def _calendar_links(path: str) -> list[str]:
    match = _CALENDAR_PATH.fullmatch(path)
    assert match is not None
    year, month, day = int(match.group(1)), int(match.group(2)), match.group(3)
    if day is not None:
        return ["/", f"/calendar/{year}/{month:02d}"]
    next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
    links = ["/", f"/calendar/{next_year}/{next_month:02d}"]
    links.append(f"/calendar/{year}/{month:02d}/{(year * 12 + month) % 28 + 1:02d}")
    return links
