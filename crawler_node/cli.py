"""The `crawler-node` console script: one subcommand per job, each with its own --help."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path

from crawler_node.settings import Settings, SettingsError, load_settings, settings_fields

# Repeatable options read better in the singular: --peer A=url --peer B=url.
_FLAG_NAMES = {"peers": "peer", "seeds": "seed", "allow_hosts": "allow-host", "ring_weights": "ring-weight",
               "pipelines": "pipeline", "recrawl_hosts": "recrawl-host", "allow_urls": "allow-url",
               "deny_urls": "deny-url"}
_HIDDEN = {"parse_delay_s", "parse_crash_url"}  # test hooks: accepted, not advertised
_HELP = {
    "worker_nice": "niceness (0-19) of the parser and store processes: they yield CPU to the event loop",
    "node_id": "this node's id (unique in the cluster)",
    "listen": "HOST:PORT to serve the HTTP API on",
    "advertise": "URL peers use to reach this node (default: http://LISTEN)",
    "peers": "a cluster member as ID=URL (repeatable; may include this node)",
    "secret": "cluster token required on peer endpoints (a node with peers refuses to start without one)",
    "insecure_open_cluster": "start with peers but no --secret: the peer endpoints are open to anyone",
    "api_read_timeout_s": "seconds an API client has to send a request's headers, and again its body",
    "peer_dns": "NAME[:PORT] whose A/AAAA records are members to join (a compose service, a headless Service)",
    "peer_dns_interval_s": "seconds between lookups of --peer-dns",
    "data_dir": "directory for the frontier, WARC files and crawl.log",
    "seeds": "a URL to start from (repeatable)",
    "proxy": "fetch through this HTTP proxy (e.g. testweb)",
    "allow_hosts": "only crawl hosts matching this glob (repeatable; *.example.org includes example.org; "
                   "* = any host; default: a link's host must be its page's host)",
    "max_path_repeats": "a URL whose path has one segment more often than this is a trap: outcome "
                        "repeated_segments (default 3; 0 = no limit)",
    "max_path_depth": "a URL with more '/' in its path is a trap: outcome path_too_deep (default 32; 0 = no limit)",
    "max_query_params": "a URL with more query parameters is a trap: outcome too_many_query_params "
                        "(default 10; 0 = no limit)",
    "allow_urls": "an RE2 regex searched in each canonical URL: when given, a URL must match one (repeatable)",
    "deny_urls": "an RE2 regex searched in each canonical URL: a URL it matches is out, outcome denied_url "
                 "(repeatable)",
    "max_pages_per_host": "URLs of one host this node's frontier accepts; the rest end as host_page_cap "
                          "(default 100000; 0 = no cap)",
    "max_depth": "do not follow links deeper than this",
    "allow_private": "permit direct fetches of private and loopback addresses",
    "ring_weights": "a member's ring weight as ID=WEIGHT (repeatable; the same on every member)",
    "ca_bundle": "PEM file of the certificate authorities to trust for https (default: the system's, "
                 "or SSL_CERT_FILE / SSL_CERT_DIR when set)",
    "dns_server": "HOST[:PORT] of the DNS resolver for direct fetches (default: the system's)",
    "dns_cache_hosts": "names whose DNS answers are kept, each for its TTL (default 10000)",
    "max_redirects": "redirect hops a chain may take before it ends as too_many_redirects (default 10)",
    "max_parse_bytes": "bytes of a page that links are extracted from (default 5000000)",
    "sitemaps": "off, robots (read the Sitemap: lines of robots.txt, default) or probe (also /sitemap.xml)",
    "recrawl_after": "fetch each fetched URL again this long after (90s, 15m, 6h, 1d, 1h30m), asking with "
                     "If-None-Match / If-Modified-Since (default: never)",
    "recrawl_hosts": "GLOB=DURATION: another recrawl interval (or never) for the hosts the glob matches (repeatable; "
                     "a [recrawl_hosts] table in the config file)",
    "recrawl_priority": "priority of recrawl work (default -1000: below every discovered link)",
    "pipelines": "a pipeline run on every HTML page: MODULE:CALLABLE or an installed name such as summary "
                 "(repeatable); its items go to items/*.jsonl",
    "pipeline_budget_s": "seconds a pipeline may spend on one page before it is stopped (default 2)",
    "items_max_bytes": "items/*.jsonl files rotate past this size (default 100000000)",
    "crawl_name": "the crawl's name, isPartOf in each WARC file's warcinfo record (default crawl)",
    "operator": "who runs this crawl (a contact), in each WARC file's warcinfo record",
    "warc_metadata": "on (default): a metadata record (outlinks, via, hops) beside each parsed HTML page; off",
    "dedup_max_entries": "payload digests remembered for revisit records (default 1000000; 0 = store every "
                         "payload in full)",
    "crawl_log_max_bytes": "crawl.log is renamed crawl.log.<UTC stamp> when it grows past this (default 100000000)",
    "robots_ttl_s": "seconds a robots.txt is obeyed before it is fetched again (default 86400)",
    "ip_limit_per_node": "apply --ip-inflight-limit per node, not shared out over the cluster's members",
    "ip_inflight_limit": "requests in flight to one IP address, over the whole cluster (default 8; 0 = none)",
    "robots_max_attempts": "failed robots.txt fetches in a row (5xx, 429, network) before the host's "
                           "queued URLs end as robots_unavailable (default 6)",
    "progress_interval_s": "seconds between the daemon's progress log lines; \"crawl finished\" is logged "
                           "once the cluster is idle (default 30; 0 = neither)",
}


def _add_settings_options(parser: argparse.ArgumentParser) -> None:
    hints = typing.get_type_hints(Settings)
    for field in settings_fields():
        flag = "--" + _FLAG_NAMES.get(field.name, field.name.replace("_", "-"))
        help_text = argparse.SUPPRESS if field.name in _HIDDEN else _HELP.get(field.name, f"tuning: {field.name}")
        kind = hints[field.name]
        # SUPPRESS: an option not given leaves no attribute, so the env, the file or the default decides.
        if kind is bool:
            parser.add_argument(flag, action="store_const", const=True,
                                dest=field.name, default=argparse.SUPPRESS, help=help_text)
        elif field.name in _FLAG_NAMES:
            parser.add_argument(flag, action="append", metavar=flag[2:].upper().replace("-", "_"),
                                dest=field.name, default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(flag, metavar=field.name.upper(),
                                dest=field.name, default=argparse.SUPPRESS, help=help_text)
    parser.add_argument("--config", type=Path, help="TOML file with settings (flag > env CRAWLER_* > file > default)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")


def _flags(args: argparse.Namespace) -> dict:
    names = {field.name for field in settings_fields()}
    return {key: value for key, value in vars(args).items() if key in names}


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def cmd_run(args: argparse.Namespace) -> int:
    from crawler_node.daemon import run

    if args.log_level.upper() not in LOG_LEVELS:
        print(f"crawler-node run: error: --log-level {args.log_level!r} is not one of {', '.join(LOG_LEVELS)}",
              file=sys.stderr)
        return 2
    try:
        settings = load_settings(_flags(args), config_path=args.config)
    except SettingsError as exc:
        print(f"crawler-node run: error: {exc}", file=sys.stderr)
        return 2
    return run(settings, log_level=args.log_level)


def cmd_submit(args: argparse.Namespace) -> int:
    from crawler_node.tools import client

    urls = list(args.urls)
    if not urls or urls == ["-"]:
        urls = [line.strip() for line in sys.stdin if line.strip()]
    if not urls:
        print("crawler-node submit: error: no URLs given (pass them as arguments or on stdin with -)", file=sys.stderr)
        return 2
    try:
        totals = client.submit(args.node, urls, secret=args.secret)
    except client.NodeError as exc:
        print(f"crawler-node submit: error: {exc}", file=sys.stderr)
        return 1
    print(f"accepted {totals['accepted']}, duplicate {totals['duplicate']}, rejected {totals['rejected']}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from crawler_node.tools import client
    from crawler_node.tools.report import format_status

    if args.watch:
        return _watch(args)
    try:
        status = client.status(args.node)
    except client.NodeError as exc:
        print(f"crawler-node status: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(format_status(status))
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    from crawler_node.core.scope import Scope
    from crawler_node.tools import recover

    try:
        settings = load_settings(_flags(args), config_path=args.config)
    except SettingsError as exc:
        print(f"crawler-node recover: error: {exc}", file=sys.stderr)
        return 2
    return recover.main(settings.data_dir, Scope.from_settings(settings))


def _watch(args: argparse.Namespace) -> int:
    """`status --watch`: a frame every --interval seconds until Ctrl-C (or --count frames)."""
    from crawler_node.tools import client
    from crawler_node.tools.report import RateWindow, format_watch

    rates = RateWindow()
    last_ok: float | None = None
    frames = 0
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    try:
        while args.count is None or frames < args.count:
            now = time.monotonic()
            try:
                frame = format_watch(client.status(args.node, timeout=max(1.0, args.interval)), rates, now)
                last_ok = now
            except client.NodeError as exc:
                if last_ok is None:
                    print(f"crawler-node status: error: {exc}", file=sys.stderr)
                    return 1
                frame = f"{args.node}: UNREACHABLE for {now - last_ok:.0f} s ({exc}); the last frame is stale"
            print(f"{clear}{time.strftime('%H:%M:%S')}  {frame}", flush=True)
            frames += 1
            if args.count is None or frames < args.count:
                time.sleep(args.interval)
    except KeyboardInterrupt:
        print()
    return 0


def _secret(args: argparse.Namespace) -> str | None:
    return args.secret or os.environ.get("CRAWLER_SECRET") or None


def _control_call(args: argparse.Namespace, call: typing.Callable[[], dict],
                  render: typing.Callable[[dict], str], *, complete: bool = False) -> int:
    """Run one control call: print its answer (JSON or a table); 1 when the node cannot be
    reached, refuses, or (``complete``) a member did not apply the command."""
    from crawler_node.tools import client

    try:
        answer = call()
    except client.NodeError as exc:
        hint = " (give the cluster token: --secret or CRAWLER_SECRET)" if exc.status == 401 else ""
        print(f"crawler-node {args.command}: error: {exc}{hint}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2, sort_keys=True) if getattr(args, "json", False) else render(answer))
    if complete and not answer.get("complete", True):
        print(f"crawler-node {args.command}: error: not every member applied it", file=sys.stderr)
        return 1
    return 0


def cmd_control(args: argparse.Namespace) -> int:
    from crawler_node.tools import client
    from crawler_node.tools.report import format_control

    return _control_call(args, lambda: client.control(args.node, args.command, secret=_secret(args),
                                                      reason=getattr(args, "reason", None)),
                         format_control, complete=True)


def cmd_hosts(args: argparse.Namespace) -> int:
    from crawler_node.tools import client
    from crawler_node.tools.report import format_hosts

    return _control_call(args, lambda: client.hosts(args.node, secret=_secret(args), sort=args.sort, order=args.order,
                                                    limit=args.limit, offset=args.offset), format_hosts)


def cmd_queue(args: argparse.Namespace) -> int:
    from crawler_node.tools import client
    from crawler_node.tools.report import format_queue

    return _control_call(args, lambda: client.host_queue(args.node, args.host, secret=_secret(args), limit=args.limit),
                         format_queue)


def cmd_drop_host(args: argparse.Namespace) -> int:
    from crawler_node.tools import client

    def render(answer: dict) -> str:
        dropped = answer["dropped"]
        return (f"dropped {answer['host']} on {answer['member']}: {dropped.get('queued', 0)} queued, "
                f"{dropped.get('deferred', 0)} deferred, {dropped.get('leased', 0)} buffered URLs deleted")

    return _control_call(args, lambda: client.drop_host(args.node, args.host, secret=_secret(args)), render)


def _add_control_commands(commands: typing.Any) -> None:
    def command(name: str, help_text: str, handler: typing.Callable[[argparse.Namespace], int]) -> typing.Any:
        parser = commands.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        parser.add_argument("--node", required=True, help="base URL of any node, e.g. http://127.0.0.1:8080")
        parser.add_argument("--secret", help="cluster token (default: $CRAWLER_SECRET)")
        parser.set_defaults(handler=handler)
        return parser

    pause = command("pause", "pause the whole cluster: no new fetch anywhere, in-flight ones finish; "
                    "it stays paused across restarts", cmd_control)
    pause.add_argument("--reason", help="why, shown in status (default: operator)")
    command("resume", "resume the whole cluster after a pause", cmd_control)
    command("stop", "stop every member gracefully, as SIGTERM does", cmd_control)
    hosts = command("hosts", "list the cluster's hosts with work: queued, in flight, limit, next eligible, state",
                    cmd_hosts)
    hosts.add_argument("--json", action="store_true", help="print the raw JSON answer")
    hosts.add_argument("--sort", choices=("queued", "inflight", "next_eligible", "host"), help="default queued")
    hosts.add_argument("--order", choices=("asc", "desc"), help="default desc for counts, asc otherwise")
    hosts.add_argument("--limit", type=int, help="hosts shown (default 50, at most 1000)")
    hosts.add_argument("--offset", type=int, help="hosts skipped first (default 0)")
    queue = command("queue", "show one host's queued URLs, from the member that crawls it", cmd_queue)
    queue.add_argument("--host", required=True, help="the host, e.g. example.org or example.org:8080")
    queue.add_argument("--json", action="store_true", help="print the raw JSON answer")
    queue.add_argument("--limit", type=int, help="URLs shown (default 100)")
    drop = command("drop-host", "delete one host's queued and deferred URLs on the member that crawls it",
                   cmd_drop_host)
    drop.add_argument("host", help="the host, e.g. example.org")
    drop.add_argument("--json", action="store_true", help="print the raw JSON answer")


def cmd_demo(args: argparse.Namespace) -> int:
    from crawler_node.tools.demo import run_demo

    return run_demo(hosts=args.hosts, pages=args.pages, seed=args.seed, data_dir=args.data_dir,
                    timeout_s=args.timeout, nodes=args.nodes)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crawler-node", description="A peer-to-peer distributed web crawler.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser("run", help="run a crawler node (the daemon)",
                              description="Run a crawler node. No peers = a one-node cluster.")
    _add_settings_options(run)
    run.set_defaults(handler=cmd_run)

    submit = commands.add_parser("submit", help="add seed URLs through any node",
                                 description="Add seed URLs through any node of the cluster.")
    submit.add_argument("--node", required=True, help="base URL of a node, e.g. http://127.0.0.1:8080")
    submit.add_argument("--secret", help="cluster token, if the cluster has one")
    submit.add_argument("urls", nargs="*", help="URLs, or - to read them from stdin one per line")
    submit.set_defaults(handler=cmd_submit)

    status = commands.add_parser("status", help="show the cluster as a node sees it",
                                 description="Show the cluster as one node sees it.")
    status.add_argument("--node", required=True, help="base URL of a node")
    status.add_argument("--json", action="store_true", help="print the raw JSON status")
    status.add_argument("--watch", action="store_true",
                        help="a live table, refreshed every --interval seconds, until Ctrl-C")
    status.add_argument("--interval", type=float, default=2.0, help="seconds between --watch frames (default 2)")
    status.add_argument("--count", type=int, help=argparse.SUPPRESS)  # --watch frames, then exit (tests)
    status.set_defaults(handler=cmd_status)

    _add_control_commands(commands)

    recover = commands.add_parser(
        "recover", help="rebuild a lost or damaged frontier from crawl.log and the WARC files",
        description="Rebuild the frontier of a stopped node's data directory from its crawl.log and the "
                    "metadata records of its WARC files (the damaged files are moved aside). Give it the "
                    "node's own settings (--data-dir, --allow-host, --max-depth or --config): links are "
                    "queued only when they are in scope.")
    _add_settings_options(recover)
    recover.set_defaults(handler=cmd_recover)

    from crawler_node.testweb import cli as testweb_cli

    testweb = commands.add_parser("testweb", help="serve the synthetic web used by tests, demo and benchmarks",
                                  description="Serve a deterministic synthetic web, reached as an HTTP proxy.")
    testweb_cli.add_arguments(testweb)
    testweb.set_defaults(handler=testweb_cli.run)

    demo = commands.add_parser("demo", help="crawl a synthetic web on loopback and summarise",
                               description="Start testweb and a crawler cluster on loopback, crawl to the end, "
                                           "show progress and a summary, and exit.")
    demo.add_argument("--hosts", type=int, default=20)
    demo.add_argument("--pages", type=int, default=50)
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--nodes", type=int, default=3, help="number of nodes (on 127.0.0.2, .3, ...)")
    demo.add_argument("--data-dir", type=Path, help="keep the nodes' data here (default: a temporary directory)")
    demo.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
