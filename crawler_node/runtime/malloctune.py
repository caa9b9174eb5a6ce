"""glibc malloc settings for the node's long-running processes (see gctune.py for the GC's).

Pages cross the process boundaries in batches: a parse batch is one frame of ~70 KB, a store
batch one of up to ~700 KB, and lexbor builds and frees a document for every page. glibc
serves a request of 128 KB or more with a fresh mmap, and hands the free top of its heap back
to the kernel once it exceeds 128 KB (both limits then adapt, but only upwards and only
sometimes). So the same memory was given back and faulted in again, zeroed page by page,
batch after batch: in the crawl of bench/throughput.py the parser took ~3 page faults per
page, and its CPU per page fell by ~15% without them (20,000 pages through a parser worker:
22,747 faults and 45 µs per page before, 606 and 38.5 µs after).

So: requests below 1 MiB come from the heap, and up to 8 MiB of free heap stays mapped for the
next batch. The cost is at most that much memory per process beyond what it uses. Applied
only where glibc's `mallopt` exists; another C library keeps its own behaviour.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 20
TRIM_THRESHOLD = 8 << 20


def keep_heap_for_reuse() -> bool:
    """Apply the settings above to this process; True when the C library took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # Both explicitly: setting one turns glibc's adaptive adjustment of both off.
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


def release_free_heap() -> bool:
    """Hand the heap's free pages back to the kernel (glibc's ``malloc_trim``), wherever they
    are, not only at the top. Freed objects of many sizes leave free pages scattered between
    live ones, which stay resident; after hosts leave memory by the thousand this takes the
    node's heap at 200,000 crawled hosts from 48 to 31 MB. It walks the heap (milliseconds):
    call it seldom. True when the C library has it."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True
