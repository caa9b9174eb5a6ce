"""The parse worker's unit of work: in-scope links, each handed to the node once per ring."""

from crawler_node.core.scope import Scope
from crawler_node.parse.parser_worker import ParseContext, ReturnedLinks, parse_pages


def page(*hrefs: str) -> bytes:
    return "".join(f'<a href="{href}">x</a>' for href in hrefs).encode()


def urls(result) -> list[str]:
    links, _found, _outlinks = result
    return [url for url, _host in links]


def test_a_link_is_handed_over_once_but_always_counted():
    context = ParseContext(scope=Scope(allow_hosts=["*"]), max_links=100)  # any host: other.test too
    first, second = parse_pages(context, [
        (page("/a", "/b"), "http://h.test/1", 0),
        (page("/b", "/c", "http://other.test/"), "http://h.test/2", 0),
    ])
    assert urls(first) == ["http://h.test/a", "http://h.test/b"]
    assert urls(second) == ["http://h.test/c", "http://other.test/"]
    assert second[0][1] == ("http://other.test/", "other.test")
    assert (first[1], second[1]) == (2, 3)  # links_discovered still counts every link found


def test_a_ring_change_hands_every_link_over_again():
    # Routing depends on the live members: after a change the node must see each link again,
    # so the new owner of a host learns the URLs its old owner may never fetch.
    context = ParseContext(scope=Scope(allow_hosts=["*"]), max_links=100)  # any host: other.test too
    parse_pages(context, [(page("/a", "/b"), "http://h.test/1", 0)], 3)
    [same] = parse_pages(context, [(page("/a", "/b"), "http://h.test/2", 0)], 3)
    [changed] = parse_pages(context, [(page("/a", "/b"), "http://h.test/3", 0)], 4)
    assert urls(same) == []
    assert urls(changed) == ["http://h.test/a", "http://h.test/b"]


def test_a_link_out_of_scope_at_one_depth_is_still_handed_over_at_a_shallower_one():
    context = ParseContext(scope=Scope(max_depth=2), max_links=100)
    [deep, shallow] = parse_pages(context, [
        (page("/a"), "http://h.test/deep", 2),  # /a would be depth 3: out of scope
        (page("/a"), "http://h.test/top", 0),
    ])
    assert urls(deep) == []
    assert urls(shallow) == ["http://h.test/a"]


def test_returned_links_memory_is_bounded_and_forgets_the_oldest_half_first():
    returned = ReturnedLinks(capacity=4)
    returned.new_generation(0)
    assert returned.fresh(list("abab")) == ["a", "b"]
    assert returned.fresh(list("cd")) == ["c", "d"]  # a, b now the old half
    assert returned.fresh(["a"]) == ["a"]  # forgotten: handed over again, never lost
    assert returned.fresh(["d"]) == []
