"""The synthetic web's link graph and page bytes: pure and deterministic from a seed.

Every decision is drawn from a `random.Random` seeded by a string naming the seed, the host and
the page, so a page's bytes never depend on the order in which pages are requested, and two
processes with the same seed serve byte-identical pages. No I/O happens here.

Layout of one host (P pages): `/` and `/p/1` … `/p/{P-1}`, plus `/img/0.png` … (small PNGs).
Each page `i >= 1` hangs under a parent page chosen among the earlier non-redirecting pages, so
a spanning tree makes every page reachable from `/`; extra random links are added on top.
Optional features: redirecting pages and the `/loop/a` <-> `/loop/b` loop, the `/calendar/`
spider trap, the `/trap/redirect/x` redirect trap (each hop's path one `/x` longer, so no two
URLs of the chain are alike), the `/bomb` gzip bomb, robots.txt rules (evaluated with protego).

Links are written in many spellings (relative, `../`, root-relative, absolute, upper-case
scheme and host, explicit `:80`, scheme-relative, `#fragment`, under a `<base href>`), while the
ground truth always uses the canonical form `http://site-1.test/p/3`.
"""

from __future__ import annotations

import html
import random
import re
import struct
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from protego import Protego

ROBOTS_AGENT = "crawler-node"
IMAGES_PER_HOST = 3  # the default; `images=` picks 0 to MAX_IMAGES_PER_HOST
MAX_IMAGES_PER_HOST = 10  # image paths are /img/0.png ... /img/9.png
TRAP_ENTRY = "/calendar/2026/01"
REDIRECT_TRAP_ENTRY = "/trap/redirect/x"
# Hops of the redirect trap before its chain ends in a 404: a crawler without a hop limit
# spends this many fetches on it (about what the real site of issue 13 cost: 202).
REDIRECT_TRAP_HOPS = 250

_PAGE_PATH = re.compile(r"/p/([1-9][0-9]{0,8})")
_IMAGE_PATH = re.compile(r"/img/([0-9])\.png")
_REDIRECT_TRAP_PATH = re.compile(r"/trap/redirect((?:/x)+)")
_CALENDAR_PATH = re.compile(
    r"/calendar/([12][0-9]{3})/(0[1-9]|1[0-2])(?:/(0[1-9]|1[0-9]|2[0-8]))?"
)

_WORDS = (
    "river market lantern orchard harbor signal copper meadow quiet engine paper window "
    "garden thunder silver morning valley archive bridge compass winter festival glass "
    "station harvest ledger canvas forest mirror timber beacon pepper velvet saddle marble "
    "crystal ribbon anchor falcon meadowlark cobalt ember granite hollow island jasmine "
    "kettle lattice mosaic nectar opal parcel quarry rampart sable tundra umber vessel "
    "willow yonder zephyr atlas basin cinder delta estuary fjord grove heath inlet"
).split()


@dataclass(frozen=True, slots=True)
class HostFeatures:
    """The parts of a host's profile that change its graph (not its timing)."""

    redirects: float = 0.0
    trap: bool = False
    redirect_trap: bool = False
    gzip_bomb: bool = False
    page_bytes: int | None = None
    robots: str | None = None


@dataclass(frozen=True, slots=True)
class Resource:
    """What lives at a path: kind is page, image, redirect, calendar or bomb."""

    kind: str
    index: int = 0
    status: int = 200
    location: str | None = None  # canonical absolute URL, for redirects


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
    ) -> None:
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
        return None

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
        if resource.kind != "page":
            return []
        layout = self._layout(host)
        features = self._features[host]
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
        filler = _words(rng, 2000) if features.page_bytes else ""
        return _HostLayout(redirects, same_links, cross_links, filler)

    @staticmethod
    def _url(host: str, path: str) -> str:
        return f"http://{host}{path}"

    # --- bytes -------------------------------------------------------------------------------

    def render(self, host: str, path: str) -> bytes:
        """The HTML of a page or calendar page (byte-identical on every call)."""
        resource = self.resolve(host, path)
        if resource is None or resource.kind not in ("page", "calendar"):
            raise KeyError(f"no HTML at http://{host}{path}")
        rng = random.Random(f"{self.seed}|{host}|{path}|render")
        targets = self._link_targets(host, path)
        body = _render_html(host, path, targets, rng)
        page_bytes = self._features[host].page_bytes
        if page_bytes and len(body) < page_bytes:
            body = _pad(body, page_bytes, self._layout(host).filler)
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
    return links


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


