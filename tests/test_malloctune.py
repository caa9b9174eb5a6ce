"""With the node's malloc settings, a batch frame built and dropped over and over reuses the
same memory instead of taking a fresh mapping, and page faults, each time."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# A store batch as the node sends one: 256 pages of 2.5 KB pickled into one ~640 KB frame,
# unpickled on the other side, both dropped; the process's minor page faults per batch.
WORKLOAD = """
import pickle, sys
from crawler_node.runtime.malloctune import keep_heap_for_reuse
def minor_faults():
    with open("/proc/self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])
if sys.argv[1] == "tuned":
    assert keep_heap_for_reuse()
pages = [bytes([i]) * 2500 for i in range(256)]
before = minor_faults()
for _ in range(200):
    assert len(pickle.loads(pickle.dumps(pages))) == 256
print((minor_faults() - before) / 200)
"""


def _faults_per_batch(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", WORKLOAD, mode], capture_output=True, text=True, timeout=60, check=True)
    return float(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc, faults counted in /proc")
def test_a_batch_reuses_the_heap_instead_of_faulting_in_new_pages() -> None:
    default, tuned = _faults_per_batch("default"), _faults_per_batch("tuned")
    # glibc's defaults map and unmap the frame each time (~80 faults per batch here); kept,
    # the heap serves it again (a few faults at most, from Python's own small-object arenas).
    assert default > 20
    assert tuned < default / 5
