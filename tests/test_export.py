"""`crawler-node export` on what a real 3-member crawl left on disk: one feed of every member's
items in each format, readable by Python's own csv, json and XML readers, one crawl log in
time order, and one pywb collection that replays the pages."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, peers_of, plan
from conftest import read_crawl_log, roots, wait_until
from replay_helpers import COLLECTION, Wayback

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.export import crawl_log_files, item_files, read_items
from crawler_node.tools.node_process import NodeProcess

IDS = ["a", "b", "c"]
HOSTS = 12
PAGES = 10


@pytest.fixture(scope="module")
def crawled(tmp_path_factory) -> tuple[list[Path], Path]:
    """Three members crawl testweb with the summary pipeline to the end and stop: their data
    directories, and a scratch directory."""
    tmp = tmp_path_factory.mktemp("export")
    addresses = plan(IDS)
    peers = peers_of(addresses)
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=61, tmp_dir=tmp) as web:
        nodes = [NodeProcess(node_id=node_id, data_dir=tmp / node_id, host=addresses[node_id][0],
                             port=addresses[node_id][1], proxy=web.url, peers=peers,
                             seeds=roots(HOSTS) if node_id == "a" else (),
                             extra_args=[*FAST_CLUSTER, *SECURED, "--allow-host", "*", "--pipeline", "summary"])
                 for node_id in IDS]
        try:
            for node in nodes:
                node.start(wait=False)
            for node in nodes:
                node.wait_healthy(30)
            wait_until(lambda: all(cluster_idle(node) for node in nodes), 120, "the cluster idle")
        finally:
            codes = [node.stop(timeout_s=30) for node in nodes]
    assert codes == [0, 0, 0]
    return [node.data_dir for node in nodes], tmp


def export(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("CRAWLER_")}
    return subprocess.run([sys.executable, "-m", "crawler_node", "export", *args], capture_output=True,
                          text=True, timeout=120, env=environment)


def sources(dirs: list[Path]) -> list[str]:
    return [argument for data_dir in dirs for argument in ("--from", str(data_dir))]


def test_every_members_items_in_each_format_one_row_per_item(crawled) -> None:
    dirs, tmp = crawled
    items = list(read_items(item_files(dirs)))
    members = {json.loads(line)["url"] for data_dir in dirs for path in item_files([data_dir])
               for line in path.read_text().splitlines()}
    assert len(items) >= HOSTS * 5 and {item["url"] for item in items} == members
    assert sum(1 for data_dir in dirs if item_files([data_dir])) >= 2, "items of more than one member"

    for fmt in ("jsonl", "json", "csv", "xml"):
        target = tmp / f"items.{fmt}"
        done = export(*sources(dirs), "--items", str(target), "--format", fmt)
        assert done.returncode == 0, done.stderr
        assert f"{len(items)} items ({fmt})" in done.stdout

    lines = [json.loads(line) for line in (tmp / "items.jsonl").read_text().splitlines()]
    assert lines == items
    assert json.loads((tmp / "items.json").read_text()) == items
    with (tmp / "items.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(items) and [row["url"] for row in rows] == [item["url"] for item in items]
    assert set(rows[0]) == {key for item in items for key in item}  # every field any item has
    first = next(item for item in items if item.get("title"))
    assert next(row for row in rows if row["url"] == first["url"])["title"] == first["title"]
    root = ElementTree.parse(tmp / "items.xml").getroot()
    assert root.tag == "items" and len(root) == len(items)
    assert [element.findtext("url") for element in root] == [item["url"] for item in items]


def test_one_crawl_log_in_time_order(crawled) -> None:
    dirs, tmp = crawled
    target = tmp / "crawl.log"
    done = export(*sources(dirs), "--crawl-log", str(target))
    assert done.returncode == 0, done.stderr
    merged = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(merged) == sum(len(read_crawl_log(data_dir, everything=True)) for data_dir in dirs)
    stamps = [line["fetched_at"] for line in merged]
    writers = {data_dir.name for data_dir in dirs if read_crawl_log(data_dir, everything=True)}
    assert stamps == sorted(stamps) and {line["node"] for line in merged} == writers and len(writers) >= 2
    assert all(crawl_log_files(data_dir) for data_dir in dirs if data_dir.name in writers)


class CollectionWayback(Wayback):
    """pywb on the collection `export --warc` made: its archive and its one merged index."""

    def __init__(self, collection: Path, **kwargs: object) -> None:
        super().__init__(collection / "archive", **kwargs)  # type: ignore[arg-type]
        self.collection = collection

    def config(self) -> dict:
        return {"collections": {COLLECTION: {"index_paths": str(self.collection / "indexes"),
                                             "archive_paths": f"{self.collection / 'archive'}/"}}}


def test_one_pywb_collection_replays_every_members_pages(crawled) -> None:
    dirs, tmp = crawled
    target = tmp / "collection"
    done = export(*sources(dirs), "--warc", str(target))
    assert done.returncode == 0, done.stderr
    collection = target / "collections" / COLLECTION
    warcs = sorted(path.name for data_dir in dirs for path in (data_dir / "warc").glob("*.warc.gz"))
    assert sorted(path.name for path in (collection / "archive").iterdir()) == warcs
    index = (collection / "indexes" / "index.cdxj").read_text().splitlines()
    assert index == sorted(index) and len(index) >= HOSTS * PAGES // 2
    pages = {}  # one HTML page fetched by each member that fetched one
    for data_dir in dirs:
        for line in read_crawl_log(data_dir):
            if line["status"] == 200 and line["warc_file"] and (line["content_type"] or "").startswith("text/html"):
                pages[line["node"]] = line["url"]
                break
    assert len(pages) >= 2, "pages of more than one member"
    with CollectionWayback(collection, work_dir=tmp / "pywb") as wayback:
        for node, url in pages.items():
            assert wayback.replay(url).status == 200, f"{node}'s page {url}"


def test_an_export_of_nothing_or_from_nowhere_is_a_one_line_error(tmp_path: Path) -> None:
    nothing = export("--from", str(tmp_path))
    assert nothing.returncode == 2 and nothing.stderr.strip() == (
        "crawler-node export: error: say what to export: --items FILE, --crawl-log FILE or --warc DIR")
    nowhere = export("--from", str(tmp_path / "absent"), "--items", str(tmp_path / "items.csv"), "--format", "csv")
    assert nowhere.returncode == 2 and "not a directory" in nowhere.stderr and not (tmp_path / "items.csv").exists()
