"""Node settings: read in one place, validated once, handed to constructors as plain values.

Precedence is flag > environment (``CRAWLER_*``) > TOML config file > default, as DESIGN.md
promises. Every field can come from any of the three sources under the same name: the flag
``--max-depth``, the variable ``CRAWLER_MAX_DEPTH`` and the config key ``max_depth`` (or
``max-depth``) all set ``Settings.max_depth``. Reading the sources is settings_sources'.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from crawler_node.config import (
    NO_TEST_HOOKS,
    AdmissionConfig,
    ClusterConfig,
    ConfigError,
    FetchConfig,
    FrontierConfig,
    IntakeConfig,
    NodeConfig,
    ParseConfig,
    PolitenessConfig,
    RetryConfig,
    SiteHealthConfig,
    StoreConfig,
    TestHooks,
    default,
)
from crawler_node.core.recrawl_policy import RecrawlPolicy
from crawler_node.core.scope import Scope
from crawler_node.core.traps import PatternError, TrapRules, compile_pattern
from crawler_node.datadir_layout import KNOWN_MEMBERS_FILENAME
from crawler_node.runtime.eventloop import EVENT_LOOPS

_G = TypeVar("_G")
_TOGGLES = ("cookies", "warc_metadata")  # "on" or "off" outside, booleans inside


class SettingsError(ValueError):
    """A setting is missing, malformed or inconsistent; the message says which and why."""


ENV_PREFIX = "CRAWLER_"

# What `--pace` sets, for each setting the user did not set. polite is StormCrawler's default
# (one request per host at a time, 1 s after the last ended; robots.txt's Crawl-delay when
# longer); adaptive lets AIMD find what a host takes, from 2 up to 8 in flight, with no delay
# (Googlebot's way: as fast as the host answers well) -- for sites you run or that said yes.
DEFAULT_PACE = "polite"
PACES: dict[str, dict[str, int | float]] = {
    "polite": {"host_limit_start": 1, "host_limit_ceiling": 1, "min_host_delay_s": 1.0},
    "adaptive": {"host_limit_start": 2, "host_limit_ceiling": 8, "min_host_delay_s": 0.0},
}


def _toggle(on: bool) -> str:
    return "on" if on else "off"


@dataclass(slots=True)
class Settings:
    """Every setting by its flat name, with its default: the groups' (crawler_node.config).
    Each setting's meaning is settings_help's; ``node_config`` hands them to the stages."""

    # identity and wiring
    node_id: str = field(default_factory=lambda: socket.gethostname().split(".")[0] or "node")
    listen: str = "127.0.0.1:8080"
    advertise: str | None = None
    peers: list[str] = field(default_factory=list)  # "ID=URL" strings, parsed by peer_map()
    secret: str | None = None
    data_dir: Path = Path("./data")
    api_read_timeout_s: float = 10.0  # an API client sends a request's headers, then its body, within this
    insecure_open_cluster: bool = False
    event_loop: str = "auto"  # runtime.eventloop: uvloop where it can be imported, else asyncio
    progress_interval_s: float = 30.0  # the daemon logs a progress line this often (0: never)
    rename_node: bool = False  # runtime.identity: start a data directory under another --node-id
    # what to crawl (the scope: core.scope, core.traps)
    seeds: list[str] = field(default_factory=list)
    allow_hosts: list[str] = field(default_factory=list)
    max_depth: int | None = None
    max_path_repeats: int = 3  # times one path segment may occur (/a/b/a/b/a/b/a has "a" 4 times)
    max_path_depth: int = 32  # "/" in the path, at most
    max_query_params: int = 10
    allow_urls: list[str] = field(default_factory=list)  # RE2 patterns: when given, a URL must match one
    deny_urls: list[str] = field(default_factory=list)  # RE2 patterns: a URL one matches is out
    # fetching
    user_agent: str = default(FetchConfig, "user_agent")
    proxy: str | None = default(FetchConfig, "proxy")
    allow_private: bool = default(FetchConfig, "allow_private")
    global_inflight: int = default(FetchConfig, "global_inflight")
    keepalive_hosts: int = default(FetchConfig, "keepalive_hosts")
    connect_timeout_s: float = default(FetchConfig, "connect_timeout_s")
    fetch_timeout_s: float = default(FetchConfig, "fetch_timeout_s")
    max_body_bytes: int = default(FetchConfig, "max_body_bytes")
    max_redirects: int = default(FetchConfig, "max_redirects")
    cookies: str = _toggle(default(FetchConfig, "cookies"))  # "on" or "off"
    robots_max_bytes: int = default(FetchConfig, "robots_max_bytes")
    sitemaps: str = default(FetchConfig, "sitemaps")
    ca_bundle: str | None = default(FetchConfig, "ca_bundle")
    dns_server: str | None = default(FetchConfig, "dns_server")
    dns_cache_hosts: int = default(FetchConfig, "dns_cache_hosts")
    dns_cache_s: float = default(FetchConfig, "dns_cache_s")
    dns_timeout_s: float = default(FetchConfig, "dns_timeout_s")
    # politeness: the pace, a preset of the host limits and delay (PACES)
    pace: str = DEFAULT_PACE
    host_limit_start: int = default(PolitenessConfig, "host_limit_start")
    host_limit_floor: int = default(PolitenessConfig, "host_limit_floor")
    host_limit_ceiling: int = default(PolitenessConfig, "host_limit_ceiling")
    min_host_delay_s: float = default(PolitenessConfig, "min_host_delay_s")
    max_crawl_delay_s: float = default(PolitenessConfig, "max_crawl_delay_s")
    robots_agent: str = default(PolitenessConfig, "robots_agent")
    robots_ttl_s: float = default(PolitenessConfig, "robots_ttl_s")
    robots_error_retry_s: float = default(PolitenessConfig, "robots_error_retry_s")
    robots_retry_cap_s: float = default(PolitenessConfig, "robots_retry_cap_s")
    robots_max_attempts: int = default(PolitenessConfig, "robots_max_attempts")
    robots_cache_bytes: int = default(PolitenessConfig, "robots_cache_bytes")
    host_idle_s: float = default(PolitenessConfig, "host_idle_s")
    host_memory_target: int = default(PolitenessConfig, "host_memory_target")
    host_turn_s: float = default(PolitenessConfig, "host_turn_s")
    # retries
    retry_budget: int = default(RetryConfig, "retry_budget")
    retry_base_s: float = default(RetryConfig, "retry_base_s")
    retry_cap_s: float = default(RetryConfig, "retry_cap_s")
    retry_after_cap_s: float = default(RetryConfig, "retry_after_cap_s")
    host_backoff_after: int = default(RetryConfig, "host_backoff_after")
    host_backoff_initial_s: float = default(RetryConfig, "host_backoff_initial_s")
    host_backoff_cap_s: float = default(RetryConfig, "host_backoff_cap_s")
    host_backoff_forgive_s: float = default(RetryConfig, "host_backoff_forgive_s")
    latency_rise_factor: float = default(RetryConfig, "latency_rise_factor")
    latency_rise_min_s: float = default(RetryConfig, "latency_rise_min_s")
    # global gates
    api_limit_header: str = default(AdmissionConfig, "api_limit_header")
    api_limit_start: int = default(AdmissionConfig, "api_limit_start")
    api_quota_reset_s: float = default(AdmissionConfig, "api_quota_reset_s")
    ip_inflight_limit: int = default(AdmissionConfig, "ip_inflight_limit")
    ip_limit_per_node: bool = default(AdmissionConfig, "ip_limit_per_node")
    pipeline_max_bytes: int = default(AdmissionConfig, "pipeline_max_bytes")
    # the frontier and the inbound queue
    lease_timeout_s: float = default(FrontierConfig, "lease_timeout_s")
    max_pages_per_host: int = default(FrontierConfig, "max_pages_per_host")
    active_hosts: int = default(FrontierConfig, "active_hosts")
    shed_high_water: int = default(FrontierConfig, "shed_high_water")
    shed_low_water: int = default(FrontierConfig, "shed_low_water")
    shed_after_s: float = default(FrontierConfig, "shed_after_s")
    # recrawl: a fetched URL is fetched again this long after (90s, 15m, 6h, 1d; none: never),
    # with the validators of its last answer; "GLOB=DURATION" overrides per host (or never)
    recrawl_after: str | None = None
    recrawl_hosts: list[str] = field(default_factory=list)
    recrawl_priority: int = default(FrontierConfig, "recrawl_priority")
    # adaptive: each page's interval from its change rate, the interval above on average
    # (core.adaptive_recrawl); fixed: every page after the interval itself
    recrawl: str = "adaptive"
    recrawl_min: str | None = None  # adaptive's bounds (default: a tenth of the interval,
    recrawl_max: str | None = None  # and 30 times it)
    inbound_capacity: int = default(IntakeConfig, "inbound_capacity")
    max_hops: int = default(IntakeConfig, "max_hops")
    # parsing
    parse_workers: int = default(ParseConfig, "parse_workers")
    parse_queue: int = default(ParseConfig, "parse_queue")
    worker_nice: int = default(ParseConfig, "worker_nice")
    max_links_per_page: int = default(ParseConfig, "max_links_per_page")
    max_future_years: int = 2  # core.traps: a URL dated further ahead is a calendar trap (0 = no limit)
    max_parse_bytes: int = default(ParseConfig, "max_parse_bytes")
    sitemap_max_urls: int = default(ParseConfig, "sitemap_max_urls")
    sitemap_max_bytes: int = default(ParseConfig, "sitemap_max_bytes")
    warc_metadata: str = _toggle(default(ParseConfig, "warc_metadata"))  # "on" or "off"
    pipelines: list[str] = field(default_factory=list)
    pipeline_budget_s: float = default(ParseConfig, "pipeline_budget_s")
    # store
    store_queue: int = default(StoreConfig, "store_queue")
    store_lag_s: float = default(StoreConfig, "store_lag_s")
    warc_max_bytes: int = default(StoreConfig, "warc_max_bytes")
    crawl_log_max_bytes: int = default(StoreConfig, "crawl_log_max_bytes")
    dedup_max_entries: int = default(StoreConfig, "dedup_max_entries")
    items_max_bytes: int = default(StoreConfig, "items_max_bytes")
    crawl_name: str = default(StoreConfig, "crawl_name")
    operator: str | None = default(StoreConfig, "operator")
    store_in_process: bool = default(StoreConfig, "store_in_process")
    worker_deadline_s: float = default(StoreConfig, "worker_deadline_s")
    # cluster
    heartbeat_interval_s: float = default(ClusterConfig, "heartbeat_interval_s")
    heartbeat_timeout_s: float = default(ClusterConfig, "heartbeat_timeout_s")
    suspect_after_s: float = default(ClusterConfig, "suspect_after_s")
    down_after_s: float = default(ClusterConfig, "down_after_s")
    startup_grace_s: float = default(ClusterConfig, "startup_grace_s")
    outbox_capacity: int = default(ClusterConfig, "outbox_capacity")
    forward_batch: int = default(ClusterConfig, "forward_batch")
    forward_linger_s: float = default(ClusterConfig, "forward_linger_s")
    ring_vnodes: int = default(ClusterConfig, "ring_vnodes")
    # "ID=WEIGHT" (repeatable): a member with weight 2 owns about twice the arc. Every member
    # must be given the same weights, or their rings disagree.
    ring_weights: list[str] = field(default_factory=list)
    ring_key_by: str = default(ClusterConfig, "ring_key_by")
    handoff_on_exit: bool = default(ClusterConfig, "handoff_on_exit")
    handback_delay_s: float = default(ClusterConfig, "handback_delay_s")
    peer_dns: str | None = default(ClusterConfig, "peer_dns")
    peer_dns_interval_s: float = default(ClusterConfig, "peer_dns_interval_s")
    # batch mode (crawler_node.batch): the daemon's own, not a stage's
    exit_when_idle: bool = False  # exit 0 once the cluster-wide idle decision is made, with stats.json
    idle_timeout_s: float = 0.0  # with exit_when_idle: give up (exit 3) after this long without it (0: never)
    # site health: refusals
    refusal_pause_initial_s: float = default(SiteHealthConfig, "refusal_pause_initial_s")
    refusal_pause_cap_s: float = default(SiteHealthConfig, "refusal_pause_cap_s")
    refusal_forgive_s: float = default(SiteHealthConfig, "refusal_forgive_s")
    refusal_pause_jitter: float = default(SiteHealthConfig, "refusal_pause_jitter")
    refusal_url_budget: int = default(SiteHealthConfig, "refusal_url_budget")
    soft_block_urls: int = default(SiteHealthConfig, "soft_block_urls")
    soft_block_after_pages: int = default(SiteHealthConfig, "soft_block_after_pages")

    def validate(self) -> Settings:
        """Check what the groups cannot check alone: the outside's own forms (ids, addresses,
        URLs, presets, specs), the rules that span groups, and what needs this machine (a CA
        file, the user's pipeline code); each group's own rules are checked by building it."""
        problems = self._outside_problems()
        problems += self._groups()[1]
        if not problems:  # the rules between groups, on groups that stand
            try:
                self.node_config()
            except SettingsError as exc:
                problems.append(str(exc))
        if self.ca_bundle is not None and not Path(self.ca_bundle).is_file():
            problems.append(f"ca_bundle {self.ca_bundle!r} is not a readable file")
        if self.pipelines:
            from crawler_node.pipelines.loader import PipelineError, load_pipelines  # imports the user's code

            try:
                load_pipelines(self.pipelines)
            except PipelineError as exc:
                problems.append(str(exc))
        if problems:
            raise SettingsError("; ".join(dict.fromkeys(problems)))  # each said once
        return self

    def _outside_problems(self) -> list[str]:
        """The forms only the flat settings have: ids, addresses, URLs, presets, specs."""
        from crawler_node.cluster.membership import id_problem, member_problem, url_problem
        from crawler_node.cluster.peerdns import parse_peer_dns

        problems: list[str] = []
        if (problem := id_problem(self.node_id)) is not None:
            problems.append(f"node_id {self.node_id!r}: {problem}")
        try:
            listen_address(self.listen)
        except SettingsError as exc:
            problems.append(str(exc))
        if self.pace not in PACES:
            problems.append(f"pace must be one of {', '.join(PACES)}, got {self.pace!r}")
        if self.progress_interval_s < 0:
            problems.append(f"progress_interval_s must be >= 0, got {self.progress_interval_s}")
        if self.idle_timeout_s < 0:
            problems.append(f"idle_timeout_s must be >= 0, got {self.idle_timeout_s}")
        if self.api_read_timeout_s <= 0:
            problems.append("peer_dns_interval_s and api_read_timeout_s must be > 0")
        if self.event_loop not in EVENT_LOOPS:
            problems.append(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}")
        for name in _TOGGLES:
            if getattr(self, name) not in ("on", "off"):
                problems.append(f"{name} must be 'on' or 'off', got {getattr(self, name)!r}")
        try:
            self.recrawl_policy()
        except ValueError as exc:
            problems.append(f"recrawl: {exc}")
        if self.max_depth is not None and self.max_depth < 0:
            problems.append("max_depth must be >= 0")
        problems.extend(self._trap_problems())
        if self.proxy is not None:
            parts = urlsplit(self.proxy)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"proxy {self.proxy!r} must be an http:// URL")
        if self.peer_dns is not None:
            try:
                parse_peer_dns(self.peer_dns, 8080)
            except ValueError as exc:
                problems.append(str(exc))
        try:
            for peer_id, peer_url in self.peer_map().items():
                if (problem := member_problem(peer_id, peer_url)) is not None:
                    problems.append(f"peer {peer_id!r}={peer_url!r}: {problem}")
            problems.extend(f"ring weight of {peer_id!r}: {problem}" for peer_id in self.weight_map()
                            if (problem := id_problem(peer_id)) is not None)
        except SettingsError as exc:
            problems.append(str(exc))
        if (self.peers or self.peer_dns) and (problem := url_problem(self.advertise_url)):
            problems.append(f"advertised URL {self.advertise_url!r}: {problem}")
        return problems

    def _trap_problems(self) -> list[str]:
        """The trap guards: limits, and the user's URL patterns (compiled by re2 here, so a bad
        one is said before the node starts)."""
        problems = [f"{name} must be >= 0 (0: no limit), got {getattr(self, name)}"
                    for name in ("max_path_repeats", "max_path_depth", "max_query_params", "max_pages_per_host",
                                 "max_future_years")
                    if getattr(self, name) < 0]
        for name in ("allow_urls", "deny_urls"):
            for pattern in getattr(self, name):
                try:
                    compile_pattern(pattern)
                except PatternError as exc:
                    problems.append(f"{name}: {exc}")
        return problems

    def node_config(self, *, hooks: TestHooks = NO_TEST_HOOKS) -> NodeConfig:
        """The stages' groups, built from these settings: the one place the flat names become
        the inside's. SettingsError names every problem found."""
        groups, problems = self._groups()
        try:
            scope, recrawl = self._scope(), self.recrawl_policy()
        except ValueError as exc:
            problems.append(str(exc))
        if problems:
            raise SettingsError("; ".join(dict.fromkeys(problems)))
        config = NodeConfig(node_id=self.node_id, data_dir=Path(self.data_dir), seeds=tuple(self.seeds),
                            advertise_url=self.advertise_url, secret=self.secret,
                            clustered=bool(self.peers or self.peer_dns), api_read_timeout_s=self.api_read_timeout_s,
                            scope=scope, recrawl=recrawl, hooks=hooks, **groups)
        if spanning := config.spanning_problems():
            raise SettingsError("; ".join(spanning))
        return config

    def _groups(self) -> tuple[dict[str, Any], list[str]]:
        """Each stage's group by its NodeConfig field, and the problems the groups found."""
        problems: list[str] = []

        def group(kind: type[_G], **values: Any) -> _G:
            names = {item.name for item in fields(kind)}  # type: ignore[arg-type]  # a config group
            try:
                return kind(**{name: getattr(self, name) for name in names if name not in values}, **values)
            except ConfigError as exc:
                problems.extend(exc.problems)
                return None  # type: ignore[return-value]  # never used: the problems are raised

        groups = {
            "fetch": group(FetchConfig, cookies=self.cookies != "off"),
            "retry": group(RetryConfig),
            "politeness": group(PolitenessConfig),
            "admission": group(AdmissionConfig),
            "frontier": group(FrontierConfig),
            "intake": group(IntakeConfig),
            "parse": group(ParseConfig, read_sitemaps=self.sitemaps != "off",
                           warc_metadata=self.warc_metadata != "off", pipelines=tuple(self.pipelines)),
            "store": group(StoreConfig),
            "cluster": self._cluster_config(group),
            "site_health": group(SiteHealthConfig),
        }
        return groups, problems

    def _cluster_config(self, group: Callable[..., ClusterConfig]) -> ClusterConfig:
        from crawler_node.cluster.peerdns import advertised_url  # this machine's address, read once here

        try:
            # Found by DNS with no --advertise: this machine's address, not the 0.0.0.0 listened on.
            advertise = self.advertise_url
            if self.peer_dns and not self.advertise:
                advertise = advertised_url(advertise)
            peers, weights = self.peer_map(), self.weight_map()
        except SettingsError:  # said by _outside_problems
            advertise, peers, weights = "http://invalid:1", {}, {}
        return group(ClusterConfig, advertise_url=advertise, peers=peers, weights=weights,
                     known_members_file=Path(self.data_dir) / KNOWN_MEMBERS_FILENAME if self.peer_dns else None)

    def _scope(self) -> Scope:
        return Scope(allow_hosts=self.allow_hosts, max_depth=self.max_depth,
                     traps=TrapRules(max_path_repeats=self.max_path_repeats, max_path_depth=self.max_path_depth,
                                     max_query_params=self.max_query_params, allow_urls=self.allow_urls,
                                     deny_urls=self.deny_urls, max_future_years=self.max_future_years,
                                     this_year=time.gmtime().tm_year))

    def peer_map(self) -> dict[str, str]:
        peers: dict[str, str] = {}
        for spec in self.peers:
            node_id, sep, url = spec.partition("=")
            if not sep or not node_id or not url.startswith(("http://", "https://")):
                raise SettingsError(f"peer {spec!r} must look like ID=http://HOST:PORT")
            peers[node_id.strip()] = url.strip().rstrip("/")
        return peers

    def weight_map(self) -> dict[str, int]:
        weights: dict[str, int] = {}
        for spec in self.ring_weights:
            node_id, sep, weight = spec.partition("=")
            if not sep or not node_id.strip() or not weight.strip().isdigit() or int(weight) < 1:
                raise SettingsError(f"ring weight {spec!r} must look like ID=WEIGHT with WEIGHT >= 1")
            weights[node_id.strip()] = int(weight)
        return weights

    def recrawl_policy(self) -> RecrawlPolicy:
        return RecrawlPolicy.from_specs(self.recrawl_after, self.recrawl_hosts, mode=self.recrawl,
                                        min_s=self.recrawl_min, max_s=self.recrawl_max)

    @property
    def advertise_url(self) -> str:
        if self.advertise:
            return self.advertise.rstrip("/")
        host, port = listen_address(self.listen)
        return f"http://{host}:{port}"


def listen_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise SettingsError(f"listen address {value!r} must look like HOST:PORT")
    return host.strip("[]"), int(port)


def settings_fields() -> list[dataclasses.Field[Any]]:
    return list(fields(Settings))
