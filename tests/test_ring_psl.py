"""``ring_key(by="domain")`` against the public suffix list project's own test vectors.

tests/data/psl/test_psl.txt (README beside it: source, commit, licence) says which registrable
domain each host has, or none (``null``). The ring keys a host by its registrable domain, and a
host that has none by itself, so every vector is one ring-key case: as written, with a port,
and as the node meets the host (``host_of(normalize_url(url))``: lower-case, IDNA as punycode).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crawler_node.cluster.ring import ring_key
from crawler_node.core.urls import InvalidURL, host_of, normalize_url

VECTORS_FILE = Path(__file__).parent / "data" / "psl" / "test_psl.txt"
_CHECK = re.compile(r"checkPublicSuffix\((null|'[^']*'), (null|'[^']*')\);")


def psl_vectors() -> list[tuple[str | None, str | None]]:
    """Every ``checkPublicSuffix(host, expected)`` line that is not commented out upstream."""
    vectors = []
    for line in VECTORS_FILE.read_text(encoding="utf-8").splitlines():
        match = _CHECK.fullmatch(line.strip())
        if match:
            host, expected = (None if value == "null" else value.strip("'") for value in match.groups())
            vectors.append((host, expected))
    return vectors


VECTORS = psl_vectors()
# checkPublicSuffix(null, null) checks a library's null handling; a ring key is always made of
# a host string (host_of's), so that one vector has no ring-key counterpart.
HOST_VECTORS = [(host, expected) for host, expected in VECTORS if host is not None]


def expected_key(host: str, expected: str | None) -> str:
    """A host with no registrable domain (a public suffix, an empty label) keys by itself."""
    return expected if expected is not None else host.lower()


def to_punycode(name: str) -> str:
    return name.encode("idna").decode("ascii")


def test_every_vector_of_the_file_is_read() -> None:
    assert len(VECTORS) == 78  # 82 checkPublicSuffix lines, 4 of them commented out (.local)
    assert VECTORS.count((None, None)) == 1
    assert len(HOST_VECTORS) == 77


@pytest.mark.parametrize(("host", "expected"), HOST_VECTORS, ids=[host for host, _ in HOST_VECTORS])
def test_psl_vector_as_a_ring_key(host: str, expected: str | None) -> None:
    key = expected_key(host, expected)
    assert ring_key(host, by="domain") == key
    assert ring_key(f"{host}:8443", by="domain") == key  # the port never splits a domain


@pytest.mark.parametrize(("host", "expected"), HOST_VECTORS, ids=[host for host, _ in HOST_VECTORS])
def test_psl_vector_as_the_node_meets_the_host(host: str, expected: str | None) -> None:
    url = f"http://{host}/page"
    if host.startswith("."):
        # A leading dot is an empty label: no URL has such a host, so no ring key is made of it.
        with pytest.raises(InvalidURL):
            normalize_url(url)
        return
    node_host = host_of(normalize_url(url))
    assert ring_key(node_host, by="domain") == to_punycode(expected_key(host, expected))


@pytest.mark.parametrize(
    ("host", "key"),
    [
        # The private section counts: each name under github.io or blogspot.com has its own owner.
        ("user.github.io", "user.github.io"),
        ("docs.user.github.io", "user.github.io"),
        ("other.github.io", "other.github.io"),
        ("github.io", "github.io"),  # a suffix itself keys by itself
        ("www.github.com", "github.com"),
        ("news.blogspot.com", "news.blogspot.com"),
        ("bucket.s3.amazonaws.com", "bucket.s3.amazonaws.com"),
        ("app.herokuapp.com:8443", "app.herokuapp.com"),
        # Hosts with no registrable domain key by themselves.
        ("1.2.3.4", "1.2.3.4"),  # by the list alone an address would be "3.4"
        ("192.168.0.10:8080", "192.168.0.10"),
        ("[2001:db8::1]:8443", "[2001:db8::1]"),
        ("intranet:8080", "intranet"),
        ("a.b.site-7.test", "site-7.test"),  # an unlisted TLD is a suffix (the list's "*" rule)
        ("www.example.co.uk.", "example.co.uk"),  # a trailing dot is the same name
    ],
)
def test_private_suffixes_and_hosts_without_a_domain(host: str, key: str) -> None:
    assert ring_key(host, by="domain") == key


def twelve_labels_key(host: str) -> str:
    """``ring_key(by="domain")`` before the public suffix list: 12 second-level labels."""
    slds = {"co", "com", "ac", "org", "net", "gov", "edu", "ne", "or", "go", "gob", "nic"}
    name = host.lower().partition(":")[0].rstrip(".")
    if name.replace(".", "").isdigit():
        return name
    labels = name.split(".")
    if len(labels) >= 3 and labels[-2] in slds and len(labels[-1]) == 2:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def test_the_keys_that_moved_from_the_twelve_labels_are_the_ones_they_got_wrong() -> None:
    """Members that key differently disagree on owners (docs/cluster.md, mixed versions): the
    hosts whose key changed are exactly those the old list keyed against the PSL's vectors."""
    moved = sorted(host for host, expected in HOST_VECTORS
                   if twelve_labels_key(host) != ring_key(host, by="domain"))
    wrong_before = sorted(host for host, expected in HOST_VECTORS
                          if twelve_labels_key(host) != expected_key(host, expected))
    assert moved == wrong_before
    assert len(moved) == 29, moved
    # a sample of what moved: a private suffix, a wildcard, a state's k12, an IDN suffix
    for host in ("a.b.example.uk.com", "www.city.kobe.jp", "www.test.k12.ak.us", "www.食狮.公司.cn"):
        assert host in moved


def test_the_list_is_read_offline_and_writes_nothing(tmp_path: Path) -> None:
    """A fresh process keys by domain with every connection refused and an empty HOME and
    cache directory: the list comes from the installed package, and nothing is cached to disk."""
    home = tmp_path / "home"
    home.mkdir()
    code = (
        "import socket\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('the network is off in this test')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from crawler_node.cluster.ring import ring_key\n"
        "print(ring_key('www.city.kobe.jp:443', by='domain'), ring_key('a.user.github.io', by='domain'))\n"
    )
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "TLDEXTRACT_CACHE": str(home)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["city.kobe.jp", "user.github.io"]
    assert list(home.iterdir()) == []
