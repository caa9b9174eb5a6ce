"""The shell around core.refusals for the fetch stage: decodes as much of an answer's body as
the classifier reads, asks it with the host's soft-block history, and teaches that history the
pages the host served. The host's refusal state itself is the host table's (node.host_state)."""

from __future__ import annotations

from crawler_node.core.encoding import decode_body
from crawler_node.core.refusals import (
    PAGE_GATE_BYTES,
    Refusal,
    RefusalRules,
    SoftBlockHistory,
    classify_refusal,
    small_body_digest,
)
from crawler_node.core.response import FetchResult
from crawler_node.node.host_state import HostState

# Content types a refusal page comes as: HTML, or none said. An image or a sitemap is what it is.
_PAGE_TYPES = frozenset({None, "text/html", "application/xhtml+xml", "text/plain"})


class RefusalCheck:
    __slots__ = ("_rules", "_page_limit", "_limit")

    def __init__(self, *, rules: RefusalRules) -> None:
        self._rules = rules
        # Of a 2xx (most answers: pages), only as much as a soft block's page may have, and one
        # byte more to know it is larger: the start core.refusals' gate and markers read, not
        # a whole page inflated twice (the parser inflates it anyway). Of another answer, the
        # head the markers read.
        self._page_limit = max(rules.soft_block_bytes, PAGE_GATE_BYTES) + 1
        self._limit = rules.body_head_bytes + 1

    def refuses_robots(self, result: FetchResult) -> bool:
        """A robots.txt answered with a challenge, a captcha or a soft block's page: the site's
        refusal, not its rules (no soft-block history: one file is no run of pages)."""
        if result.status is None:
            return False
        body = decode_body(result.body, result.content_encoding, self._limit).body
        refusal = classify_refusal(url=result.url, status=result.status, headers=result.headers, body=body,
                                   history=None, rules=self._rules)
        return refusal is not None and refusal.kind.pauses

    def judge(self, state: HostState, result: FetchResult) -> Refusal | None:
        status = result.status
        if status is None:
            return None
        typed_page = result.content_type in _PAGE_TYPES
        limit = self._page_limit if status < 300 else self._limit
        body = decode_body(result.body, result.content_encoding, limit).body if typed_page else b""
        history = state.soft_block
        if history is None and status == 200 and typed_page:
            history = state.soft_block = SoftBlockHistory()
        refusal = classify_refusal(url=result.url, status=status, headers=result.headers, body=body,
                                   history=history if typed_page else None, rules=self._rules)
        if refusal is None and status == 200 and history is not None and typed_page:
            history.observe(result.url, small_body_digest(status, body, self._rules), self._rules)
        return refusal
