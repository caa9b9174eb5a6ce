"""How many small pages per second one testweb process serves.

Starts a TestwebProcess (no latency, default page size, 100 hosts x 100 pages) and drives it
as an HTTP proxy with aiohttp (`session.get(url, proxy=testweb.url)`, keep-alive), with N
concurrent fetchers spread over client processes (one aiohttp client process saturates before
testweb does). Two phases:

  cold  every page URL fetched exactly once, as a crawl does: pages are rendered on demand
  warm  the same URLs cycled for --duration seconds: pages come from testweb's cache

testweb's own CPU use is reported, so the number can be judged against the client's share of
this machine. Prints pages/s and writes bench/results/testweb_rate.json.

    python bench/testweb_rate.py [--duration 5] [--concurrency 50] [--client-procs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from crawler_node.testweb import TestwebProcess

RESULTS = Path(__file__).resolve().parent / "results" / "testweb_rate.json"


async def _drive(proxy: str, urls: list[str], concurrency: int,
                 duration: float | None) -> dict[str, float]:
    """Fetch `urls` once each (duration None) or cycle over them for `duration` seconds."""
    counts = {"ok": 0, "other": 0, "bytes": 0}
    # aiohttp pools proxied connections per target host: an unbounded pool keeps one alive
    # per host instead of churning (the fetcher count still caps concurrency).
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        started = time.monotonic()
        deadline = None if duration is None else started + duration
        next_index = 0

        async def fetcher() -> None:
            nonlocal next_index
            while True:
                if deadline is None:
                    if next_index >= len(urls):
                        return
                elif time.monotonic() >= deadline:
                    return
                url = urls[next_index % len(urls)]
                next_index += 1
                async with session.get(url, proxy=proxy) as response:
                    body = await response.read()
                counts["ok" if response.status == 200 else "other"] += 1
                counts["bytes"] += len(body)

        await asyncio.gather(*(asyncio.create_task(fetcher(), name=f"fetcher-{k}")
                               for k in range(concurrency)))
        finished = time.monotonic()
    return {**counts, "started": started, "finished": finished}


def _client_process(proxy: str, urls: list[str], concurrency: int, duration: float | None,
                    results: multiprocessing.Queue) -> None:
    results.put(asyncio.run(_drive(proxy, urls, concurrency, duration)))


def _phase(proxy: str, urls: list[str], *, concurrency: int, procs: int,
           duration: float | None, server: psutil.Process) -> dict[str, Any]:
    queue: multiprocessing.Queue = multiprocessing.Queue()
    per_proc = max(1, concurrency // procs)
    workers = [
        multiprocessing.Process(
            target=_client_process,
            args=(proxy, urls[k::procs], per_proc, duration, queue),
            name=f"bench-client-{k}",
        )
        for k in range(procs)
    ]
    cpu_before = server.cpu_times()
    for worker in workers:
        worker.start()
    counts = [queue.get(timeout=(duration or 60) + 120) for _ in workers]
    for worker in workers:
        worker.join()
    cpu_after = server.cpu_times()
    # CLOCK_MONOTONIC is system-wide on Linux, so the clients' clocks are comparable.
    elapsed = max(c["finished"] for c in counts) - min(c["started"] for c in counts)
    ok = int(sum(c["ok"] for c in counts))
    server_cpu = sum(cpu_after[:2]) - sum(cpu_before[:2])
    return {
        "pages_per_s": round(ok / elapsed, 1),
        "pages_ok": ok,
        "non_200": int(sum(c["other"] for c in counts)),
        "bytes": int(sum(c["bytes"] for c in counts)),
        "elapsed_s": round(elapsed, 3),
        "testweb_cpu_share": round(server_cpu / elapsed, 3),
        # Independent of what else runs on the machine: pages per second of testweb CPU.
        "pages_per_testweb_cpu_s": round(ok / server_cpu, 1) if server_cpu else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="warm phase seconds")
    parser.add_argument("--concurrency", type=int, default=50, help="fetchers in total")
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=100)
    args = parser.parse_args()

    with TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1) as testweb:
        urls = [u for u in testweb.expected() if "/img/" not in u]
        server = psutil.Process(testweb.pid)
        options = dict(concurrency=args.concurrency, procs=args.client_procs, server=server)
        cold = _phase(testweb.url, urls, duration=None, **options)
        warm = _phase(testweb.url, urls, duration=args.duration, **options)
        served = sum(h["requests"] for h in testweb.stats()["hosts"].values())

    result = {
        "pages_per_s": cold["pages_per_s"],
        "cold": cold,
        "warm": warm,
        "served_by_testweb": served,
        "distinct_urls": len(urls),
        "concurrency": args.concurrency,
        "client_procs": args.client_procs,
        "cpus": psutil.cpu_count(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for name, phase in (("cold", cold), ("warm", warm)):
        print(f"{name}: {phase['pages_per_s']:.0f} pages/s ({phase['pages_ok']} pages in "
              f"{phase['elapsed_s']:.1f} s, non-200 {phase['non_200']}, "
              f"testweb CPU {phase['testweb_cpu_share']:.0%} of one core, "
              f"{phase['pages_per_testweb_cpu_s']:.0f} pages per testweb CPU-second)")
    print(f"testweb served {result['pages_per_s']:.0f} pages/s "
          f"({args.concurrency} fetchers, {args.client_procs} client processes)")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
