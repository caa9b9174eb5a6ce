"""One HTTP request: the I/O shell of the fetch stage (what the answer means is core.verdict's)."""
