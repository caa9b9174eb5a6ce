"""Node settings: read in one place, validated once, handed to constructors as plain values.

Precedence is flag > environment (``CRAWLER_*``) > TOML config file > default, as DESIGN.md
promises. Every field can come from any of the three sources under the same name: the flag
``--max-depth``, the variable ``CRAWLER_MAX_DEPTH`` and the config key ``max_depth`` (or
``max-depth``) all set ``Settings.max_depth``. Reading the sources is settings_sources'.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawler_node.runtime.eventloop import EVENT_LOOPS
from crawler_node.settings_checks import pressure_problems, trap_problems

if TYPE_CHECKING:
    from crawler_node.core.recrawl import RecrawlPolicy


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


@dataclass(slots=True)
class Settings:
    # identity and wiring
    node_id: str = field(default_factory=lambda: socket.gethostname().split(".")[0] or "node")
    listen: str = "127.0.0.1:8080"
    advertise: str | None = None
    peers: list[str] = field(default_factory=list)  # "ID=URL" strings, parsed by peer_map()
    secret: str | None = None
    data_dir: Path = Path("./data")
    # what to crawl
    seeds: list[str] = field(default_factory=list)
    proxy: str | None = None
    allow_hosts: list[str] = field(default_factory=list)
    max_depth: int | None = None
    # trap guards (core.traps; 0 turns a limit off): what a URL may look like, and how many
    # URLs one host may give the frontier (counted on disk, per node)
    max_path_repeats: int = 3  # times one path segment may occur (/a/b/a/b/a/b/a has "a" 4 times)
    max_path_depth: int = 32  # "/" in the path, at most
    max_query_params: int = 10
    allow_urls: list[str] = field(default_factory=list)  # RE2 patterns: when given, a URL must match one
    deny_urls: list[str] = field(default_factory=list)  # RE2 patterns: a URL one matches is out
    max_pages_per_host: int = 100_000
    allow_private: bool = False
    user_agent: str = "crawler-node/0.1 (+https://example.invalid/crawler-node)"
    robots_agent: str = "crawler-node"
    # flow control
    global_inflight: int = 64
    # hosts whose idle keep-alive connections are kept open for their next request (fetch.fetcher)
    keepalive_hosts: int = 512
    # The per-host pace as a preset (PACES): "polite" for sites that gave no permission,
    # "adaptive" for your own and testweb. It fills the three settings below that were not
    # given; the defaults here are polite's. Applied where settings are loaded (settings_sources).
    pace: str = DEFAULT_PACE
    host_limit_start: int = 1
    host_limit_floor: int = 1
    host_limit_ceiling: int = 1
    min_host_delay_s: float = 1.0  # every host paced at least this much, as a Crawl-delay; 0 = robots.txt's only
    inbound_capacity: int = 20_000  # URLs waiting for the frontier thread
    parse_queue: int = 128  # pages waiting for a parser: ~40 ms of parsing at 3,500 pages/s, which
    # absorbs a parser that waits for a CPU on a busy machine (32 closed admission 25% of the time)
    store_queue: int = 256  # fetch results waiting for the store
    parse_workers: int = 1  # processes; 0 = a thread in this process
    lease_timeout_s: float = 120.0
    # A host with no work for this long leaves memory, and sooner while more than
    # host_memory_target hosts are in it (its pauses and Crawl-delay stay on disk, its
    # robots.txt answer in a bounded cache). Memory grows with the hosts being crawled, not
    # with every host ever seen.
    host_idle_s: float = 60.0
    host_memory_target: int = 10_000
    # Hosts with work kept in memory, at most (0 = no bound): a broad crawl queues URLs of
    # millions of hosts, and the others wait on disk for their turn, taken in host-name order
    # (Heritrix's inactive queues), hosts given a seed or a submitted URL first.
    active_hosts: int = 10_000
    host_turn_s: float = 300.0  # while others wait, a host with work keeps its place this long
    robots_cache_bytes: int = 4_000_000  # robots.txt bodies of hosts no longer in memory, at most
    # fetching
    connect_timeout_s: float = 10.0
    fetch_timeout_s: float = 30.0
    max_body_bytes: int = 10_000_000
    max_links_per_page: int = 2_000
    robots_max_bytes: int = 500_000
    robots_error_retry_s: float = 30.0  # first wait after a robots.txt that could not be had (doubles)
    robots_retry_cap_s: float = 1800.0  # the longest of those waits
    # robots.txt unavailable (5xx, 429, network, DNS, TLS) this many times in a row: the
    # authority's queued URLs end with outcome robots_unavailable
    robots_max_attempts: int = 6
    robots_ttl_s: float = 86_400.0  # rules are fetched again after this long (RFC 9309 2.4)
    max_crawl_delay_s: float = 30.0
    # "on": the cookies a site sets are kept (in memory, per node, bounded) and sent back to it,
    # as Scrapy and Heritrix do; "off": never kept, never sent, as StormCrawler and Nutch do
    cookies: str = "on"
    max_redirects: int = 10  # redirect hops a chain may take; the next one ends it (outcome too_many_redirects)
    max_parse_bytes: int = 5_000_000  # links are extracted from this much of a page; beyond, counted as truncated
    # sitemaps: "off", "robots" (the Sitemap: lines of robots.txt), or "probe" (also /sitemap.xml)
    sitemaps: str = "robots"
    sitemap_max_urls: int = 50_000  # per sitemap file (sitemaps.org)
    sitemap_max_bytes: int = 52_428_800  # uncompressed, per sitemap file (sitemaps.org: 50 MiB)
    # TLS and DNS for direct fetches
    ca_bundle: str | None = None  # PEM file of the CAs to trust instead of the system's
    dns_server: str | None = None  # HOST[:PORT] of the resolver for direct fetches (default: the system's)
    dns_cache_hosts: int = 10_000  # names whose answers are cached (each for its TTL, at most dns_cache_s)
    ip_limit_per_node: bool = False  # each node applies --ip-inflight-limit alone (no shares agreed in the cluster)
    api_read_timeout_s: float = 10.0  # an API client sends a request's headers, then its body, within this
    # retries
    retry_budget: int = 3
    retry_base_s: float = 1.0
    retry_cap_s: float = 60.0
    retry_after_cap_s: float = 300.0
    # a host that keeps answering 429 without Retry-After: pause it, doubling, forgiven later
    host_backoff_after: int = 2  # throttled rounds in a row (no success between) before pausing
    host_backoff_initial_s: float = 60.0
    host_backoff_cap_s: float = 3600.0
    host_backoff_forgive_s: float = 600.0
    # a host whose latency rises this many times above its own baseline (and by at least
    # latency_rise_min_s) gets its limit cut as if it had throttled; 0 turns this off
    latency_rise_factor: float = 3.0
    latency_rise_min_s: float = 0.5
    # own pipeline pressure stops new fetches (global admission) and, through it, leasing
    store_lag_s: float = 5.0  # the store is lagging when its oldest result waits this long
    pipeline_max_bytes: int = 128_000_000  # response bodies held between fetch and store
    # a fetch-through API (--proxy pointed at a paid scraping API): its own limits
    api_limit_header: str = "X-Api-Limit"  # header on the API's 429/509 naming the limit hit
    api_limit_start: int = 0  # first guess of the API's concurrency; 0 = global_inflight
    api_quota_reset_s: float = 3600.0  # after a 509, resume this long later (or POST /v1/resume)
    # load shedding: over the high-water mark (queued URLs) for shed_after_s, the lowest
    # priority URLs are deferred on disk until the queue drains below the low-water mark
    shed_high_water: int = 1_000_000  # 0 = never shed
    shed_low_water: int = 500_000
    shed_after_s: float = 30.0
    # direct fetches only (no proxy): hosts on one IP address share this many in-flight requests
    ip_inflight_limit: int = 8  # 0 = no per-IP limit
    dns_cache_s: float = 300.0
    # store
    warc_max_bytes: int = 100_000_000
    crawl_log_max_bytes: int = 100_000_000  # crawl.log is renamed crawl.log.<stamp> past this
    # payload digests remembered for revisit records (identical-payload-digest); 0 = none
    dedup_max_entries: int = 1_000_000
    warc_metadata: str = "on"  # "off": no metadata record (outlinks, via, hops) per parsed HTML page
    # recrawl: a fetched URL is fetched again this long after (90s, 15m, 6h, 1d; none: never),
    # with the validators of its last answer; "GLOB=DURATION" overrides per host (or never)
    recrawl_after: str | None = None
    recrawl_hosts: list[str] = field(default_factory=list)
    recrawl_priority: int = -1000  # below every discovered link: discovery goes first
    # user pipelines: "module:callable" or an entry point name in the group crawler_node.pipelines
    pipelines: list[str] = field(default_factory=list)
    pipeline_budget_s: float = 2.0  # per pipeline per page; past it the pipeline is stopped, its output dropped
    items_max_bytes: int = 100_000_000  # items/*.jsonl rotate past this
    crawl_name: str = "crawl"  # the warcinfo record's isPartOf
    operator: str | None = None  # the warcinfo record's operator: who runs this crawl (a contact)
    store_in_process: bool = True  # WARC writing in its own process, off the event loop's GIL
    # Niceness of the parser and store processes (0-19). The event loop paces the whole
    # pipeline; where CPU is short, the workers yield to it (their bounded queues then slow
    # the fetching), where it is not, this changes nothing.
    worker_nice: int = 10
    event_loop: str = "auto"  # runtime.eventloop: uvloop where it can be imported, else asyncio
    # cluster
    heartbeat_interval_s: float = 0.5
    heartbeat_timeout_s: float = 0.5
    suspect_after_s: float = 1.0
    down_after_s: float = 2.0  # + one heartbeat round: a dead or hung peer is routed around within 3 s
    # The longest a starting member holds its first lease (cluster.readiness): a fresh one leases
    # once every peer answered or was found down; a restarted or joining one once every peer
    # that answered says it owes it no handback (what was fetched for it while it was away, else
    # it fetches it again). Only a peer that keeps owing, or an old one that does not say, makes
    # it wait this long: a whole compose cluster restarting on two cores took more than 3 s.
    startup_grace_s: float = 30.0
    max_hops: int = 3  # times a URL may be forwarded on by a node that disagrees on its owner
    outbox_capacity: int = 50_000  # URLs owed to one peer before the parse stage must wait
    forward_batch: int = 500
    forward_linger_s: float = 0.05  # wait this long for a batch to fill before sending
    ring_vnodes: int = 160
    # "ID=WEIGHT" (repeatable): a member with weight 2 owns about twice the arc. Every member
    # must be given the same weights, or their rings disagree.
    ring_weights: list[str] = field(default_factory=list)
    ring_key_by: str = "host"  # or "domain": one registrable domain per arc
    handoff_on_exit: bool = False  # on SIGTERM, drain the queue to the successors first
    # A member whose majority comes back after it lost it (a partition healed, a SIGSTOP ended)
    # waits this long before its next request, while its successors let go of its hosts and end
    # the requests they have under way (cluster.fencing).
    handback_delay_s: float = 1.0
    # NAME[:PORT] whose A/AAAA records are candidate members (a compose service, a headless Service)
    peer_dns: str | None = None
    peer_dns_interval_s: float = 5.0  # how often NAME is resolved again
    # A node with peers (or --peer-dns) and no secret refuses to start unless this says the
    # peer endpoints (join, leave, members, forwarded URLs) may be open to anyone who can reach it
    insecure_open_cluster: bool = False
    # the daemon logs a progress line this often (0: never), and "crawl finished" once idle
    progress_interval_s: float = 30.0
    # test hook: seconds of extra CPU-free delay per parsed page (stages a slow parser)
    parse_delay_s: float = 0.0
    # test hook: the parser process dies (as on a page that crashes lexbor) on this exact URL
    parse_crash_url: str = ""

    def validate(self) -> Settings:
        problems: list[str] = []
        from crawler_node.cluster.membership import id_problem, member_problem, url_problem  # lazy, as peerdns below

        if (problem := id_problem(self.node_id)) is not None:
            problems.append(f"node_id {self.node_id!r}: {problem}")
        try:
            listen_address(self.listen)
        except SettingsError as exc:
            problems.append(str(exc))
        positive = ("global_inflight", "host_limit_floor", "inbound_capacity", "parse_queue",
                    "store_queue", "max_body_bytes", "warc_max_bytes", "max_links_per_page",
                    "max_parse_bytes", "robots_max_attempts", "sitemap_max_urls", "sitemap_max_bytes",
                    "dns_cache_hosts", "crawl_log_max_bytes", "items_max_bytes")
        for name in positive:
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.pace not in PACES:
            problems.append(f"pace must be one of {', '.join(PACES)}, got {self.pace!r}")
        if not self.host_limit_floor <= self.host_limit_start <= self.host_limit_ceiling:
            problems.append("host limits must satisfy floor <= start <= ceiling, got "
                            f"{self.host_limit_floor} <= {self.host_limit_start} <= {self.host_limit_ceiling}")
        for name in ("lease_timeout_s", "connect_timeout_s", "fetch_timeout_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        if self.lease_timeout_s <= self.fetch_timeout_s:
            # A lease must outlive the slowest legitimate fetch, or live work gets handed out twice.
            problems.append("lease_timeout_s must be larger than fetch_timeout_s")
        if self.parse_workers < 0 or self.retry_budget < 0 or self.parse_delay_s < 0:
            problems.append("parse_workers, retry_budget and parse_delay_s must be >= 0")
        if self.progress_interval_s < 0:
            problems.append(f"progress_interval_s must be >= 0, got {self.progress_interval_s}")
        if self.event_loop not in EVENT_LOOPS:
            problems.append(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}")
        if not 0 <= self.worker_nice <= 19:
            problems.append("worker_nice must be between 0 and 19")
        if self.parse_crash_url and self.parse_workers == 0:
            problems.append("parse_crash_url needs parser processes (parse_workers > 0)")
        if not 0 < self.suspect_after_s < self.down_after_s:
            problems.append("need 0 < suspect_after_s < down_after_s")
        if self.heartbeat_interval_s <= 0 or self.heartbeat_timeout_s <= 0:
            problems.append("heartbeat_interval_s and heartbeat_timeout_s must be > 0")
        elif self.down_after_s < self.suspect_after_s + self.heartbeat_interval_s:
            # A member fences itself after suspect_after_s without a majority (cluster.fencing);
            # its successor must take over at least a heartbeat round later.
            problems.append("down_after_s must be at least suspect_after_s + heartbeat_interval_s, got "
                            f"{self.down_after_s:g} < {self.suspect_after_s:g} + {self.heartbeat_interval_s:g}")
        if self.handback_delay_s < 0:
            problems.append(f"handback_delay_s must be >= 0, got {self.handback_delay_s}")
        if self.ring_key_by not in ("host", "domain"):
            problems.append(f"ring_key_by must be 'host' or 'domain', got {self.ring_key_by!r}")
        for name in ("outbox_capacity", "forward_batch", "ring_vnodes"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.max_hops < 0 or self.max_redirects < 0 or self.keepalive_hosts < 0:
            problems.append("max_hops, max_redirects and keepalive_hosts must be >= 0")
        try:
            self.recrawl_policy()
        except ValueError as exc:
            problems.append(f"recrawl: {exc}")
        if self.min_host_delay_s < 0:
            problems.append(f"min_host_delay_s must be >= 0, got {self.min_host_delay_s}")
        if self.pipeline_budget_s <= 0:
            problems.append(f"pipeline_budget_s must be > 0, got {self.pipeline_budget_s}")
        if self.pipelines:
            from crawler_node.pipelines.loader import PipelineError, load_pipelines  # imports the user's code

            try:
                load_pipelines(self.pipelines)
            except PipelineError as exc:
                problems.append(str(exc))
        if self.warc_metadata not in ("on", "off"):
            problems.append(f"warc_metadata must be 'on' or 'off', got {self.warc_metadata!r}")
        if self.dedup_max_entries < 0:
            problems.append(f"dedup_max_entries must be >= 0, got {self.dedup_max_entries}")
        if not self.crawl_name.strip():
            problems.append("crawl_name must not be empty")
        if self.cookies not in ("on", "off"):
            problems.append(f"cookies must be 'on' or 'off', got {self.cookies!r}")
        if self.sitemaps not in ("off", "robots", "probe"):
            problems.append(f"sitemaps must be 'off', 'robots' or 'probe', got {self.sitemaps!r}")
        if not 0 < self.robots_error_retry_s <= self.robots_retry_cap_s or self.robots_ttl_s <= 0:
            problems.append("need 0 < robots_error_retry_s <= robots_retry_cap_s and robots_ttl_s > 0")
        if self.ca_bundle is not None and not Path(self.ca_bundle).is_file():
            problems.append(f"ca_bundle {self.ca_bundle!r} is not a readable file")
        if self.dns_server is not None:
            host, _, port = self.dns_server.rpartition(":") if self.dns_server.count(":") == 1 else (
                self.dns_server, "", "53")
            if not (host or self.dns_server) or not port.isdigit() or not 0 < int(port) < 65536:
                problems.append(f"dns_server {self.dns_server!r} must look like HOST[:PORT]")
        if self.max_depth is not None and self.max_depth < 0:
            problems.append("max_depth must be >= 0")
        problems.extend(trap_problems(self))
        if self.proxy is not None:
            parts = urlsplit(self.proxy)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"proxy {self.proxy!r} must be an http:// URL")
        if self.peer_dns is not None:
            from crawler_node.cluster.peerdns import parse_peer_dns  # one parser; lazy: no cycle

            try:
                parse_peer_dns(self.peer_dns, 8080)
            except ValueError as exc:
                problems.append(str(exc))
        if self.peer_dns_interval_s <= 0 or self.api_read_timeout_s <= 0:
            problems.append("peer_dns_interval_s and api_read_timeout_s must be > 0")
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
        problems.extend(pressure_problems(self))
        if problems:
            raise SettingsError("; ".join(problems))
        return self

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
        from crawler_node.core.recrawl import RecrawlPolicy

        return RecrawlPolicy.from_specs(self.recrawl_after, self.recrawl_hosts)

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
