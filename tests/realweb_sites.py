"""The sites of the small real web: their files on disk, their ground truth, their nginx servers.

Each site is a directory of static files under ``root/sites/<name>`` plus a few lines of nginx
configuration (a redirect, a 503, a gzip switch, a rate limit), so what a test observes is what
nginx does, not code of ours. ``SiteTruth`` says what a polite, correct crawler that starts at
the site's ``/`` fetches there; paths are written as they appear on the wire (percent-encoded),
which is how nginx's ``$request_uri`` logs them.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path

DOMAIN = "realweb.test"
WRONG_NAME = "elsewhere.invalid"  # what the wrong-name certificate is for
SHARED_PORTS = tuple(range(8001, 8007))
SHARED_PAGES = 40  # per port
SHARED_PAGE_BYTES = 60_000
# nginx lets a second's worth of limit_rate out at once, then pauses after each write for as long
# as that write's bytes take at the rate: so each write is capped at 8 KB, and a 60 KB page leaves
# in 8 writes about 20 ms apart (about 150 ms), and a 40-byte robots.txt at once.
SHARED_RATE = "400k"
SHARED_CHUNK = "8k"
BIG_PAGE_BYTES = 8_000_000
BIG_PARSE_LIMIT = 5_000_000  # the default --max-parse-bytes; the big page has links past it

# The last octet of each site's address inside the 127.0.<block>.0/24 of one RealWeb instance.
OCTETS = {
    "redirect": 1, "altport": 2, "httpsonly": 3, "delay": 4, "robots503": 5, "sitemap": 6,
    "latin1": 7, "trap": 8, "gzip": 9, "big": 10, "expired": 11, "selfsigned": 12, "wrongname": 13,
    "shared": 50,
}
CERT_SITES = ("expired", "selfsigned", "wrongname")
MISSING = "missing"  # dnsmasq answers NXDOMAIN for missing.realweb.test


@dataclass(frozen=True)
class SiteTruth:
    """Ground truth of one site, from the files this module wrote."""

    name: str
    scheme: str  # where its pages live: "https" for all but shared ("http")
    ports: tuple[int, ...]  # ports its pages are served on (shared: one site per port)
    pages: frozenset[str]  # paths a polite, correct crawler fetches from "/" (HTML, 200)
    existing: frozenset[str]  # every HTML path that answers 200 (pages, disallowed, held back)
    disallowed: frozenset[str] = frozenset()  # linked paths that robots.txt forbids
    sitemap_only: frozenset[str] = frozenset()  # listed only in sitemaps, linked from no page
    sitemaps: frozenset[str] = frozenset()  # sitemap files (index, plain, gzip)
    redirects: frozenset[str] = frozenset()  # linked paths that answer 3xx
    wrong_decodings: frozenset[str] = frozenset()  # what a crawler ignoring the header charset asks for
    late_links: frozenset[str] = frozenset()  # linked only after the first BIG_PARSE_LIMIT bytes
    robots: str | None = None  # robots.txt body, None when robots.txt does not answer 200
    crawl_delay: float | None = None
    # page path -> the hrefs written in it (unencoded, as in the HTML), for tests that follow links
    links: dict[str, frozenset[str]] = field(default_factory=dict, compare=False)


def _page(title: str, links: list[str], *, text: str = "", encoding: str = "utf-8") -> bytes:
    anchors = "\n".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    charset = "" if encoding != "utf-8" else '<meta charset="utf-8">'
    body = (
        f"<!doctype html>\n<html><head>{charset}<title>{title}</title></head>\n"
        f"<body><h1>{title}</h1>\n<p>{text}</p>\n<ul>\n{anchors}\n</ul>\n</body></html>\n"
    )
    return body.encode(encoding)


def _filename(path: str) -> str:
    return "index.html" if path == "/" else path.lstrip("/")


class _SiteWriter:
    """Writes one site's files and records what links where."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.links: dict[str, frozenset[str]] = {}
        root.mkdir(parents=True, exist_ok=True)

    def page(self, path: str, links: list[str], **kwargs) -> None:
        self.write(_filename(path), _page(path, links, **kwargs))
        self.links[path] = frozenset(links)

    def write(self, name: str, data: bytes) -> None:
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _robots_site(root: Path, name: str, *, pages: int, robots: str, crawl_delay: float | None = None) -> SiteTruth:
    """Pages that link each other and to /private/ pages that robots.txt forbids."""
    site = _SiteWriter(root)
    paths = ["/"] + [f"/page-{i}.html" for i in range(1, pages)]
    private = [f"/private/secret-{i}.html" for i in range(1, 5)]
    for index, path in enumerate(paths):
        others = [p for p in paths if p != path]
        site.page(path, others + private[index % 2 :: 2], text=f"{name} page {index}")
    for path in private:
        site.page(path, ["/"], text="robots.txt forbids this page")
    site.write("robots.txt", robots.encode())
    return SiteTruth(
        name=name, scheme="https", ports=(8443,) if name == "altport" else (443,),
        pages=frozenset(paths), existing=frozenset(paths + private), disallowed=frozenset(private),
        robots=robots, crawl_delay=crawl_delay, links=site.links,
    )


