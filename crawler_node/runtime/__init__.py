"""Worker processes and threads, task supervision, and GC and malloc settings of the running process."""
