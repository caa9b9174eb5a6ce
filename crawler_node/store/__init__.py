"""WARC records, crawl.log, and the store worker process that writes them."""
