"""The commands that talk to a running node over its API: submit, status (and --watch), the
cluster's control (pause, resume, stop), hosts, queue and drop-host. cli.py builds the parser
and hands each its parsed arguments; the answers are rendered by tools.report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import typing


def cmd_submit(args: argparse.Namespace) -> int:
    from crawler_node.tools import client

    urls = list(args.urls)
    if not urls or urls == ["-"]:
        urls = [line.strip() for line in sys.stdin if line.strip()]
    if not urls:
        print("crawler-node submit: error: no URLs given (pass them as arguments or on stdin with -)", file=sys.stderr)
        return 2
    try:
        totals = client.submit(args.node, urls, secret=_secret(args))
    except client.NodeError as exc:
        print(f"crawler-node submit: error: {exc}{_token_hint(exc)}", file=sys.stderr)
        return 1
    capped = f", {totals['capped']} over --max-pages-per-host" if totals["capped"] else ""
    print(f"accepted {totals['accepted']} here, {totals['forwarded']} forwarded to the nodes that own them, "
          f"duplicate {totals['duplicate']}, rejected {totals['rejected']}{capped}")
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


def _watch(args: argparse.Namespace) -> int:
    """`status --watch`: a frame every --interval seconds until Ctrl-C (or --count frames); on a
    terminal one table redrawn in place, elsewhere plain-text frames one after another."""
    from crawler_node.tools import client
    from crawler_node.tools.report import RateWindow, watch_frame
    from crawler_node.tools.watch import WatchScreen

    rates = RateWindow()
    last_ok: float | None = None
    frames = 0
    try:
        with WatchScreen(sys.stdout) as screen:
            while args.count is None or frames < args.count:
                now = time.monotonic()
                try:
                    status = client.status(args.node, timeout=max(1.0, args.interval))
                    last_ok = now
                except client.NodeError as exc:
                    if last_ok is None:
                        print(f"crawler-node status: error: {exc}", file=sys.stderr)
                        return 1
                    screen.unreachable(f"{args.node}: UNREACHABLE for {now - last_ok:.0f} s ({exc}); "
                                       "the last frame is stale")
                else:
                    screen.show(watch_frame(status, rates, now))
                frames += 1
                if args.count is None or frames < args.count:
                    time.sleep(args.interval)
    except KeyboardInterrupt:
        print()
    return 0


def _secret(args: argparse.Namespace) -> str | None:
    return args.secret or os.environ.get("CRAWLER_SECRET") or None


def _token_hint(exc: Exception) -> str:
    """What a 401 asks of the user, in their words."""
    return " (give the cluster token: --secret or CRAWLER_SECRET)" if getattr(exc, "status", None) == 401 else ""


def _control_call(args: argparse.Namespace, call: typing.Callable[[], dict[str, typing.Any]],
                  render: typing.Callable[[dict[str, typing.Any]], str], *, complete: bool = False) -> int:
    """Run one control call: print its answer (JSON or a table); 1 when the node cannot be
    reached, refuses, or (``complete``) a member did not apply the command."""
    from crawler_node.tools import client

    try:
        answer = call()
    except client.NodeError as exc:
        print(f"crawler-node {args.command}: error: {exc}{_token_hint(exc)}", file=sys.stderr)
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

    sort = args.sort or ("health" if args.unhealthy else None)
    return _control_call(args, lambda: client.hosts(args.node, secret=_secret(args), sort=sort, order=args.order,
                                                    limit=args.limit, offset=args.offset, unhealthy=args.unhealthy),
                         format_hosts)


def cmd_queue(args: argparse.Namespace) -> int:
    from crawler_node.tools import client
    from crawler_node.tools.report import format_queue

    return _control_call(args, lambda: client.host_queue(args.node, args.host, secret=_secret(args), limit=args.limit),
                         format_queue)


def cmd_drop_host(args: argparse.Namespace) -> int:
    from crawler_node.tools import client

    def render(answer: dict[str, typing.Any]) -> str:
        dropped = answer["dropped"]
        return (f"dropped {answer['host']} on {answer['member']}: {dropped.get('queued', 0)} queued, "
                f"{dropped.get('deferred', 0)} deferred, {dropped.get('leased', 0)} buffered URLs deleted")

    return _control_call(args, lambda: client.drop_host(args.node, args.host, secret=_secret(args)), render)


def add_control_commands(commands: typing.Any) -> None:
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
    hosts.add_argument("--sort", choices=("queued", "inflight", "next_eligible", "host", "health"),
                       help="default queued (health: the lowest score first)")
    hosts.add_argument("--unhealthy", action="store_true",
                       help="only hosts that are not healthy (paused, refusing, throttling, failing, slow), "
                            "worst first")
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