def _spell(host: str, target: tuple[str, str], base_dir: str, rng: random.Random) -> str:
    """One of the many ways to write a link to `target` from a document whose effective
    base is http://host{base_dir}; all of them resolve to the same canonical URL."""
    target_host, path = target
    absolute = [
        f"http://{target_host}{path}",
        f"HTTP://{target_host.upper()}{path}",
        f"http://{target_host}:80{path}",
        f"//{target_host}{path}",
    ]
    if path == "/":
        absolute.append(f"http://{target_host}")
    if target_host != host:
        choices = absolute
    else:
        relative = [path]  # root-relative
        if path.startswith(base_dir):
            rest = path[len(base_dir) :]
            relative += [rest or "./", f"./{rest}"]
        if base_dir == "/p/":
            relative.append(f"..{path}")
            if path == "/":
                relative.append("..")
        choices = relative * 3 + absolute
    spelled = rng.choice(choices)
    if rng.random() < 0.2:
        spelled += f"#s{rng.randrange(1, 6)}"
    return spelled


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choices(_WORDS, k=count))


def _render_html(host: str, path: str, targets: list[tuple[str, str]], rng: random.Random) -> str:
    base_dir = path[: path.rindex("/") + 1]  # the directory relative links resolve against
    base_tag = ""
    if path != "/" and rng.random() < 0.15:
        base_href, base_dir = rng.choice(
            [(f"http://{host}/p/", "/p/"), ("/", "/"), (f"HTTP://{host.upper()}/", "/")]
        )
        base_tag = f'<base href="{html.escape(base_href)}">\n'
    title = _words(rng, rng.randint(2, 5)).title()

    def anchor(target: tuple[str, str]) -> str:
        href = html.escape(_spell(host, target, base_dir, rng))
        return f'<a href="{href}">{_words(rng, rng.randint(1, 3))}</a>'

    nav_count = min(len(targets), rng.randint(1, 3))
    nav = " | ".join(anchor(t) for t in targets[:nav_count])
    in_text = targets[nav_count:]
    paragraphs = []
    paragraph_count = max(2, min(6, len(in_text)))
    for number in range(paragraph_count):
        words = _words(rng, rng.randint(20, 70)).split(" ")
        for target in in_text[number::paragraph_count]:
            words.insert(rng.randrange(len(words) + 1), anchor(target))
        paragraphs.append(f"<p>{' '.join(words).capitalize()}.</p>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{title} - {host}</title>\n{base_tag}</head>\n<body>\n"
        f"<nav>{nav}</nav>\n<h1>{title}</h1>\n"
        + "\n".join(paragraphs)
        + f"\n<footer>{host} {path}</footer>\n</body>\n</html>\n"
    )


def _pad(body: str, size: int, filler: str) -> str:
    # Padding goes after the content, so links are found early even under a body limit.
    opening, closing = '<div class="archive"><p>', "</p></div>\n"
    room = size - len(body) - len(opening) - len(closing)
    if room <= 0:
        return body
    text = (filler + " ") * (room // (len(filler) + 1) + 1)
    insert_at = body.rindex("</body>")
    return body[:insert_at] + opening + text[:room] + closing + body[insert_at:]


def tiny_png(red: int, green: int, blue: int, size: int = 8) -> bytes:
    """A valid size x size single-colour PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    row = b"\x00" + bytes((red, green, blue)) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * size, 9))
        + chunk(b"IEND", b"")
    )


@cache
def gzip_bomb(inflated_size: int) -> bytes:
    """A gzip stream that inflates to `inflated_size` zero bytes, built without ever holding
    the inflated data: one segment of zeros is compressed, ended with a full flush (which
    resets the compressor, so every following segment compresses to the same bytes), and
    repeated; only the CRC is computed over all the zeros, a segment at a time."""
    segment_size = 1 << 20
    whole, remainder = divmod(inflated_size, segment_size)
    zeros = bytes(segment_size)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH) if whole else b""
    repeat = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH) if whole > 1 else b""
    tail = deflate.compress(bytes(remainder)) + deflate.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(whole):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(bytes(remainder), crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, inflated_size & 0xFFFFFFFF)
    return header + first + repeat * max(0, whole - 1) + tail + trailer
