"""Groups of Settings.validate's checks, each a list of problems (settings.py gathers them):
the trap guards and the flow-control settings."""

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


def pressure_problems(settings: Settings) -> list[str]:
    """The flow-control settings: backoff, latency, admission, API, shedding, host memory."""
    problems: list[str] = []
    if min(settings.robots_cache_bytes, settings.host_memory_target, settings.active_hosts, settings.host_turn_s) < 0:
        problems.append("robots_cache_bytes, host_memory_target, active_hosts and host_turn_s must be >= 0")
    for name in ("host_backoff_after", "pipeline_max_bytes"):
        if getattr(settings, name) < 1:
            problems.append(f"{name} must be >= 1, got {getattr(settings, name)}")
    if not 0 < settings.host_backoff_initial_s <= settings.host_backoff_cap_s:
        problems.append("need 0 < host_backoff_initial_s <= host_backoff_cap_s")
    for name in ("host_backoff_forgive_s", "latency_rise_min_s", "shed_after_s", "dns_cache_s",
                 "api_quota_reset_s", "store_lag_s", "host_idle_s"):
        if getattr(settings, name) < 0:
            problems.append(f"{name} must be >= 0")
    if settings.latency_rise_factor != 0 and settings.latency_rise_factor <= 1:
        problems.append(f"latency_rise_factor must be 0 (off) or > 1, got {settings.latency_rise_factor}")
    if not 0 <= settings.api_limit_start <= settings.global_inflight:
        problems.append("api_limit_start must be between 0 and global_inflight")
    if not settings.api_limit_header or any(c in settings.api_limit_header for c in " :\r\n"):
        problems.append(f"api_limit_header {settings.api_limit_header!r} is not a header name")
    if settings.shed_high_water < 0 or settings.ip_inflight_limit < 0:
        problems.append("shed_high_water and ip_inflight_limit must be >= 0")
    if settings.shed_high_water and not 0 <= settings.shed_low_water < settings.shed_high_water:
        problems.append("need 0 <= shed_low_water < shed_high_water")
    return problems
