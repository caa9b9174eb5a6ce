"""A full disk stops a node cleanly, and a restart after space is freed loses nothing; a part of
the data directory that cannot be used is one line and exit 2.

The disk is a small tmpfs mounted under the test's directory (root only: the test is skipped
elsewhere, or fails with CRAWLER_REQUIRE_TMPFS=1, for a CI that must run it).
"""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import read_crawl_log, roots

from crawler_node.runtime.datadir import DataDirError, DiskFull, claim_data_dir, disk_full
from crawler_node.tools.node_process import NodeProcess, free_port

HOSTS, PAGES = 10, 200
# ~20 KB pages, little alike: 3 MB holds a hundred or two of the 2,000 pages, a few batches.
PROFILE = {"site-*.test": {"page_bytes": 20_000}}
STOP_BOUND_S = 15.0  # from the disk-full line to the exit, on a busy machine


def _mount(point: Path, size: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                          capture_output=True, text=True, timeout=10)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs under ``tmp_path``, unmounted afterwards (lazily if still busy)."""
    required = os.environ.get("CRAWLER_REQUIRE_TMPFS") == "1"
    point = tmp_path / "disk"
    point.mkdir()
    why = None
    if os.geteuid() != 0 or shutil.which("mount") is None:
        why = "needs root and mount(8) to mount a small tmpfs"
    else:
        mounted = _mount(point, "3m")
        if mounted.returncode != 0:
            why = f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
    if why is not None:
        if required:
            pytest.fail(f"CRAWLER_REQUIRE_TMPFS=1: {why}")
        pytest.skip(why)
    try:
        yield point
    finally:
        if subprocess.run(["umount", str(point)], capture_output=True, timeout=10).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=10)


def _wait_exit(node: NodeProcess, timeout_s: float) -> tuple[float, float]:
    """Wait for ``node`` to exit by itself; (when its log first said "disk full", when it
    exited), on the monotonic clock."""
    assert node.proc is not None
    said_at = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if said_at is None and "disk full" in node.log_path.read_text(errors="replace"):
            said_at = time.monotonic()
        if node.proc.poll() is not None:
            exited_at = time.monotonic()
            if said_at is None and "disk full" in node.log_path.read_text(errors="replace"):
                said_at = exited_at
            assert said_at is not None, f"exited with {node.proc.returncode} without a disk-full line:\n" \
                                        f"{node.log_tail()}"
            return said_at, exited_at
        time.sleep(0.05)
    raise TimeoutError(f"{node.node_id} still running after {timeout_s}s; log:\n{node.log_tail()}")


@pytest.mark.tools
@pytest.mark.parametrize("store", ["process", "thread"])
def test_a_full_disk_stops_the_node_cleanly_and_a_restart_loses_nothing(start_testweb, start_node, tmp_path: Path,
                                                                       small_disk: Path, store: str) -> None:
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=21, profile=PROFILE)
    expected = set(web.expected())
    data_dir = small_disk / "n1"
    env = {**os.environ, "CRAWLER_STORE_IN_PROCESS": "true" if store == "process" else "false"}
    # The logs stay off the small disk: what it says must not depend on the room left there.
    node = start_node(proxy=web.url, seeds=roots(HOSTS), data_dir=data_dir, wait=False, env=env,
                      log_path=tmp_path / "n1.log")
    said_at, exited_at = _wait_exit(node, timeout_s=120)
    assert node.proc is not None and node.proc.returncode == 1
    assert exited_at - said_at <= STOP_BOUND_S, f"{exited_at - said_at:.1f} s from the disk-full line to the exit"
    log = node.log_path.read_text(errors="replace")
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1, log
    assert f"disk full: {data_dir}/" in errors[0] and f"(filesystem {small_disk})" in errors[0], errors[0]
    assert "could not be written: the node stops; free space and start it again: nothing is lost" in errors[0]
    assert "Traceback" not in log and "Exception ignored" not in log, log
    # The write that failed may have left half a line (cut at the next start): whole ones only.
    stored = (data_dir / "crawl.log").read_text(errors="replace").count("\n")
    assert 0 < stored < len(expected)  # it stopped part-way

    remounted = subprocess.run(["mount", "-o", "remount,size=300m", str(small_disk)], capture_output=True,
                               text=True, timeout=10)
    assert remounted.returncode == 0, remounted.stderr
    restarted = start_node(proxy=web.url, data_dir=data_dir, env=env, log_path=tmp_path / "n1-again.log")
    status = restarted.wait_idle(timeout_s=120)
    assert status["frontier"]["leased"] == 0 and status["frontier"]["queued"] == 0, status["frontier"]
    logged = {line["url"] for line in read_crawl_log(data_dir)}
    assert expected - logged == set(), f"{len(expected - logged)} URLs lost after the disk filled"
    assert restarted.stop(timeout_s=30) == 0
    assert "Traceback" not in restarted.log_path.read_text(errors="replace")
    warc_files = sorted((data_dir / "warc").glob("*.warc.gz"))
    assert warc_files
    checked = subprocess.run([str(Path(sys.executable).with_name("warcio")), "check", *map(str, warc_files)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def ext4_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MB ext4 image, loop-mounted with errors=remount-ro, at the path yielded. (A tmpfs
    cannot be remounted read-only while a file on it is open for writing.)"""
    point, image = tmp_path / "ext4", tmp_path / "ext4.img"
    point.mkdir()
    why = None
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("mount", "mkfs.ext4", "findmnt")):
        why = "needs root, mount(8), mkfs.ext4 and findmnt for a loop-mounted ext4 image"
    else:
        with open(image, "wb") as handle:
            handle.truncate(64 << 20)
        made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True, timeout=60)
        mounted = made if made.returncode else subprocess.run(
            ["mount", "-o", "loop,errors=remount-ro", str(image), str(point)], capture_output=True, text=True,
            timeout=30)
        if mounted.returncode != 0:
            why = f"cannot make and mount an ext4 image here: {mounted.stderr.strip()}"
    if why is not None:
        if os.environ.get("CRAWLER_REQUIRE_TMPFS") == "1":
            pytest.fail(f"CRAWLER_REQUIRE_TMPFS=1: {why}")
        pytest.skip(why)
    try:
        yield point
    finally:
        if os.path.ismount(point) and subprocess.run(["umount", str(point)], capture_output=True,
                                                     timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=10)


