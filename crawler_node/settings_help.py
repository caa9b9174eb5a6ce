"""What each setting means, for `--help` and `crawler-node config --show`: one line per setting
with its unit, in the groups `run --help` shows them in. The default is appended from the
Settings dataclass itself (settings.py), so it cannot go stale here; a test checks that every
setting has a line and a group."""

from __future__ import annotations

# group title -> the settings in it, in the order --help lists them
GROUPS: dict[str, tuple[str, ...]] = {
    "identity and cluster": (
        "node_id", "listen", "advertise", "peers", "secret", "insecure_open_cluster", "peer_dns",
        "peer_dns_interval_s", "data_dir", "api_read_timeout_s", "rename_node"),
    "what to crawl": (
        "seeds", "allow_hosts", "max_depth", "user_agent", "robots_agent", "proxy", "allow_private",
        "sitemaps", "sitemap_max_urls", "sitemap_max_bytes", "max_redirects", "cookies"),
    "trap guards": (
        "max_path_repeats", "max_path_depth", "max_query_params", "allow_urls", "deny_urls", "max_pages_per_host",
        "max_links_per_page", "max_future_years"),
    "politeness and robots.txt": (
        "pace", "host_limit_start", "host_limit_floor", "host_limit_ceiling", "min_host_delay_s", "max_crawl_delay_s",
        "robots_ttl_s",
        "robots_max_bytes", "robots_error_retry_s", "robots_retry_cap_s", "robots_max_attempts",
        "robots_cache_bytes", "ip_inflight_limit", "ip_limit_per_node"),
    "fetching": (
        "global_inflight", "keepalive_hosts", "connect_timeout_s", "fetch_timeout_s", "max_body_bytes",
        "max_parse_bytes", "ca_bundle", "dns_server", "dns_cache_hosts", "dns_cache_s",
        "dns_timeout_s"),
    "retries and backoff": (
        "retry_budget", "retry_base_s", "retry_cap_s", "retry_after_cap_s", "host_backoff_after",
        "host_backoff_initial_s", "host_backoff_cap_s", "host_backoff_forgive_s", "latency_rise_factor",
        "latency_rise_min_s"),
    "queues, pressure and shedding": (
        "inbound_capacity", "parse_queue", "store_queue", "parse_workers", "worker_nice", "event_loop",
        "lease_timeout_s",
        "host_idle_s", "host_memory_target", "active_hosts", "host_turn_s",
        "store_lag_s", "pipeline_max_bytes", "shed_high_water",
        "shed_low_water", "shed_after_s", "worker_deadline_s"),
    "fetch-through API (--proxy to a scraping API)": ("api_limit_header", "api_limit_start", "api_quota_reset_s"),
    "archive and output": (
        "warc_max_bytes", "warc_metadata", "dedup_max_entries", "crawl_name", "operator", "crawl_log_max_bytes",
        "store_in_process", "pipelines", "pipeline_budget_s", "items_max_bytes"),
    "recrawl": ("recrawl_after", "recrawl_hosts", "recrawl_priority", "recrawl", "recrawl_min", "recrawl_max"),
    "cluster tuning": (
        "heartbeat_interval_s", "heartbeat_timeout_s", "suspect_after_s", "down_after_s", "startup_grace_s",
        "max_hops", "outbox_capacity", "forward_batch", "forward_linger_s", "ring_vnodes", "ring_weights",
        "ring_key_by", "handoff_on_exit", "handback_delay_s"),
    "logging": ("progress_interval_s",),
    "batch mode": ("exit_when_idle", "idle_timeout_s"),
    "site health (refusals)": (
        "refusal_pause_initial_s", "refusal_pause_cap_s", "refusal_forgive_s", "refusal_pause_jitter",
        "refusal_url_budget", "soft_block_urls", "soft_block_after_pages"),
}

# Settings accepted but not advertised (none: the tests' hooks are config.TestHooks, not settings).
HIDDEN: frozenset[str] = frozenset()

