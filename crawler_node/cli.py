"""The `crawler-node` console script: one subcommand per job, each with its own --help."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import typing
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from crawler_node.settings import Settings, SettingsError, settings_fields
from crawler_node.settings_help import GROUPS, HIDDEN
from crawler_node.settings_help import help_text as help_text_of
from crawler_node.settings_sources import load_settings, load_settings_with_sources
from crawler_node.tools.node_commands import add_control_commands, cmd_status, cmd_submit

# Repeatable options read better in the singular: --peer A=url --peer B=url.
_FLAG_NAMES = {"peers": "peer", "seeds": "seed", "allow_hosts": "allow-host", "ring_weights": "ring-weight",
               "pipelines": "pipeline", "recrawl_hosts": "recrawl-host", "allow_urls": "allow-url",
               "deny_urls": "deny-url"}
def _add_settings_options(parser: argparse.ArgumentParser) -> None:
    """Every setting as an option, in the groups of settings_help, each with its unit and default."""
    hints = typing.get_type_hints(Settings)
    by_name = {field.name: field for field in settings_fields()}
    groups = [(title, parser.add_argument_group(title)) for title in GROUPS]
    placed = {name: group for title, group in groups for name in GROUPS[title]}
    hidden = parser.add_argument_group("test hooks")
    for name, field in by_name.items():
        flag = "--" + _FLAG_NAMES.get(name, name.replace("_", "-"))
        default = _default_of(field)
        help_text = argparse.SUPPRESS if name in HIDDEN else help_text_of(name, default)
        target = placed.get(name, hidden)
        kind = hints[name]
        # SUPPRESS: an option not given leaves no attribute, so the env, the file or the default decides.
        if kind is bool:
            target.add_argument(flag, action="store_const", const=True,
                                dest=name, default=argparse.SUPPRESS, help=help_text)
        elif name in _FLAG_NAMES:
            target.add_argument(flag, action="append", metavar=flag[2:].upper().replace("-", "_"),
                                dest=name, default=argparse.SUPPRESS, help=help_text)
        else:
            target.add_argument(flag, metavar=name.upper(),
                                dest=name, default=argparse.SUPPRESS, help=help_text)
    parser.add_argument("--config", type=Path, help="TOML file with settings (flag > env CRAWLER_* > file > default)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")


def _default_of(field: dataclasses.Field[typing.Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.name == "node_id":
        return None  # the host name: said in its help
    factory = field.default_factory
    return factory() if factory is not dataclasses.MISSING else None


def _flags(args: argparse.Namespace) -> dict[str, typing.Any]:
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


def cmd_crawl(args: argparse.Namespace) -> int:
    """One node, these seeds, until the crawl is done: `run --exit-when-idle` with the seeds
    given as arguments, listening on a free loopback port unless told otherwise."""
    from crawler_node.daemon import run

    if args.log_level.upper() not in LOG_LEVELS:
        print(f"crawler-node crawl: error: --log-level {args.log_level!r} is not one of {', '.join(LOG_LEVELS)}",
              file=sys.stderr)
        return 2
    flags = _flags(args)
    flags["seeds"] = [*flags.get("seeds", []), *args.seed_urls]
    flags["exit_when_idle"] = True
    if "listen" not in flags and "CRAWLER_LISTEN" not in os.environ:
        flags["listen"] = "127.0.0.1:0"
    try:
        settings = load_settings(flags, config_path=args.config)
    except SettingsError as exc:
        print(f"crawler-node crawl: error: {exc}", file=sys.stderr)
        return 2
    if not settings.seeds:
        print("crawler-node crawl: error: give at least one seed URL", file=sys.stderr)
        return 2
    if settings.peers or settings.peer_dns:
        print("crawler-node crawl: error: crawl runs one node; for a cluster use run --exit-when-idle",
              file=sys.stderr)
        return 2
    return run(settings, log_level=args.log_level)


def cmd_config(args: argparse.Namespace) -> int:
    """`config --show`: every setting's effective value and where it came from."""
    try:
        settings, sources = load_settings_with_sources(_flags(args), config_path=args.config)
    except SettingsError as exc:
        print(f"crawler-node config: error: {exc}", file=sys.stderr)
        return 2
    rows = []
    for field in settings_fields():
        if field.name in HIDDEN and field.name not in sources:
            continue
        value = getattr(settings, field.name)
        shown = "(set)" if field.name == "secret" and value else json.dumps(value, default=str)
        source = sources.get(field.name, "default")
        if source.startswith("flag "):  # the option as typed: --allow-host, not the field's name
            source = "flag --" + _FLAG_NAMES.get(field.name, field.name.replace("_", "-"))
        rows.append((field.name, shown, source))
    if args.json:
        print(json.dumps({name: {"value": "(set)" if name == "secret" and getattr(settings, name) else
                                 getattr(settings, name), "source": source} for name, _, source in rows},
                         indent=2, default=str))
        return 0
    width = max(len(name) for name, _, _ in rows)
    for name, shown, source in rows:
        print(f"{name:<{width}}  {shown}  [{source}]")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    from crawler_node.tools import recover

    try:
        settings = load_settings(_flags(args), config_path=args.config)
    except SettingsError as exc:
        print(f"crawler-node recover: error: {exc}", file=sys.stderr)
        return 2
    return recover.main(settings.data_dir, settings.node_config().scope, force=args.force)


