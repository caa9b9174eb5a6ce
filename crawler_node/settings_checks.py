"""The trap guards' checks, a list of problems (Settings.validate gathers them): the user's URL
patterns are compiled by re2 here, so a bad one is said before the node starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawler_node.settings import Settings


def trap_problems(settings: Settings) -> list[str]:
    """The trap guards: limits, and the user's URL patterns (compiled by re2)."""
    from crawler_node.core.traps import PatternError, compile_pattern  # lazy: re2 loads only to check

    problems = [f"{name} must be >= 0 (0: no limit), got {getattr(settings, name)}"
                for name in ("max_path_repeats", "max_path_depth", "max_query_params", "max_pages_per_host")
                if getattr(settings, name) < 0]
    for name in ("allow_urls", "deny_urls"):
        for pattern in getattr(settings, name):
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                problems.append(f"{name}: {exc}")
    return problems
