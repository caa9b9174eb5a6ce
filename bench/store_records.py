"""CPU of the store per record: writing (WARC records, crawl.log line, digest index, CDXJ line)
and closing (the index written), for 5,000 HTML pages of ~20 KB, this checkout and another
side by side, each in a fresh process.

    python bench/store_records.py [--other-tree /tmp/old] [--records 5000]

With this checkout it also reports the cost with no metadata record and with no digest index,
so each feature's share shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent

_CHILD = r'''
import inspect, json, shutil, sys, tempfile, time
from pathlib import Path
from crawler_node.store.writer import FetchRecord, Store
count, options = int(sys.argv[1]), json.loads(sys.argv[2])
new = "outlinks" in inspect.signature(FetchRecord).parameters
body = (b"<html><body>" + b"".join(b"<a href='/p/%d'>link %d</a> some text here " % (i, i) for i in range(60))
        + b"</body></html>") * 3
links = "\n".join(f"http://site-1.test/p/{i}" for i in range(60))
records = []
for n in range(count):
    page = body + b"%d" % n
    fields = dict(url=f"http://site-1.test/p/{n}", host="site-1.test", node_id="n", attempt=1, fetched_at=time.time(),
                  outcome="ok", status=200, request_headers=[("User-Agent", "x"), ("Accept", "*/*")],
                  response_headers=[("Content-Type", "text/html"), ("Content-Length", str(len(page)))], body=page)
    if new:
        fields.update(status_line="HTTP/1.1 200 OK", depth=2, via="http://site-1.test/",
                      outlinks=None if options.get("metadata") is False else links)
    records.append(FetchRecord(**fields))
directory = Path(tempfile.mkdtemp(prefix="bench-store-"))
store_options = {"dedup_max_entries": 0} if options.get("dedup") is False and new else {}
store = Store(directory, node_id="n", **store_options)
started = time.process_time()
for start in range(0, count, 256):
    store.write(records[start:start + 256])
written = time.process_time() - started
started = time.process_time()
store.close()
closed = time.process_time() - started
shutil.rmtree(directory)
print(json.dumps({"write_us": 1e6 * written / count, "close_us": 1e6 * closed / count}))
'''


def measure(tree: Path, count: int, **options: object) -> dict:
    result = subprocess.run([sys.executable, "-c", _CHILD, str(count), json.dumps(options)], capture_output=True,
                            text=True, check=True, env=dict(os.environ, PYTHONPATH=str(tree)), cwd="/")
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other-tree", type=Path)
    parser.add_argument("--records", type=int, default=5000)
    args = parser.parse_args()
    runs = [("this", TREE, {}), ("this, no metadata record", TREE, {"metadata": False}),
            ("this, no digest index", TREE, {"dedup": False})]
    if args.other_tree is not None:
        runs.append((f"other ({args.other_tree})", args.other_tree.resolve(), {}))
    for name, tree, options in runs:
        cost = measure(tree, args.records, **options)
        print(f"{name:32} write {cost['write_us']:6.1f} µs/record, close {cost['close_us']:6.1f} µs/record",
              flush=True)


if __name__ == "__main__":
    main()