def _robots503(root: Path) -> SiteTruth:
    site = _SiteWriter(root)
    paths = ["/"] + [f"/page-{i}.html" for i in range(1, 5)]
    for path in paths:
        site.page(path, [p for p in paths if p != path], text="never to be fetched: robots.txt answers 503")
    site.write("robots.txt", b"User-agent: *\nDisallow:\n")  # on disk, but nginx answers 503 before it
    return SiteTruth(
        name="robots503", scheme="https", ports=(443,), pages=frozenset(), existing=frozenset(paths),
        links=site.links,
    )


def _sitemap_xml(tag: str, item: str, locations: list[str]) -> bytes:
    entries = "\n".join(f"  <{item}><loc>{loc}</loc></{item}>" for loc in locations)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<{tag} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{entries}\n</{tag}>\n'
    ).encode()


def _sitemap(root: Path) -> SiteTruth:
    site = _SiteWriter(root)
    base = f"https://sitemap.{DOMAIN}"
    only = [f"/only-{i}.html" for i in range(1, 11)]
    site.page("/", ["/linked.html"], text="the home page links one page; the sitemaps list ten more")
    site.page("/linked.html", ["/"])
    for path in only:
        site.page(path, ["/"], text="listed only in a sitemap")
    robots = f"User-agent: *\nDisallow:\nSitemap: {base}/sitemap_index.xml\n"
    site.write("robots.txt", robots.encode())
    site.write("sitemap_index.xml", _sitemap_xml("sitemapindex", "sitemap", [
        f"{base}/sitemap-a.xml", f"{base}/sitemap-b.xml.gz",
    ]))
    site.write("sitemap-a.xml", _sitemap_xml("urlset", "url", [base + p for p in ["/", *only[:5]]]))
    site.write("sitemap-b.xml.gz", gzip.compress(_sitemap_xml("urlset", "url", [base + p for p in only[5:]])))
    return SiteTruth(
        name="sitemap", scheme="https", ports=(443,), pages=frozenset(["/", "/linked.html", *only]),
        existing=frozenset(["/", "/linked.html", *only]), sitemap_only=frozenset(only),
        sitemaps=frozenset(["/sitemap_index.xml", "/sitemap-a.xml", "/sitemap-b.xml.gz"]),
        robots=robots, links=site.links,
    )


def _latin1(root: Path) -> SiteTruth:
    """Pages whose charset is only in the HTTP header; file names on disk are UTF-8."""
    site = _SiteWriter(root)
    links = {"/": ["café.html", "naïve.html", "plain.html"], "/café.html": ["crème.html", "/"]}
    site.page("/", links["/"], text="Ceci est une page en latin-1: déjà vu.", encoding="latin-1")
    site.page("/café.html", links["/café.html"], text="Un café crème.", encoding="latin-1")
    site.page("/naïve.html", ["/"], text="naïve", encoding="latin-1")
    site.page("/crème.html", ["/"], text="crème", encoding="latin-1")
    site.page("/plain.html", ["/"], text="ascii only", encoding="latin-1")
    site.write("robots.txt", b"User-agent: *\nDisallow:\n")
    pages = ["/", "/caf%C3%A9.html", "/na%C3%AFve.html", "/cr%C3%A8me.html", "/plain.html"]
    wrong = ["/caf%EF%BF%BD.html", "/na%EF%BF%BDve.html", "/cr%EF%BF%BDme.html"]
    return SiteTruth(
        name="latin1", scheme="https", ports=(443,), pages=frozenset(pages), existing=frozenset(pages),
        wrong_decodings=frozenset(wrong), robots="User-agent: *\nDisallow:\n", links=site.links,
    )