def cmd_export(args: argparse.Namespace) -> int:
    from crawler_node.tools import export

    dirs = [Path(path) for path in args.data_dirs]
    missing = [str(path) for path in dirs if not path.is_dir()]
    problems = [f"--from {', '.join(missing)}: not a directory"] if missing else []
    if not (args.items or args.crawl_log or args.warc):
        problems.append("say what to export: --items FILE, --crawl-log FILE or --warc DIR")
    if problems:
        print(f"crawler-node export: error: {'; '.join(problems)}", file=sys.stderr)
        return 2
    try:
        said = []
        if args.items:
            with export.output(args.items) as out:
                said.append(f"{export.export_items(dirs, out, args.format)} items ({args.format}) to {args.items}")
        if args.crawl_log:
            with export.output(args.crawl_log) as out:
                said.append(f"{export.export_crawl_log(dirs, out)} crawl.log lines to {args.crawl_log}")
        if args.warc:
            files, lines = export.export_warc(dirs, Path(args.warc))
            said.append(f"{files} WARC files and an index of {lines} lines to {args.warc}/collections/"
                        f"{export.COLLECTION} (serve it with `wayback` run in {args.warc})")
    except (export.ExportError, OSError) as exc:
        print(f"crawler-node export: error: {exc}", file=sys.stderr)
        return 1
    print(f"exported from {len(dirs)} data director{'y' if len(dirs) == 1 else 'ies'}: " + "; ".join(said),
          file=sys.stderr if "-" in (args.items, args.crawl_log) else sys.stdout)
    return 0


MAX_DEMO_NODES = 200  # on 127.0.0.2 and up: loopback addresses, one each


def cmd_demo(args: argparse.Namespace) -> int:
    from crawler_node.tools.demo import run_demo

    problems = [f"--{name} must be at least 1, got {value}" for name, value in
                (("hosts", args.hosts), ("pages", args.pages), ("nodes", args.nodes)) if value < 1]
    if args.nodes > MAX_DEMO_NODES:
        problems.append(f"--nodes must be at most {MAX_DEMO_NODES}, got {args.nodes}")
    if args.timeout <= 0:
        problems.append(f"--timeout must be more than 0 seconds, got {args.timeout:g}")
    if problems:
        print(f"crawler-node demo: error: {'; '.join(problems)}", file=sys.stderr)
        return 2
    return run_demo(hosts=args.hosts, pages=args.pages, seed=args.seed, data_dir=args.data_dir,
                    timeout_s=args.timeout, nodes=args.nodes)


