"""Throughput of one node against nginx serving a real documentation set over HTTPS, no latency.

Runs, side by side in one invocation and against the same nginx (Debian's, one worker, TLS with
a CA made here, an IP-literal URL with an IP SAN so nobody needs DNS):
  1. ``wget --mirror`` from the home page: one connection, one request at a time, robots.txt
     honoured; what a user would reach for first;
  2. a bare aiohttp GET loop over every HTML file of the set (no frontier, no parsing, no
     storage), with one connection (wget's) and with the node's per-host ceiling;
  3. one ``crawler-node run`` (a real process, default settings plus --allow-private,
     --ca-bundle and --allow-host for the docs' own host) crawling from the home page.
Pages are HTML responses with status 200 as nginx's access log records them for each run; pages/s
is that over the run's wall time (the node's ends at its last commit, as throughput.py's). The
rounds alternate the order and the median round's ratios are the result. For the node it also
prints each process's CPU per page (its loop thread and other threads apart) and where its wall
time went by nginx's log: to the first request, the requests, and after the last answer.

Not run in CI: it needs a documentation package (Debian's postgresql-doc-15, about 1,170 pages,
or python3-doc) and nginx and wget; without them it says what is missing and exits 0.

    apt-get install nginx-light wget postgresql-doc-15
    python bench/realweb.py [--docs DIR] [--rounds 3] [--copies 8]

With --copies N the set is served on N ports, N authorities crawled at once (a crawl long enough
to profile); wget mirrors them one after the other, and the bare loops keep their connections
per authority.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from crawler_node.settings import PACES
from crawler_node.tools import client
from crawler_node.tools.node_process import NodeProcess, free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import process_cpu_by_role  # noqa: E402

TREE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TREE / "tests"))  # the small real web's helpers: certificates, nginx, its log

from realweb import Access, ServerProcess  # noqa: E402
from realweb_certs import make_certificates  # noqa: E402
from realweb_sites import LOG_FORMAT  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DOC_SETS = (Path("/usr/share/doc/postgresql-doc-15/html"),)  # then python3-doc's, whichever version
ADDRESS = "127.0.0.1"
AGENTS = {"wget": "bench-wget/1", "bare": "bench-bare/1"}  # the node sends its own


def nginx_conf(*, prefix: Path, docs: Path, ports: list[int], cert: Path, key: Path) -> str:
    temp = "".join(f"  {kind}_temp_path {prefix / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                          "scgi"))
    return (
        f"daemon off;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'} warn;\n"
        "events { worker_connections 1024; }\nhttp {\n"
        "  types { text/html html; text/css css; image/svg+xml svg; text/plain txt; }\n"
        "  default_type application/octet-stream;\n"
        f"  log_format bench escape=json '{LOG_FORMAT}';\n  access_log {prefix / 'access.log'} bench;\n{temp}"
        "  sendfile on;\n  keepalive_timeout 60s;\n  keepalive_requests 100000;\n"
        "  server {\n" + "".join(f"    listen {ADDRESS}:{port} ssl;\n" for port in ports) + f"    root {docs};\n"
        f"    ssl_certificate {cert};\n    ssl_certificate_key {key};\n  }}\n}}\n"
    )


class AccessLog:
    """nginx's log, read from where the previous run left it."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def skip(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since(self) -> list[Access]:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        self.offset += len(data)
        return [Access.from_json(line) for line in data.decode(errors="replace").splitlines() if line.strip()]


def is_page(record: Access) -> bool:
    return record.status == 200 and (record.path.endswith(".html") or record.path.endswith("/"))


def summary(records: list[Access], wall_s: float, cpu_s: float) -> dict:
    pages = sum(is_page(record) for record in records)
    return {"pages": pages, "requests": len(records), "wall_s": wall_s, "pages_per_s": pages / wall_s,
            "cpu_s_per_1000": 1000 * cpu_s / max(pages, 1)}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for children: wget, ended nodes
    return usage.ru_utime + usage.ru_stime