def _plain_site(root: Path, name: str, *, pages: int, text: str = "") -> SiteTruth:
    site = _SiteWriter(root)
    paths = ["/"] + [f"/page-{i}.html" for i in range(1, pages)]
    for path in paths:
        site.page(path, [p for p in paths if p != path], text=text or f"a page of {name}")
    site.write("robots.txt", b"User-agent: *\nDisallow:\n")
    fetched = frozenset() if name in CERT_SITES else frozenset(paths)
    return SiteTruth(
        name=name, scheme="https", ports=(443,), pages=fetched, existing=frozenset(paths),
        robots="User-agent: *\nDisallow:\n", links=site.links,
    )


def _trap(root: Path) -> SiteTruth:
    site = _SiteWriter(root)
    site.page("/", ["/loop/a", "/ok.html"], text="/loop/<x> redirects to /loop/<x>x forever")
    site.page("/ok.html", ["/"])
    site.write("robots.txt", b"User-agent: *\nDisallow:\n")
    return SiteTruth(
        name="trap", scheme="https", ports=(443,), pages=frozenset(["/", "/ok.html"]),
        existing=frozenset(["/", "/ok.html"]), redirects=frozenset(["/loop/a"]),
        robots="User-agent: *\nDisallow:\n", links=site.links,
    )


def _big(root: Path) -> SiteTruth:
    """An ~8 MB home page with one link per megabyte, to pages that exist."""
    site = _SiteWriter(root)
    parts = [f"/part-{i}.html" for i in range(8)]
    filler = ("<p>" + "lorem ipsum dolor sit amet " * 36 + "</p>\n").encode()  # about 1 KB
    chunks = [b"<!doctype html>\n<html><head><title>big</title></head><body>\n"]
    size, late = len(chunks[0]), []
    for index, path in enumerate(parts):
        while size < (index + 0.5) * 1_000_000:
            chunks.append(filler)
            size += len(filler)
        anchor = f'<p><a href="{path}">part {index}</a></p>\n'.encode()
        if size >= BIG_PARSE_LIMIT:
            late.append(path)
        chunks.append(anchor)
        size += len(anchor)
    while size < BIG_PAGE_BYTES:
        chunks.append(filler)
        size += len(filler)
    chunks.append(b"</body></html>\n")
    site.write("index.html", b"".join(chunks))
    site.links["/"] = frozenset(parts)
    for path in parts:
        site.page(path, ["/"])
    site.write("robots.txt", b"User-agent: *\nDisallow:\n")
    return SiteTruth(
        name="big", scheme="https", ports=(443,), pages=frozenset(["/", *parts]),
        existing=frozenset(["/", *parts]), late_links=frozenset(late), robots="User-agent: *\nDisallow:\n",
        links=site.links,
    )