class _Parser(argparse.ArgumentParser):
    """No abbreviated options: `--allow-privat` must not pass for `--allow-private` (argparse
    accepts any unique prefix by default, and a prefix that stops being unique when an option
    is added would change meaning silently)."""

    def __init__(self, *args: typing.Any, **kwargs: typing.Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="crawler-node", description="A peer-to-peer distributed web crawler.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser("run", help="run a crawler node (the daemon)",
                              description="Run a crawler node. No peers = a one-node cluster.")
    _add_settings_options(run)
    run.set_defaults(handler=cmd_run)

    crawl = commands.add_parser(
        "crawl", help="crawl from these seeds on one node until done, then print and write stats.json",
        description="Run one node from these seeds until the crawl is done (run --exit-when-idle), print its "
                    "summary and write it as stats.json in the data directory. Exit 0 when done, 3 after "
                    "--idle-timeout-s, 4 when nothing was fetched because every URL was refused.")
    crawl.add_argument("seed_urls", nargs="*", metavar="SEED", help="seed URLs (as --seed)")
    _add_settings_options(crawl)
    crawl.set_defaults(handler=cmd_crawl)

    submit = commands.add_parser("submit", help="add seed URLs through any node",
                                 description="Add seed URLs through any node of the cluster.")
    submit.add_argument("--node", required=True, help="base URL of a node, e.g. http://127.0.0.1:8080")
    submit.add_argument("--secret", help="cluster token, if the cluster has one (default: $CRAWLER_SECRET)")
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

    add_control_commands(commands)

    recover = commands.add_parser(
        "recover", help="rebuild a lost or damaged frontier from crawl.log and the WARC files",
        description="Rebuild the frontier of a stopped node's data directory from its crawl.log and the "
                    "metadata records of its WARC files (the damaged files are moved aside). Give it the "
                    "node's own settings (--data-dir, --allow-host, --max-depth or --config): links are "
                    "queued only when they are in scope.")
    _add_settings_options(recover)
    recover.add_argument("--force", action="store_true",
                         help="rebuild even a frontier that passes the start-up checks (it is moved aside)")
    recover.set_defaults(handler=cmd_recover)

    config = commands.add_parser(
        "config", help="show every setting's effective value and where it came from",
        description="Print the value `crawler-node run` with these options, this environment and this config "
                    "file would use for each setting, and where it comes from (flag, environment, config file, "
                    "default). The cluster secret is shown only as (set).")
    config.add_argument("--show", action="store_true", help="print the settings (the default action)")
    config.add_argument("--json", action="store_true", help="print them as JSON")
    _add_settings_options(config)
    config.set_defaults(handler=cmd_config)

    export = commands.add_parser(
        "export", help="gather what a crawl produced from its members' data directories",
        description="Gather the items, the crawl logs and the archive of every member into one feed, one log "
                    "and one pywb collection. Read from disk: export a stopped crawl, or one at rest.")
    export.add_argument("--from", dest="data_dirs", action="append", required=True, metavar="DIR",
                        help="a member's data directory (repeatable)")
    export.add_argument("--items", metavar="FILE", help="write the pipelines' items here (- for stdout)")
    export.add_argument("--format", choices=("jsonl", "json", "csv", "xml"), default="jsonl",
                        help="the items' format, as Scrapy's feed exports write it (default jsonl)")
    export.add_argument("--crawl-log", metavar="FILE", help="write every crawl.log line here, in time order")
    export.add_argument("--warc", metavar="DIR", help="make DIR/collections/crawl a pywb collection of the WARC files")
    export.set_defaults(handler=cmd_export)

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


def _unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> int:
    """One line for arguments no option takes, naming the nearest option of that command."""
    command = getattr(args, "command", None) or ""
    subparser = _subparsers(parser).get(command, parser)
    options = [option for option in subparser._option_string_actions if option.startswith("--")]
    hints = {}
    for extra in extras:
        flag = extra.split("=", 1)[0]
        if flag.startswith("-") and (close := difflib.get_close_matches(flag, options, n=1, cutoff=0.6)):
            hints[flag] = close[0]
    if len(extras) == 1 and hints:
        said = f" (did you mean {next(iter(hints.values()))}?)"
    else:
        said = "".join(f" ({flag}: did you mean {option}?)" for flag, option in hints.items())
    print(f"crawler-node {command}: error: unrecognized arguments: {' '.join(extras)}{said}; "
          f"see crawler-node {command} --help".replace("  ", " "), file=sys.stderr)
    return 2


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _node_problem(node: str | None) -> str | None:
    """--node must be a node's base URL: without a scheme, urllib says only "unknown url type"."""
    if node is None:
        return None
    parts = urllib.parse.urlsplit(node)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"--node {node!r} is not a node's URL: give it as http://HOST:PORT"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        return _unknown(parser, args, extras)
    if (problem := _node_problem(getattr(args, "node", None))) is not None:
        print(f"crawler-node {args.command}: error: {problem}", file=sys.stderr)
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