def run_wget(root_urls: list[str], ca: Path, out: Path) -> float:
    """One `wget --mirror` per root, one after the other (wget is serial anyway)."""
    started = time.perf_counter()
    for root_url in root_urls:
        result = subprocess.run(
            ["wget", "--mirror", "--no-parent", "--no-verbose", "--ca-certificate", str(ca), "-U", AGENTS["wget"],
             "-P", str(out), root_url], capture_output=True, text=True, timeout=1800,
        )
        if result.returncode not in (0, 8):  # 8: some answer was an error (a broken link); the rest is mirrored
            raise RuntimeError(f"wget exited {result.returncode}: {result.stderr[-1000:]}")
    return time.perf_counter() - started


async def bare_loop(urls: list[str], ca: Path, per_host: int, hosts: int = 1) -> float:
    """GET every URL with `per_host` connections to each of `hosts` authorities."""
    concurrency = per_host * hosts
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)

    async def worker(session: aiohttp.ClientSession) -> None:
        while True:
            try:
                url = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            async with session.get(url, allow_redirects=False) as response:
                await response.read()

    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=per_host,
                                     ssl=ssl.create_default_context(cafile=str(ca)))
    async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                     headers={"User-Agent": AGENTS["bare"]}) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return time.perf_counter() - started


def node_run(root_urls: list[str], ca: Path, data_dir: Path,
             extra: list[str]) -> tuple[float, float, dict[str, float], dict[str, int]]:
    """(Unix time of the submit, wall seconds to the node's last commit, CPU seconds of each of
    its processes, its frontier calls by name: each a trip to the frontier's thread)."""
    # The documentation links out (postgresql.org, wikipedia): wget --mirror stays on the host by
    # default, the node is told to (--allow-host), so both crawl the same set.
    node = NodeProcess(node_id="bench", data_dir=data_dir, extra_args=[
        "--allow-private", "--ca-bundle", str(ca), "--allow-host", ADDRESS, "--log-level", "WARNING", *extra,
    ])
    with node:
        cpu0, started = process_cpu_by_role(node.pid), time.time()
        client.submit(node.url, root_urls)
        status = node.wait_idle(timeout_s=1800, settle_polls=1, interval_s=0.2)
        wall = (status.get("last_stored_at") or time.time()) - started
        cpu = process_cpu_by_role(node.pid)  # to the poll: a few idle milliseconds more
    calls = {name: histogram["count"] for name, histogram in status.get("frontier_calls", {}).items()}
    return started, wall, {role: seconds - cpu0.get(role, 0.0) for role, seconds in cpu.items()}, calls


def timeline(records: list[Access], started: float, wall: float) -> dict[str, float]:
    """Where a node's crawl spent its wall time, as nginx saw it: to its first request after
    the submit, from there to the last answer, and from that to the node's last commit (the
    parse and store queues draining)."""
    first, last = min(record.start for record in records), max(record.end for record in records)
    return {"to_first_request_s": first - started, "requests_s": last - first,
            "after_last_answer_s": started + wall - last}


