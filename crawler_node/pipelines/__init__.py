"""User pipelines: code of the user's that runs on every fetched HTML page, like Scrapy's item
pipelines or Crawlee's ``push_data``.

A pipeline is any callable ``(page: Page) -> None | dict | Iterable[dict]``: it returns (or
yields) the items it found on the page, and may call ``page.follow(url)`` for links it wants
crawled. It runs in the node's parser worker, once per HTML page, within a time budget.

- this module: `Page`, what a pipeline is handed, and the `Pipeline` type;
- `loader`: ``--pipeline module:callable`` / ``--pipeline NAME`` (an entry point in the group
  ``crawler_node.pipelines``) to callables, each failure one line (`PipelineError`);
- `runner`: runs the pipelines on a page within the budget, and serialises their items once,
  as JSON lines, for the trip to the store;
- `summary`: the bundled example pipeline (title, description, main text);
- ``crawler_node.store.items.ItemWriter`` writes the lines to ``items/*.jsonl``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from urllib.parse import urljoin

ENTRY_POINT_GROUP = "crawler_node.pipelines"


@dataclass(slots=True)
class Page:
    """A fetched HTML page, as a pipeline sees it.

    Each pipeline is handed its own copy (its own lists), so what one pipeline changes or
    follows never reaches another."""

    url: str
    status: int
    headers: list[tuple[str, str]]  # as received, in order, repeated names kept
    text: str  # the decoded HTML
    links: list[str]  # absolute, normalised: the links the node extracted from the page
    depth: int
    content_type: str | None = None
    # What `follow` recorded; the runner reads it (the only reader outside this class).
    _followed: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of the first header called `name` (any case), else `default`."""
        wanted = name.lower()
        for header_name, value in self.headers:
            if header_name.lower() == wanted:
                return value
        return default

    def follow(self, url: str) -> None:
        """Ask for `url` to be crawled; relative to this page's URL if it is relative.

        The node passes it through the crawl's scope and the frontier like any link it found
        itself, so out-of-scope and already seen URLs are dropped there, not here."""
        if not isinstance(url, str):
            raise TypeError(f"follow() takes a URL as str, got {type(url).__name__}")
        self._followed.append(urljoin(self.url, url))

    def copy(self) -> Page:
        """This page with its own lists and nothing followed yet."""
        return Page(self.url, self.status, list(self.headers), self.text, list(self.links), self.depth,
                    self.content_type)


Item: TypeAlias = dict[str, Any]
Pipeline: TypeAlias = Callable[[Page], "None | Item | Iterable[Item]"]

__all__ = ["ENTRY_POINT_GROUP", "Item", "Page", "Pipeline"]
