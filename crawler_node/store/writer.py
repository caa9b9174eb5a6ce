"""The store: every fetch attempt to the crawl log, every HTTP exchange to WARC files.

Synchronous and single-threaded by design, like the frontier: it runs in the store worker
(store.worker: its own process by default, or a thread), which the store stage hands
batches, so disk writes never block the event loop.

- `CrawlLog` (store.crawl_log): JSON lines, one per fetch attempt (including timeouts and DNS
  failures), each naming its WARC record, so tests and users can audit coverage, duplicates
  and politeness, and join the log to the archive.
- `WarcWriter` (store.warc_files): gzip WARC 1.1, records as received, revisit records for
  payloads archived before (store.digests), a CDXJ index beside each closed file (store.cdxj).
- `ItemWriter` (store.items): the pipelines' items.
- `Store`: all of them behind one `write(records)`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from crawler_node.datadir_layout import DataDirLayout
from crawler_node.runtime.datadir import writing
from crawler_node.store.cdxj import index_missing, load_libraries, unindexed
from crawler_node.store.crawl_log import CrawlLog, Location, _drop_torn_tail, iso_utc
from crawler_node.store.digests import DigestIndex
from crawler_node.store.fetch_records import SOFTWARE, CrawlInfo, FetchRecord
from crawler_node.store.items import ItemWriter
from crawler_node.store.rebuild import missing_lines
from crawler_node.store.warc_files import WarcWriter, exchange_records, stored_payload

__all__ = ["SOFTWARE", "CrawlInfo", "CrawlLog", "FetchRecord", "Location", "Store",
           "WarcWriter", "_drop_torn_tail", "exchange_records", "iso_utc", "stored_payload"]

log = logging.getLogger("crawler_node.store")


class Store:
    """The node's store: WARC files (and their CDXJ indexes) under `data_dir/warc/`, the
    digest index, `data_dir/crawl.log`, and the pipelines' items under `data_dir/items/`."""

    def __init__(self, data_dir: Path, *, node_id: str, warc_max_bytes: int = 100_000_000,
                 crawl_log_max_bytes: int = 100_000_000, dedup_max_entries: int = 1_000_000,
                 items_max_bytes: int = 100_000_000, info: CrawlInfo | None = None) -> None:
        """``dedup_max_entries``: payload digests remembered for revisit records (0: none,
        every payload is stored in full)."""
        self.data_dir = data_dir
        self.layout = DataDirLayout(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        # Before anything repairs or opens a file: the records a kill left without their line.
        lost_lines = missing_lines(self.layout.warc_dir, self.layout.crawl_log, node_id)
        load_libraries()
        self.digests = (DigestIndex(self.layout.digests, max_entries=dedup_max_entries)
                        if dedup_max_entries > 0 else None)
        # The writer indexes each file it closes (CDXJ, beside it) from the lines it made while
        # writing; files a killed run left without an index are read back and indexed now, on
        # a thread, so the store starts writing meanwhile (~1 s per 50 MB file).
        self._indexer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdxj")
        warc_dir = self.layout.warc_dir
        # The list is taken now, before this run's writer opens a file of its own.
        # (A file without an index was being written by a run that was killed: its torn tail,
        # if any, is cut first and set aside; this node holds the data directory's lock.)
        self._indexer.submit(index_missing, warc_dir, files=unindexed(warc_dir) if warc_dir.exists() else [],
                             repair=True)
        self.warc = WarcWriter(warc_dir, node_id=node_id, max_file_bytes=warc_max_bytes,
                               digests=self.digests, info=info)
        self.crawl_log = CrawlLog(self.layout.crawl_log, max_file_bytes=crawl_log_max_bytes)
        if lost_lines:
            self.crawl_log.append_lines(lost_lines)
            log.warning("%d crawl.log lines were lost or torn by a kill: rebuilt from their WARC records",
                        len(lost_lines))
        self.items = ItemWriter(self.layout.items_dir, node_id=node_id, max_file_bytes=items_max_bytes)
        self.records_written = 0  # fetch attempts logged (with or without an HTTP exchange)

    @property
    def bytes_written(self) -> int:
        """Bytes written to disk: compressed WARC output plus crawl log lines."""
        return self.warc.bytes_written + self.crawl_log.bytes_written

    def write(self, records: Sequence[FetchRecord]) -> None:
        # WARC first: the crawl log never claims an exchange the WARC files lack. Both are
        # flushed to the OS before returning, because the caller marks these fetches done in
        # the frontier next, and a killed process must not have lost what it marked done.
        # The pipelines' items go with them, so a page marked done has its items on disk (and
        # one fetched again after a kill has them twice). The digests of the new payloads are
        # committed last: an entry never points at a record that was not written.
        # A write that fails for want of space is a DiskFull naming the file and what it holds
        # (runtime.datadir); the store is then done with (store.worker), and the digests
        # added for this batch are never committed.
        with writing(self._warc_file, "the WARC records"):
            locations = self.warc.write(records)
            self.warc.flush()
        with writing(lambda: self.crawl_log.path, "the crawl.log lines"):
            self.records_written += self.crawl_log.write(records, locations)
            self.crawl_log.flush()
        with writing(lambda: self.items.directory, "the pipelines' items"):
            for record in records:
                if record.items:
                    self.items.write(record.items)
            self.items.flush()
        if self.digests is not None:
            with writing(lambda: self.layout.digests, "the payload digests"):
                self.digests.commit()

    def _warc_file(self) -> Path:
        files = self.warc.files
        return files[-1] if files else self.warc.directory

    def flush(self, *, fsync: bool = False) -> None:
        self.warc.flush(fsync=fsync)
        self.crawl_log.flush(fsync=fsync)
        self.items.flush(fsync=fsync)

    def close(self) -> None:
        self.warc.close()
        self._indexer.shutdown(wait=True)
        self.crawl_log.close()
        self.items.close()
        if self.digests is not None:
            self.digests.close()
