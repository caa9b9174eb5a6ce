"""The store's SURT keys are surt's: the shortcut for plain URLs (store.surt_key) against
surt.surt itself, on generated URLs heavy in the forms where surt rewrites something."""

from __future__ import annotations

import random

import pytest
import surt

from crawler_node.store.surt_key import plain_key, url_key

_HOSTS = ["a.test", "www.a.test", "www1.a.test", "www12.ex.test", "wwwx.a.test", "w.www.a.test", "www",
          "b-c.d.test", "x1.test", "1.2.3.4", "127.0.0.1", "255.255.255.255", "0.1.2.3", "01.2.3.4",
          "1.2.3", "256.1.1.1", "1-2.3", "123", "0x7f.1", "http", "https", "pg.test", "xn--caf-dma.test",
          "A.test", "www.1.2.3.4", "9.test"]
_PORTS = ["", ":80", ":443", ":8080", ":1", ":65535", ":65536", ":99999", ":080"]
_SEGMENTS = ["a", "B", "index.html", "", ".", "..", ".well-known", "~u", "a-b_c", "x.y.z", "ABC", "%41",
             "a;b", "(x)", "p1"]


def _generated(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    urls = []
    for _ in range(count):
        path = "".join("/" + rng.choice(_SEGMENTS) for _ in range(rng.randint(0, 5)))
        if rng.random() < 0.2:
            path += "/"
        tail = rng.choice(["", "", "", "?q=1", "#f", "?b=2&a=1"])
        urls.append(f"{rng.choice(['http', 'https'])}://{rng.choice(_HOSTS)}{rng.choice(_PORTS)}{path}{tail}")
    return urls


def _surts(url: str) -> str:
    try:
        return surt.surt(url)
    except Exception:  # noqa: BLE001 - the store's key is then the URL (as cdxj-indexer's)
        return url


@pytest.mark.parametrize("seed", range(4))
def test_the_key_is_surts_and_a_tenth_of_these_urls_take_the_shortcut(seed: int) -> None:
    urls = _generated(5_000, seed)
    assert [url_key(url) for url in urls] == [_surts(url) for url in urls]
    shortcut = [url for url in urls if plain_key(url) is not None]
    assert len(shortcut) > len(urls) // 10  # the comparison above covers the shortcut, not only surt


@pytest.mark.parametrize(("url", "key"), [
    ("http://www.pg.test:8080/Docs/SQL-select.html", "test,pg:8080)/docs/sql-select.html"),
    ("https://a.test:443/", "test,a)/"),
    ("http://a.test", "test,a)/"),
    ("http://127.0.0.1:8080/x//y/", "1,0,0,127:8080)/x/y"),
])
def test_plain_urls_get_their_key_directly(url: str, key: str) -> None:
    assert plain_key(url) == key == surt.surt(url)


@pytest.mark.parametrize("url", ["http://a.test/?q=1", "http://A.test/", "http://1.2.3/", "http://010.0.0.1/",
                                 "http://a.test/./x", "http://a.test/%41", "http://a.test:99999/", "ftp://a.test/",
                                 "http://[::1]/", "http://u@a.test/"])
def test_what_surt_rewrites_its_own_way_is_left_to_it(url: str) -> None:
    assert plain_key(url) is None