def _shared(root: Path, address: str) -> SiteTruth:
    """One docroot served on every shared port: each page about 60 KB, linking its port's pages
    (relative) and every port's home page (absolute, by IP literal)."""
    site = _SiteWriter(root)
    paths = ["/"] + [f"/p/{i:02d}.html" for i in range(1, SHARED_PAGES)]
    homes = [f"http://{address}:{port}/" for port in SHARED_PORTS]
    filler = "shared address, distinct ports " * (SHARED_PAGE_BYTES // 31)
    for path in paths:
        links = [p for p in paths if p != path] if path == "/" else ["/", *paths[1:6]]
        site.page(path, links + homes, text=filler)
    site.write("robots.txt", b"User-agent: *\nDisallow:\n")
    return SiteTruth(
        name="shared", scheme="http", ports=SHARED_PORTS, pages=frozenset(paths), existing=frozenset(paths),
        robots="User-agent: *\nDisallow:\n", links=site.links,
    )


def write_sites(sites_root: Path, addresses: dict[str, str]) -> dict[str, SiteTruth]:
    """Write every site's files under ``sites_root/<name>`` and return each site's truth."""
    disallow = "User-agent: *\nDisallow: /private/\n"
    delayed = "User-agent: *\nCrawl-delay: 1\nDisallow: /private/\n"
    truths = [
        _robots_site(sites_root / "redirect", "redirect", pages=4, robots=disallow),
        _robots_site(sites_root / "altport", "altport", pages=4, robots=disallow),
        _robots_site(sites_root / "httpsonly", "httpsonly", pages=4, robots=disallow),
        _robots_site(sites_root / "delay", "delay", pages=6, robots=delayed, crawl_delay=1.0),
        _robots503(sites_root / "robots503"),
        _sitemap(sites_root / "sitemap"),
        _latin1(sites_root / "latin1"),
        _trap(sites_root / "trap"),
        _plain_site(sites_root / "gzip", "gzip", pages=6, text="compress me " * 200),
        _big(sites_root / "big"),
        *(_plain_site(sites_root / name, name, pages=3) for name in CERT_SITES),
        _shared(sites_root / "shared", addresses["shared"]),
    ]
    return {truth.name: truth for truth in truths}


LOG_FORMAT = (  # nginx log_format fields that Access.from_json reads
    '{"msec":"$msec","request_time":"$request_time","server_addr":"$server_addr",'
    '"server_port":"$server_port","scheme":"$scheme","host":"$host","method":"$request_method",'
    '"uri":"$request_uri","status":"$status","bytes":"$body_bytes_sent","user_agent":"$http_user_agent"}'
)


# What nginx itself does for a site, beyond serving its files.
_DIRECTIVES = {
    "robots503": "    location = /robots.txt { return 503; }\n",
    # The charset in the header only: the files carry no <meta> and no BOM.
    "latin1": '    location ~ \\.html$ { types { } default_type "text/html; charset=iso-8859-1"; }\n',
    "trap": '    location /loop/ { return 302 "${uri}x"; }\n',
    "gzip": "    gzip on;\n    gzip_min_length 64;\n    gzip_types text/plain;\n",
}
# Debian's nginx has these compiled in under /var/lib/nginx; ours live in the prefix.
_TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def _server(listen: str, name: str, root: Path, cert: tuple[Path, Path] | None, body: str = "") -> str:
    ssl = f"    ssl_certificate {cert[0]};\n    ssl_certificate_key {cert[1]};\n" if cert else ""
    return (
        f"  server {{\n    listen {listen}{' ssl' if cert else ''};\n    server_name {name};\n"
        f"    root {root};\n{ssl}{body}  }}\n"
    )


def nginx_config(
    *, prefix: Path, sites_root: Path, access_log: Path, addresses: dict[str, str],
    certs: dict[str, tuple[Path, Path]],
) -> str:
    """The whole nginx.conf: one http block, one JSON access log, one server per site and port.

    ``certs`` maps "good", "expired", "selfsigned", "wrongname" to (certificate, key)."""
    servers = []
    for site in OCTETS:
        address, root, name = addresses[site], sites_root / site, f"{site}.{DOMAIN}"
        cert = certs.get(site, certs["good"])
        if site == "shared":
            throttle = f"    limit_rate {SHARED_RATE};\n    sendfile_max_chunk {SHARED_CHUNK};\n"
            for port in SHARED_PORTS:
                servers.append(_server(f"{address}:{port}", "_", root, None, throttle))
            continue
        if site == "redirect":
            servers.append(_server(f"{address}:80", name, root, None, "    return 301 https://$host$request_uri;\n"))
        port = 8443 if site == "altport" else 443
        servers.append(_server(f"{address}:{port}", name, root, cert, _DIRECTIVES.get(site, "")))
    temp = "".join(f"  {kind}_temp_path {prefix / 'temp' / kind};\n" for kind in _TEMP_PATHS)
    return (
        f"daemon off;\nuser root;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'} info;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        "  types { text/html html; text/plain txt; application/xml xml; application/gzip gz; }\n"
        "  default_type application/octet-stream;\n"
        f"  log_format realweb escape=json '{LOG_FORMAT}';\n"
        f"  access_log {access_log} realweb;\n"
        f"{temp}"
        "  sendfile on;\n  keepalive_timeout 30s;\n  server_tokens off;\n"
        "  ssl_protocols TLSv1.2 TLSv1.3;\n"
        f"{''.join(servers)}"
        "}\n"
    )