HELP: dict[str, str] = {
    # identity and cluster
    "node_id": "this node's id, unique in the cluster ([A-Za-z0-9._-], at most 64; default: the host name)",
    "listen": "HOST:PORT to serve the HTTP API on",
    "advertise": "URL peers use to reach this node (default: http://LISTEN)",
    "peers": "a cluster member as ID=URL (repeatable; may include this node)",
    "secret": "cluster token required on peer and control endpoints (a node with peers refuses to start "
              "without one)",
    "insecure_open_cluster": "start with peers but no --secret: the peer endpoints are open to anyone",
    "peer_dns": "NAME[:PORT] whose A/AAAA records are members to join (a compose service, a headless Service)",
    "peer_dns_interval_s": "seconds between lookups of --peer-dns",
    "exit_when_idle": "exit 0 once the whole cluster is idle (never while a member is down with work), after "
                      "printing the crawl's summary and writing it as stats.json in the data directory",
    "idle_timeout_s": "with --exit-when-idle: seconds to wait for the cluster to be idle before giving up "
                      "(exit 3, stats.json written; 0: no limit)",
    "data_dir": "directory for the frontier, WARC files, crawl.log and items",
    "api_read_timeout_s": "seconds an API client has to send a request's headers, and again its body",
    "worker_deadline_s": "seconds a parse or store worker process may leave a request unanswered (a stopped or "
                         "stuck process): it is then killed and replaced, its work done again",
    "rename_node": "start a data directory another --node-id started first, under this --node-id (a node alone "
                   "only: not yet available in a cluster)",
    # what to crawl
    "seeds": "a URL to start from (repeatable)",
    "allow_hosts": "only crawl hosts matching this glob (repeatable; *.example.org includes example.org; "
                   "* = any host; none given: a link's host must be its page's host)",
    "max_depth": "links followed from a seed, at most (none: no limit)",
    "user_agent": "the User-Agent header: name the crawler and how to reach you (+https://... or an email)",
    "robots_agent": "the product token robots.txt groups are matched against",
    "proxy": "fetch through this HTTP proxy (a forward proxy, testweb, or a fetch-through API)",
    "allow_private": "permit direct fetches of private and loopback addresses",
    "sitemaps": "off, robots (read the Sitemap: lines of robots.txt) or probe (also /sitemap.xml)",
    "sitemap_max_urls": "<loc> entries read per sitemap file",
    "sitemap_max_bytes": "bytes per sitemap file, uncompressed",
    "cookies": "on (keep the cookies sites set, per node and in memory, and send them back, as a browser "
               "does) or off (never keep or send one)",
    "max_redirects": "redirect hops a chain may take before it ends as too_many_redirects",
    # trap guards
    "max_path_repeats": "a URL whose path has one segment more often than this is a trap: outcome "
                        "repeated_segments (0 = no limit)",
    "max_path_depth": "a URL with more '/' in its path is a trap: outcome path_too_deep (0 = no limit)",
    "max_query_params": "a URL with more query parameters is a trap: outcome too_many_query_params (0 = no limit)",
    "allow_urls": "an RE2 regex searched in each canonical URL: when given, a URL must match one (repeatable)",
    "deny_urls": "an RE2 regex searched in each canonical URL: a URL it matches is out, outcome denied_url "
                 "(repeatable)",
    "max_pages_per_host": "URLs of one host this node's frontier accepts; the rest end as host_page_cap (0 = no cap)",
    "max_links_per_page": "links taken from one page, at most",
    "max_future_years": "a URL dated (/2031/07, 2031-07-14, in its path or query) more than this many years after "
                        "this one is a calendar trap: outcome calendar_trap (0 = no limit)",
    # politeness and robots.txt
    "pace": "per-host pace preset for the settings below not given: polite (1 in flight, 1 s apart) or adaptive "
            "(AIMD from 2 up to 8, no delay; for your own sites and testweb)",
    "host_limit_start": "requests in flight to one host at first (AIMD then moves it)",
    "host_limit_floor": "requests in flight to one host: AIMD never cuts below this",
    "host_limit_ceiling": "requests in flight to one host: AIMD never grows above this",
    "min_host_delay_s": "seconds every host is paced at least, as a Crawl-delay its robots.txt did not ask for: one "
                        "request at a time, this long after the last ended (0 = only what robots.txt asks)",
    "max_crawl_delay_s": "a robots.txt Crawl-delay longer than this many seconds is capped to it",
    "robots_ttl_s": "seconds a robots.txt is obeyed before it is fetched again",
    "robots_max_bytes": "bytes of a robots.txt read (RFC 9309: at least 500 KiB)",
    "robots_error_retry_s": "seconds before asking again for a robots.txt that could not be had (doubles each time)",
    "robots_retry_cap_s": "the longest of those waits, in seconds",
    "robots_max_attempts": "failed robots.txt fetches in a row (5xx, 429, network) before the host's queued URLs "
                           "end as robots_unavailable",
    "robots_cache_bytes": "bytes of robots.txt answers kept for hosts no longer in memory",
    "ip_inflight_limit": "requests in flight to one IP address, over the whole cluster (0 = no limit)",
    "ip_limit_per_node": "apply --ip-inflight-limit per node, not shared out over the cluster's members",
    # fetching
    "global_inflight": "requests in flight on this node, at most",
    "keepalive_hosts": "hosts whose idle keep-alive connections stay open for reuse (the least recently "
                       "used are closed first; bounds the node's idle sockets)",
    "connect_timeout_s": "seconds to connect (TCP and TLS)",
    "fetch_timeout_s": "seconds for a whole request, body included",
    "max_body_bytes": "bytes of a body received (as sent, still content-encoded); the rest is cut, marked truncated",
    "max_parse_bytes": "bytes of a page (decoded) that links are extracted from",
    "ca_bundle": "PEM file of the certificate authorities to trust for https (none: the system's, or "
                 "SSL_CERT_FILE / SSL_CERT_DIR when set)",
    "dns_server": "HOST[:PORT] of the DNS resolver for direct fetches (none: the system's)",
    "dns_cache_hosts": "names whose DNS answers are kept, each for its TTL",
    "dns_cache_s": "seconds a DNS answer is kept at most, whatever its TTL",
    "dns_timeout_s": "seconds the DNS server has to answer, per try (2 tries); glibc's resolver waits 5",
    # site health (refusals)
    "refusal_pause_initial_s": "seconds a host pauses after its first challenge, captcha or soft block (doubling per "
                               "new incident)",
    "refusal_pause_cap_s": "the longest refusal pause of a host, in seconds",
    "refusal_forgive_s": "seconds without a new refusal (after the last pause ended) before the pauses start over",
    "refusal_pause_jitter": "each refusal pause is drawn within +- this fraction of its length",
    "refusal_url_budget": "refusals one URL may meet; the last ends it as blocked_challenge, blocked_captcha or "
                          "blocked_soft (its retry budget is not spent on them)",
    "soft_block_urls": "distinct URLs answered with the same small page, in a row, that make a soft block",
    "soft_block_after_pages": "distinct pages a host must have served before a run of one page can be a soft block",
    # retries and backoff
    "retry_budget": "attempts after the first for a URL that failed in a way worth retrying",
    "retry_base_s": "seconds before the first retry (doubling, jittered)",
    "retry_cap_s": "the longest wait between retries, in seconds",
    "retry_after_cap_s": "a Retry-After longer than this many seconds is capped to it",
    "host_backoff_after": "throttled rounds in a row (429 without Retry-After, no success between) before the "
                          "host is paused",
    "host_backoff_initial_s": "seconds of a host's first pause (doubling)",
    "host_backoff_cap_s": "the longest pause of a host, in seconds",
    "host_backoff_forgive_s": "seconds without a throttle after which a host's backoff starts over",
    "latency_rise_factor": "a host whose latency rises this many times above its baseline is slowed as if it "
                           "throttled (0 = off)",
    "latency_rise_min_s": "... and by at least this many seconds",
    # queues, pressure and shedding
    "inbound_capacity": "submitted and forwarded URLs waiting for the frontier; past it, 429 + Retry-After",
    "parse_queue": "pages waiting for a parser",
    "store_queue": "fetch results waiting for the store",
    "parse_workers": "parser processes (0 = a thread in this process)",
    "worker_nice": "niceness (0-19) of the parser and store processes: they yield CPU to the event loop",
    "event_loop": "the event loop: auto (uvloop where installed, else asyncio's), asyncio or uvloop",
    "lease_timeout_s": "seconds a leased URL is the node's before it goes back to its queue",
    "host_idle_s": "seconds a host with no work stays in memory",
    "host_memory_target": "hosts in memory above which idle ones leave sooner, oldest first",
    "active_hosts": "hosts with work kept in memory at most; the others wait on disk for their turn, "
                    "in host-name order (0 = no bound)",
    "host_turn_s": "seconds a host with work keeps its place in memory while others wait on disk "
                   "(0 = until its queue is done)",
    "store_lag_s": "the store is lagging (fetching stops) when its oldest result waits this many seconds",
    "pipeline_max_bytes": "bytes of response bodies held between fetch and store; past it, fetching stops",
    "shed_high_water": "queued URLs above which, for --shed-after-s, the lowest-priority ones are deferred "
                       "(0 = never shed)",
    "shed_low_water": "queued URLs below which deferred ones come back",
    "shed_after_s": "seconds over the high-water mark before shedding starts",
    # fetch-through API
    "api_limit_header": "header on the API's 429/509 that names the limit hit",
    "api_limit_start": "first guess of the API's concurrency (0 = --global-inflight)",
    "api_quota_reset_s": "seconds after a 509 (quota spent) before fetching resumes (or POST /v1/resume)",
    # archive and output
    "warc_max_bytes": "bytes of a WARC file before the next one begins",
    "warc_metadata": "on: a metadata record (outlinks, via, hops) beside each parsed HTML page; off",
    "dedup_max_entries": "payload digests remembered for revisit records (0 = store every payload in full)",
    "crawl_name": "the crawl's name, isPartOf in each WARC file's warcinfo record",
    "operator": "who runs this crawl (a contact), in each WARC file's warcinfo record",
    "crawl_log_max_bytes": "bytes of crawl.log before it is renamed crawl.log.<UTC stamp> and a new one begun",
    "store_in_process": "write WARC files in a process of their own, off the event loop",
    "pipelines": "a pipeline run on every HTML page: MODULE:CALLABLE or an installed name such as summary "
                 "(repeatable); its items go to items/*.jsonl",
    "pipeline_budget_s": "seconds a pipeline may spend on one page before it is stopped",
    "items_max_bytes": "bytes of an items/*.jsonl file before the next one begins",
    # recrawl
    "recrawl_after": "fetch each fetched URL again this long after (90s, 15m, 6h, 1d, 1h30m), asking with "
                     "If-None-Match / If-Modified-Since (none: never)",
    "recrawl_hosts": "GLOB=DURATION: another recrawl interval (or never) for the hosts the glob matches "
                     "(repeatable; a [recrawl_hosts] table in the config file)",
    "recrawl_priority": "priority of recrawl work (below every discovered link by default)",
    "recrawl": "adaptive: revisit each page when its estimated change rate makes it worth most freshness, "
               "--recrawl-after on average (the same budget); fixed: every page after --recrawl-after",
    "recrawl_min": "adaptive recrawl's shortest interval (default: a tenth of --recrawl-after)",
    "recrawl_max": "adaptive recrawl's longest interval, also for pages that never change or change too "
                   "fast to keep fresh (default: 30 times --recrawl-after)",
    # cluster tuning
    "heartbeat_interval_s": "seconds between heartbeats to each peer",
    "heartbeat_timeout_s": "seconds a heartbeat may take",
    "suspect_after_s": "seconds of silence before a peer is suspect",
    "down_after_s": "seconds of silence before a peer is down and its hosts go to the next live member",
    "startup_grace_s": "longest a starting member holds its first lease: a fresh one leases once every peer "
                       "answered or was found down, a restarted or joining one once no peer owes it a handback",
    "max_hops": "times a URL may be forwarded on by nodes that disagree on its owner",
    "outbox_capacity": "URLs owed to one peer before the parse stage must wait",
    "forward_batch": "URLs per batch sent to a peer",
    "forward_linger_s": "seconds a batch waits to fill before it is sent",
    "ring_vnodes": "points per member on the hash ring (the same on every member)",
    "ring_weights": "a member's ring weight as ID=WEIGHT (repeatable; the same on every member)",
    "ring_key_by": "host, or domain (one registrable domain per arc)",
    "handoff_on_exit": "on SIGTERM, hand the queue to the successors before stopping",
    "handback_delay_s": "seconds a member that lost its majority and found it again waits before its next request "
                        "(its successors let go of its hosts meanwhile)",
    # logging
    "progress_interval_s": "seconds between the daemon's progress lines; \"crawl finished\" is logged once the "
                           "cluster is idle (0 = neither)",
}


def help_text(name: str, default: object) -> str:
    """A setting's line with its default appended (unless the text says what "none" means)."""
    text = HELP[name]
    if default is None or default == [] or isinstance(default, bool):
        return text
    return f"{text} (default {default})"
