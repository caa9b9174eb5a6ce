"""The bytes of testweb's pages: HTML written from a seeded RNG, tiny PNGs and the gzip bomb.

Pure functions, no I/O: the same arguments (and the same RNG state) give the same bytes, which
is what lets two processes with one seed serve byte-identical pages. `graph` decides what links
where; this module only spells it out.
"""

from __future__ import annotations

import gzip
import html
import random
import struct
import zlib
from functools import cache
from xml.sax.saxutils import escape, quoteattr

_WORDS = (
    "river market lantern orchard harbor signal copper meadow quiet engine paper window "
    "garden thunder silver morning valley archive bridge compass winter festival glass "
    "station harvest ledger canvas forest mirror timber beacon pepper velvet saddle marble "
    "crystal ribbon anchor falcon meadowlark cobalt ember granite hollow island jasmine "
    "kettle lattice mosaic nectar opal parcel quarry rampart sable tundra umber vessel "
    "willow yonder zephyr atlas basin cinder delta estuary fjord grove heath inlet"
).split()



def spell(host: str, target: tuple[str, str], base_dir: str, rng: random.Random) -> str:
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


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choices(_WORDS, k=count))


def render_html(host: str, path: str, targets: list[tuple[str, str]], rng: random.Random) -> str:
    base_dir = path[: path.rindex("/") + 1]  # the directory relative links resolve against
    base_tag = ""
    if path != "/" and rng.random() < 0.15:
        base_href, base_dir = rng.choice(
            [(f"http://{host}/p/", "/p/"), ("/", "/"), (f"HTTP://{host.upper()}/", "/")]
        )
        base_tag = f'<base href="{html.escape(base_href)}">\n'
    title = words(rng, rng.randint(2, 5)).title()

    def anchor(target: tuple[str, str]) -> str:
        href = html.escape(spell(host, target, base_dir, rng))
        return f'<a href="{href}">{words(rng, rng.randint(1, 3))}</a>'

    nav_count = min(len(targets), rng.randint(1, 3))
    nav = " | ".join(anchor(t) for t in targets[:nav_count])
    in_text = targets[nav_count:]
    paragraphs = []
    paragraph_count = max(2, min(6, len(in_text)))
    for number in range(paragraph_count):
        sentence = words(rng, rng.randint(20, 70)).split(" ")
        for target in in_text[number::paragraph_count]:
            sentence.insert(rng.randrange(len(sentence) + 1), anchor(target))
        paragraphs.append(f"<p>{' '.join(sentence).capitalize()}.</p>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{title} - {host}</title>\n{base_tag}</head>\n<body>\n"
        f"<nav>{nav}</nav>\n<h1>{title}</h1>\n"
        + "\n".join(paragraphs)
        + f"\n<footer>{host} {path}</footer>\n</body>\n</html>\n"
    )


def pad(body: str, size: int, filler: str) -> str:
    # Padding goes after the content, so links are found early even under a body limit.
    opening, closing = '<div class="archive"><p>', "</p></div>\n"
    room = size - len(body) - len(opening) - len(closing)
    if room <= 0:
        return body
    text = (filler + " ") * (room // (len(filler) + 1) + 1)
    insert_at = body.rindex("</body>")
    return body[:insert_at] + opening + text[:room] + closing + body[insert_at:]


def with_revision(body: bytes, revision: int) -> bytes:
    """A changing page's bytes for one visit: the page with its revision number added at the
    end of the body, so its links (and the graph) are those of the stable page."""
    insert_at = body.rindex(b"</body>")
    marker = f'<p class="revision">revision {revision}</p>\n'.encode()
    return body[:insert_at] + marker + body[insert_at:]


def render_sitemap(name: str, urls: list[str]) -> bytes:
    """A sitemap of `urls` in the format `name` (xml, txt, rss or atom; "F.gz": gzip'd)."""
    if name.endswith(".gz"):
        return gzip.compress(render_sitemap(name.removesuffix(".gz"), urls), mtime=0)
    if name == "txt":
        return "".join(f"{url}\n" for url in urls).encode()
    if name == "xml":
        entries = "".join(f"<url><loc>{escape(url)}</loc></url>\n" for url in urls)
        body = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{entries}</urlset>\n'
    elif name == "rss":
        items = "".join(f"<item><title>{escape(url)}</title><link>{escape(url)}</link></item>\n" for url in urls)
        body = (f'<rss version="2.0"><channel><title>testweb</title><link>{escape(urls[0])}</link>'
                f"<description>pages only this feed lists</description>\n{items}</channel></rss>\n")
    elif name == "atom":
        entries = "".join(f"<entry><title>{escape(url)}</title><id>{escape(url)}</id><updated>2026-01-01T00:00:00Z"
                          f"</updated><link href={quoteattr(url)}/><link rel=\"related\" href=\"/\"/></entry>\n"
                          for url in urls)
        body = (f'<feed xmlns="http://www.w3.org/2005/Atom"><title>testweb</title><id>urn:testweb</id>'
                f"<updated>2026-01-01T00:00:00Z</updated>\n{entries}</feed>\n")
    else:
        raise ValueError(f"no sitemap format {name!r}")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode()


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
