"""What telling a refusal from a page costs per response (issue 47), on the real documentation
pages bench/realweb.py serves: the fetch stage's RefusalCheck.judge (decode the head, classify,
teach the soft-block history), for each page as nginx would answer it (200, text/html, nginx's
headers), identity and gzip-encoded, rounds alternating; and, for scale, what the same answer
costs the rest of the node (pages/s in bench/realweb.py).

Not run in CI. It needs a documentation set, Debian's postgresql-doc-15 by default:

    apt-get install postgresql-doc-15
    python bench/refusal_cost.py [--docs DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path

from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.refusals import RefusalRules
from crawler_node.core.response import FetchResult
from crawler_node.node.host_state import HostState
from crawler_node.node.refusal_check import RefusalCheck

DEFAULT_DOCS = Path("/usr/share/doc/postgresql-doc-15/html")
HEADERS = [("Server", "nginx/1.22.1"), ("Date", "Mon, 07 Dec 2026 18:00:00 GMT"), ("Content-Type", "text/html"),
           ("Last-Modified", "Mon, 07 Dec 2026 10:00:00 GMT"), ("Connection", "keep-alive"),
           ("ETag", '"6571a1b0-2d4f"'), ("Accept-Ranges", "bytes")]


def results(docs: Path, *, gzipped: bool) -> list[FetchResult]:
    answers = []
    for path in sorted(docs.glob("*.html")):
        body = path.read_bytes()
        headers = list(HEADERS)
        if gzipped:
            body = gzip.compress(body, 6)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        answers.append(FetchResult(url=f"https://docs.test/{path.name}", status=200, headers=headers, body=body))
    return answers


def one_round(check: RefusalCheck, answers: list[FetchResult]) -> tuple[float, int]:
    state = HostState(host="docs.test", limiter=AimdLimiter(start=2, floor=1, ceiling=8))
    refused = 0
    started = time.perf_counter()
    for answer in answers:
        refused += check.judge(state, answer) is not None
    return (time.perf_counter() - started) / len(answers) * 1e6, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not args.docs.is_dir():
        print(f"no documentation set at {args.docs}: apt-get install postgresql-doc-15, or --docs DIR")
        return
    check = RefusalCheck(rules=RefusalRules())
    sets = {"identity": results(args.docs, gzipped=False), "gzip": results(args.docs, gzipped=True)}
    sizes = [len(answer.body) for answer in sets["identity"]]
    small = sum(size <= RefusalRules().interstitial_bytes for size in sizes)
    print(f"{len(sizes)} pages, median {statistics.median(sizes) / 1024:.1f} KiB; {small} at most "
          f"{RefusalRules().interstitial_bytes // 1024} KiB (their bodies are searched)")
    timings: dict[str, list[float]] = {name: [] for name in sets}
    for _ in range(args.rounds):
        for name, answers in sets.items():
            micros, refused = one_round(check, answers)
            timings[name].append(micros)
            assert refused == 0, f"{refused} documentation pages taken for refusals"
    for name, values in timings.items():
        print(f"{name:>9}: median {statistics.median(values):.1f} µs a response "
              f"(rounds: {', '.join(f'{value:.1f}' for value in values)}); none taken for a refusal")


if __name__ == "__main__":
    main()
