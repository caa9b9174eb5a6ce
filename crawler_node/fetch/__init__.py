"""One HTTP request and what robots.txt says: the I/O shell of the fetch stage."""
