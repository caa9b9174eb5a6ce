"""How the node's parts are made from its configuration: what a response means (the rules),
the per-IP gates and the global admission. Node (node.node) calls them in pipeline order."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from crawler_node.cluster.ipshare import ip_shares_for
from crawler_node.config import NodeConfig
from crawler_node.core.backoff import HostBackoffPolicy, RetryPolicy
from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.refusals import RefusalRules
from crawler_node.core.robots import RobotsPolicy
from crawler_node.core.signals import LatencyModel
from crawler_node.core.verdict import RefusalPolicy, ResponseRules
from crawler_node.fetch.dns import Resolver
from crawler_node.node.admission import ApiGate, FetchAdmission, IpGates, PressureSource


def build_rules(config: NodeConfig, *, rng: random.Random | None = None) -> ResponseRules:
    """What a response means, as this configuration says (core.verdict)."""
    rng = rng if rng is not None else random.Random()
    retry, polite, health = config.retry, config.politeness, config.site_health
    return ResponseRules(
        retry=RetryPolicy(budget=retry.retry_budget, base_s=retry.retry_base_s, cap_s=retry.retry_cap_s,
                          retry_after_cap_s=retry.retry_after_cap_s, rng=rng),
        host_backoff=HostBackoffPolicy(initial_s=retry.host_backoff_initial_s, cap_s=retry.host_backoff_cap_s,
                                       forgive_after_s=retry.host_backoff_forgive_s, rng=rng),
        host_backoff_after=retry.host_backoff_after,
        retry_after_cap_s=retry.retry_after_cap_s,
        latency=LatencyModel(factor=retry.latency_rise_factor, min_rise_s=retry.latency_rise_min_s)
        if retry.latency_rise_factor else None,
        through_api=config.fetch.proxy is not None,
        api_limit_header=config.admission.api_limit_header,
        robots_agent=polite.robots_agent,
        max_crawl_delay_s=polite.max_crawl_delay_s,
        robots_max_bytes=config.fetch.robots_max_bytes,
        robots=RobotsPolicy(ttl_s=polite.robots_ttl_s, retry_s=polite.robots_error_retry_s,
                            retry_cap_s=polite.robots_retry_cap_s, max_attempts=polite.robots_max_attempts),
        refusals=RefusalPolicy(
            backoff=HostBackoffPolicy(initial_s=health.refusal_pause_initial_s, cap_s=health.refusal_pause_cap_s,
                                      forgive_after_s=health.refusal_forgive_s, jitter=health.refusal_pause_jitter,
                                      rng=rng),
            url_budget=health.refusal_url_budget),
    )


def build_refusal_rules(config: NodeConfig) -> RefusalRules:
    """How a refusal is told from a page (core.refusals)."""
    health = config.site_health
    return RefusalRules(soft_block_urls=health.soft_block_urls, soft_block_after_pages=health.soft_block_after_pages)


def build_ip_gates(config: NodeConfig, *, resolver: Resolver | None,
                   wake: Callable[[set[Any]], None]) -> IpGates | None:
    """Per-IP limits of direct fetches (rule 5), shared out over the cluster unless each node
    keeps its own (``--ip-limit-per-node``); ``wake(hosts)``: hosts parked on a gate whose
    share grew. None through a proxy (the sites' addresses are never learnt) or with no limit."""
    gates, fetch = config.admission, config.fetch
    if fetch.proxy or not gates.ip_inflight_limit:
        return None
    # The fetcher's resolver: a gate and the fetch it admits agree on the address, and the name
    # is asked once. IpGates keeps its own small cache, asked once per host (at its first
    # contact): cache_s is the resolver's cap, so the two agree.
    shares = ip_shares_for(node_id=config.node_id, limit=gates.ip_inflight_limit, per_node=gates.ip_limit_per_node,
                           global_inflight=fetch.global_inflight,
                           heartbeat_interval_s=config.cluster.heartbeat_interval_s)
    return IpGates(limit=gates.ip_inflight_limit, cache_s=fetch.dns_cache_s, clock=time.monotonic,
                   resolve=resolver.first_address if resolver is not None else None, shares=shares, wake=wake)


def build_admission(config: NodeConfig, *, ip_gates: IpGates | None,
                    pressure: list[PressureSource]) -> FetchAdmission:
    """The global gates of rule 5: the fetch-through API's limiter, per-IP gates, pressure."""
    api = None
    if config.fetch.proxy:
        # Until the API says otherwise, assume it takes everything we send.
        inflight = config.fetch.global_inflight
        api = ApiGate(limiter=AimdLimiter(start=config.admission.api_limit_start or inflight, floor=1,
                                          ceiling=inflight),
                      quota_reset_s=config.admission.api_quota_reset_s)
    return FetchAdmission(api=api, ip_gates=ip_gates, pressure=pressure)