def missing_tools(docs: Path | None) -> list[str]:
    missing = [tool for tool in ("nginx", "wget") if not (shutil.which(tool) or shutil.which(tool, path="/usr/sbin"))]
    if docs is None:
        missing.append("a documentation set with an index.html (postgresql-doc-15 or python3-doc; or --docs DIR)")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, help="a directory of HTML with an index.html")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--node-arg", action="append", default=[], help="extra option for crawler-node run")
    parser.add_argument("--copies", type=int, default=1,
                        help="serve the set on this many ports, each an authority of its own (a crawl long enough "
                             "to profile, and several hosts at once)")
    args = parser.parse_args()
    candidates = [*DOC_SETS, *sorted(Path("/usr/share/doc").glob("python3*/html"))]
    docs = next((d for d in ([args.docs] if args.docs else candidates) if (d / "index.html").exists()), None)
    missing = missing_tools(docs)
    if missing:
        print(f"bench/realweb.py skipped: missing {'; '.join(missing)}")
        return 0
    assert docs is not None
    urls_paths = sorted(str(path.relative_to(docs)) for path in docs.rglob("*.html"))
    ceiling = int(PACES["adaptive"]["host_limit_ceiling"])  # per host at most, at NodeProcess's pace
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-realweb-") as tmp_name:
        tmp = Path(tmp_name)
        certs = make_certificates(tmp / "certs", names=["docs.bench.invalid"], ips=[ADDRESS],
                                  expired_name="expired.invalid", selfsigned_name="self.invalid",
                                  wrong_name="wrong.invalid")
        ports = [free_port(ADDRESS) for _ in range(args.copies)]
        prefix = tmp / "nginx"
        prefix.mkdir()
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_conf(prefix=prefix, docs=docs, ports=ports, cert=certs.good.cert, key=certs.good.key))
        nginx = ServerProcess(name="nginx", command=["nginx", "-c", str(conf), "-p", str(prefix), "-e",
                                                      str(prefix / "error.log")], log=prefix / "stderr.log")
        roots = [f"https://{ADDRESS}:{port}/" for port in ports]
        urls = [root + path for path in urls_paths for root in roots]  # the copies interleaved
        log = AccessLog(prefix / "access.log")
        os.chdir(tmp)  # nodes start from a neutral working directory (see throughput.py)
        try:
            nginx.start([(ADDRESS, port) for port in ports])
            print(f"{docs}: {len(urls_paths)} HTML files, served at {', '.join(roots)}; node per-host ceiling "
                  f"{ceiling}", flush=True)
            asyncio.run(bare_loop(urls, certs.ca, ceiling, len(roots)))  # untimed: the files into the page cache
            sides = ["wget", "bare-1", f"bare-{ceiling}", "node"]
            for index in range(args.rounds):
                result: dict = {}
                for side in sides if index % 2 == 0 else reversed(sides):
                    log.skip()
                    if side == "wget":
                        before = children_cpu()
                        wall = run_wget(roots, certs.ca, tmp / f"wget-{index}")
                        cpu = children_cpu() - before
                    elif side == "node":
                        started, wall, split, calls = node_run(roots, certs.ca, tmp / f"node-{index}", args.node_arg)
                        cpu = sum(split.values())
                    else:
                        before = time.process_time()
                        wall = asyncio.run(bare_loop(urls, certs.ca, int(side.split("-")[1]), len(roots)))
                        cpu = time.process_time() - before
                    records = log.since()
                    result[side] = summary(records, wall, cpu)
                    if side == "node":  # which of its processes pays, per page, and where its time went
                        result[side]["cpu_us_per_page"] = {
                            role: 1e6 * seconds / max(result[side]["pages"], 1) for role, seconds in split.items()}
                        result[side]["timeline"] = timeline(records, started, wall)
                        result[side]["frontier_calls_per_1000_pages"] = {
                            name: 1000 * count / max(result[side]["pages"], 1) for name, count in calls.items()}
                node, bare, wget = result["node"], result[f"bare-{ceiling}"], result["wget"]
                result["ratios"] = {
                    "node/bare": node["pages_per_s"] / bare["pages_per_s"],
                    "node/wget": node["pages_per_s"] / wget["pages_per_s"],
                    "bare-1/wget": result["bare-1"]["pages_per_s"] / wget["pages_per_s"],
                }
                rounds.append(result)
                print(f"round {index + 1}: " + "  ".join(
                    f"{side} {result[side]['pages']} pages {result[side]['pages_per_s']:5.0f}/s "
                    f"({result[side]['cpu_s_per_1000']:.2f} CPU-s/1000)" for side in sides
                ) + "  " + "  ".join(f"{name} {value:.2f}" for name, value in result["ratios"].items())
                    + "; node per page: " + ", ".join(
                    f"{role} {us:.0f} µs" for role, us in result["node"]["cpu_us_per_page"].items())
                    + "; node's wall: " + ", ".join(
                    f"{name} {seconds:.3f}" for name, seconds in result["node"]["timeline"].items())
                    + "; frontier calls per 1,000 pages: " + ", ".join(
                    f"{name} {per:.0f}" for name, per in result["node"]["frontier_calls_per_1000_pages"].items()),
                    flush=True)
        finally:
            nginx.stop()
    median = sorted(rounds, key=lambda r: r["ratios"]["node/bare"])[len(rounds) // 2]
    print(f"median round: node {median['node']['pages_per_s']:.0f} pages/s, bare aiohttp x{ceiling} "
          f"{median[f'bare-{ceiling}']['pages_per_s']:.0f}, wget --mirror {median['wget']['pages_per_s']:.0f}; "
          + ", ".join(f"{name} {value:.2f}" for name, value in median["ratios"].items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "realweb.json").write_text(json.dumps(
        {"docs": str(docs), "html_files": len(urls_paths), "copies": args.copies, "ceiling": ceiling,
         "node_args": args.node_arg,
         "median": median, "rounds": rounds},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
