"""Pure policies of the crawl, no I/O: URL normalisation, the AIMD limiter, retry and backoff,
what a response means (signals, verdict), load shedding, named outcomes."""