@pytest.mark.tools
def test_a_disk_gone_read_only_mid_run_stops_the_node_cleanly(start_testweb, start_node, tmp_path: Path,
                                                               ext4_disk: Path) -> None:
    # No restart here: a filesystem that aborts drops what was not yet written back from the
    # page cache (the store and the frontier do not fsync each batch), so what is left of the
    # crawl is the kernel's choice, not the node's.
    point = ext4_disk
    # Slow pages: the crawl is under way, not over, when the filesystem fails.
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=22, profile={"site-*.test": {"latency_ms": 50}})
    data_dir = point / "n1"
    node = start_node(proxy=web.url, seeds=roots(HOSTS), data_dir=data_dir, log_path=tmp_path / "n1.log")
    deadline = time.monotonic() + 60
    crawl_log = data_dir / "crawl.log"
    while not crawl_log.exists() or crawl_log.stat().st_size < 20_000:  # a few dozen pages stored
        assert time.monotonic() < deadline, node.log_tail()
        time.sleep(0.05)
    device = subprocess.run(["findmnt", "-no", "SOURCE", str(point)], capture_output=True, text=True,
                            timeout=10).stdout.strip()
    # ext4 takes this as an error of its own and, as mounted, remounts itself read-only.
    Path(f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error").write_text("test\n")
    failed_at = time.monotonic()
    assert node.proc is not None
    node.proc.wait(timeout=60)
    assert node.proc.returncode == 1
    assert time.monotonic() - failed_at <= STOP_BOUND_S
    log = node.log_path.read_text(errors="replace")
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"{data_dir}/" in errors[0] and "could not be written: the node stops" in errors[0], log
    assert "Traceback" not in log and "Exception ignored" not in log, log


# ----------------------------------------------------------------- unusable parts at start
def _run_node(data_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "crawler_node", "run", "--node-id", "n1",
               "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def _make_file(path: Path) -> None:
    path.write_text("not a directory\n")


def _make_dir(path: Path) -> None:
    path.mkdir()


def _make_garbage(path: Path) -> None:
    path.write_bytes(b"this is not an SQLite database, " * 256)


@pytest.mark.parametrize(("part", "make", "says"), [
    ("warc", _make_file, "is not a directory: the store keeps the WARC files there"),
    ("items", _make_file, "is not a directory: the store keeps the pipelines' items there"),
    ("crawl.log", _make_dir, "is not a file: the store appends the crawl log to it"),
    ("digests.sqlite3", _make_garbage, "cannot be read (file is not a database)"),
    ("digests.sqlite3", _make_dir, "cannot be read"),
])
def test_an_unusable_part_of_the_data_directory_is_one_line_and_exit_2(tmp_path: Path, part, make, says) -> None:
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    make(data_dir / part)
    done = _run_node(data_dir)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"{data_dir / part} {says}" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(DataDirError, match="move it away"):  # the check itself, at the claim
        claim_data_dir(data_dir).release()


def test_a_store_part_the_checks_do_not_know_is_one_line_at_its_open(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    (data_dir / "items" / "n1-1.jsonl").mkdir(parents=True)  # an items file that is a directory
    done = _run_node(data_dir)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"the store in {data_dir} cannot be opened: " in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_disk_full_before_the_start_is_one_line(small_disk: Path) -> None:
    data_dir = small_disk / "n1"
    data_dir.mkdir()
    (data_dir / "node.lock").write_text("")
    with open(small_disk / "filler", "wb") as filler:  # every block taken
        with pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
    done = _run_node(data_dir)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"disk full: {data_dir / 'node.lock'}" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------- the error itself
def test_a_full_disk_is_said_as_a_disk_full_wherever_it_is_met(tmp_path: Path) -> None:
    enospc = OSError(28, "No space left on device")
    full = disk_full(enospc, path=tmp_path / "crawl.log", what="the crawl.log lines")
    assert isinstance(full, DiskFull) and full.path == str(tmp_path / "crawl.log")
    assert str(full).startswith(f"disk full: {tmp_path / 'crawl.log'} (filesystem ")
    named = disk_full(OSError(122, "Disk quota exceeded", "/x/y"), path=None, what="x")
    assert named is not None and named.path == "/x/y" and named.reason == "disk quota exceeded"
    read_only = disk_full(OSError(30, "Read-only file system"), path=None, what="x")
    assert read_only is not None and "make it writable and start it again" in str(read_only.at(tmp_path))
    assert disk_full(OSError(5, "Input/output error"), path=None, what="x") is None
    assert disk_full(ValueError("no"), path=None, what="x") is None
    # SQLite's own words for it, with its error code
    database = tmp_path / "full.sqlite3"
    connection = sqlite3.connect(database)
    connection.execute("CREATE TABLE t (x)")
    connection.execute("PRAGMA max_page_count = 2")
    with pytest.raises(sqlite3.OperationalError) as raised:
        connection.execute("INSERT INTO t VALUES (zeroblob(100000))")
    connection.close()
    sqlite_full = disk_full(raised.value, path=database, what="the frontier")
    assert sqlite_full is not None and sqlite_full.reason == "disk full"
    # A quota or a read-only remount reaches SQLite as a failed write, without its errno.
    write_failed = sqlite3.OperationalError("disk I/O error")
    write_failed.sqlite_errorcode = sqlite3.SQLITE_IOERR_WRITE  # type: ignore[attr-defined]
    failed = disk_full(write_failed, path=database, what="the frontier")
    assert failed is not None and str(failed).startswith(f"disk write failed: {database} ")
    assert "check its space, quota and mount and start it again" in str(failed)
    other = sqlite3.OperationalError("database is locked")
    other.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    assert disk_full(other, path=database, what="the frontier") is None
    # It crosses from the store's process with its fields.
    again = pickle.loads(pickle.dumps(full))
    assert (again.path, again.what, again.reason, str(again)) == (full.path, full.what, full.reason, str(full))


async def test_a_full_disk_met_by_an_api_write_is_a_503_and_stops_the_node() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from crawler_node.api.app import NODE_KEY, disk_full_is_503
    from crawler_node.runtime.datadir import DiskFull

    failed: list[BaseException] = []

    class StubNode:
        def fail(self, exc: BaseException) -> None:
            failed.append(exc)

    async def handler(request: web.Request) -> web.Response:
        raise DiskFull("/data/frontier.sqlite3", "the frontier")

    app = web.Application(middlewares=[disk_full_is_503])
    app[NODE_KEY] = StubNode()  # type: ignore[assignment]
    app.router.add_post("/v1/urls", handler)
    async with TestClient(TestServer(app)) as client:
        response = await client.post("/v1/urls", json={"urls": []})
        assert response.status == 503 and response.headers["Retry-After"] == "60"
        assert (await response.json())["error"] == "disk_full"
    assert len(failed) == 1 and isinstance(failed[0], DiskFull)
