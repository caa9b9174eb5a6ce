"""What a robots.txt decision costs, and how Google's own suite scores each parser (issue 46).

For each robots.txt file of a directory: the URLs its own rules name (``*`` read as ``x``, ``$``
dropped) and a few more, asked for one product token. Side by side in one process, rounds
alternating, each candidate that is importable:

- **node**: ``core.robots.RobotsRules`` (the file read as the reference reads it, protego
  matching): parsed once per file, then one ``allowed(url)`` per URL;
- **protego**: ``Protego.parse`` of the whole text, ``can_fetch`` (the node before issue 46);
- **fast-robotstxt** (ctypes over Google's robots.cc) and **jwm.robotstxt** (pybind11 over it):
  the reference itself; their API takes the file with every URL, so each decision parses it;
- **robotspy** (pure Python, parsed once) and **gpyrobotstxt** (a pure-Python port of robots.cc,
  GPL-3.0: measured, not a candidate), each parsing as its API allows.

Then each candidate answers the cases of tests/data/robots/google_robots_test.json
("decisions" and "parser_level", 163), and the count it gets right is printed beside its cost.

Not run in CI. The comparison libraries are not dependencies of the node:

    pip install fast-robotstxt jwm.robotstxt robotspy gpyrobotstxt
    python bench/robots_decide.py --files DIR [--agent crawler-node] [--rounds 3]

DIR: robots.txt files, one a file (protego's tests/test_data has 3,000 real ones).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from protego import Protego

from crawler_node.core.robots import RobotsRules

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "robots" / "google_robots_test.json"
EXTRA_PATHS = ("/", "/index.html", "/search?q=robots", "/a/b/c.php", "/wp-admin/admin-ajax.php", "/%E3%83%84/",
               "/images/logo.gif", "/private/x?y=1")
RULE = re.compile(r"^\s*(?:dis)?allow\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)

# A decision: (the file's bytes, its parsed form if the candidate parses once, the URL) -> allowed
Decide = Callable[[bytes, object, str], bool]


def candidates(agent: str) -> dict[str, tuple[Callable[[bytes], object], Decide]]:
    """name: (parse a file once, decide one URL). A candidate without a parsed form re-reads the
    file in its decision (its parse returns None)."""
    found: dict[str, tuple[Callable[[bytes], object], Decide]] = {
        "node": (lambda body: RobotsRules.parse(body, agent),
                 lambda body, parsed, url: parsed.allowed(url)),  # type: ignore[attr-defined]
        "protego": (lambda body: Protego.parse(body.decode("utf-8", "replace")),
                    lambda body, parsed, url: parsed.can_fetch(url, agent)),  # type: ignore[attr-defined]
    }
    try:
        from robotstxt import robots as fast  # type: ignore[import-not-found]  # fast-robotstxt

        matcher = fast._lib.robots_matcher_create()
        token = agent.encode()

        def fast_decide(body: bytes, parsed: object, url: str) -> bool:
            raw = url.encode()
            return bool(fast._lib.robots_allowed_by_robots(matcher, body, len(body), token, len(token), raw, len(raw)))

        found["fast-robotstxt"] = (lambda body: None, fast_decide)
    except (ImportError, OSError):
        pass
    try:
        from jwm.robotstxt import googlebot  # type: ignore[import-not-found]

        jwm_matcher = googlebot.RobotsMatcher()
        found["jwm.robotstxt"] = (
            lambda body: body.decode("utf-8", "surrogateescape").encode("utf-8", "replace").decode("utf-8"),
            lambda body, text, url: jwm_matcher.OneAgentAllowedByRobots(text, agent, url))
    except ImportError:
        pass
    try:
        from robots import RobotsParser  # type: ignore[import-not-found]  # robotspy

        found["robotspy"] = (lambda body: RobotsParser.from_string(body.decode("utf-8", "replace")),
                             lambda body, parsed, url: parsed.can_fetch(agent, url))  # type: ignore[attr-defined]
    except ImportError:
        pass
    try:
        from gpyrobotstxt.robots_cc import RobotsMatcher as GpyMatcher  # type: ignore[import-not-found]

        gpy = GpyMatcher()
        found["gpyrobotstxt"] = (lambda body: None,
                                 lambda body, parsed, url: gpy.one_agent_allowed_by_robots(body, agent, url))
    except ImportError:
        pass
    return found


def urls_of(body: bytes) -> list[str]:
    paths = [match.group(1).replace("*", "x").rstrip("$") for match in RULE.finditer(body.decode("utf-8", "replace"))]
    paths = [path if path.startswith("/") else "/" + path for path in paths]
    return ["https://example.com" + path for path in [*paths[:200], *EXTRA_PATHS]]


def conformance(parse: Callable[[bytes], object], decide: Decide, agent_cases: list[dict]) -> int:
    run = re.compile(r"<(.)\*(\d+)>")
    right = 0
    for case in agent_cases:
        body = run.sub(lambda m: m.group(1) * int(m.group(2)), case["robotstxt"]).encode("utf-8", "surrogateescape")
        url = run.sub(lambda m: m.group(1) * int(m.group(2)), case["url"])
        try:
            # each case names its own agent: candidates are built per agent
            allowed = decide(body, parse(body), url)
        except Exception:  # noqa: BLE001 - a candidate that raises gets the case wrong
            continue
        right += allowed is case["allowed"]
    return right


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--files", type=Path, required=True)
    options.add_argument("--agent", default="crawler-node")
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    files = [(path.read_bytes()) for path in sorted(args.files.iterdir()) if path.is_file()]
    work = [(body, urls_of(body)) for body in files]
    decisions = sum(len(urls) for _, urls in work)
    chosen = candidates(args.agent)
    parse_us: dict[str, list[float]] = {name: [] for name in chosen}
    decide_us: dict[str, list[float]] = {name: [] for name in chosen}
    errors = dict.fromkeys(chosen, 0)
    for _ in range(args.rounds):
        for name, (parse, decide) in chosen.items():
            started = time.perf_counter()
            parsed = [parse(body) for body, _ in work]
            parse_us[name].append((time.perf_counter() - started) / len(work) * 1e6)
            started = time.perf_counter()
            for (body, urls), one in zip(work, parsed, strict=True):
                for url in urls:
                    try:
                        decide(body, one, url)
                    except Exception:  # noqa: BLE001 - counted: a parser that raises on real files
                        errors[name] += 1
            decide_us[name].append((time.perf_counter() - started) / decisions * 1e6)
    cases = json.loads(DATA.read_text(encoding="utf-8"))
    suite = cases["decisions"] + cases["parser_level"]
    print(f"{len(work)} files, {sum(map(len, files)) / len(files) / 1024:.1f} KiB each on average, "
          f"{decisions} decisions as {args.agent!r}; {args.rounds} rounds, medians")
    print(f"{'candidate':16} {'parse µs/file':>14} {'µs/decision':>12} {'Google suite':>13} {'raised':>7}")
    for name in chosen:
        right = sum(conformance(*candidates(agent)[name], [case for case in suite if case["agent"] == agent])
                    for agent in {case["agent"] for case in suite})
        print(f"{name:16} {statistics.median(parse_us[name]):14.1f} {statistics.median(decide_us[name]):12.2f} "
              f"{right:>9}/{len(suite)} {errors[name] // args.rounds:>7}")


if __name__ == "__main__":
    main()
