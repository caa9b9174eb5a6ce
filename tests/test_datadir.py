"""What an operator gets wrong first, answered in one line and a non-zero exit, by the real
`crawler-node run`: a data directory another node uses, one that cannot be written, a log
level that does not exist, and an integer setting given as a fraction."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawler_node.runtime.datadir import DataDirError, claim_data_dir
from crawler_node.settings import SettingsError
from crawler_node.settings_sources import load_settings
from crawler_node.tools.node_process import free_port


def run_node(data_dir: Path, *extra: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """`crawler-node run` expected to refuse: it must exit by itself within ``timeout``."""
    command = [sys.executable, "-m", "crawler_node", "run", "--node-id", "n2",
               "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if "ERROR" in line or "error:" in line]


def test_a_second_node_on_a_data_directory_in_use_is_refused(start_node, tmp_path: Path) -> None:
    first = start_node("n1", data_dir=tmp_path / "shared")
    done = run_node(tmp_path / "shared")
    assert done.returncode == 2
    lines = error_lines(done)
    assert len(lines) == 1 and f"in use by another node (pid {first.pid})" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert first.status()["node_id"] == "n1"  # the first node is untouched
    first.stop()
    # A node that died without cleaning up (SIGKILL) leaves no stale lock: the kernel drops it.
    lock = claim_data_dir(tmp_path / "shared")
    lock.release()


def test_a_killed_node_leaves_no_stale_lock(start_node, tmp_path: Path) -> None:
    node = start_node("n1", data_dir=tmp_path / "d")
    node.kill()
    claim_data_dir(tmp_path / "d").release()


@pytest.mark.tools
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None,
                    reason="needs root to mount a read-only tmpfs (as root, file modes do not stop writes)")
def test_a_read_only_data_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True, timeout=10)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        for data_dir in (mount_point, mount_point / "sub"):
            done = run_node(data_dir)
            assert done.returncode == 2, done.stderr
            lines = error_lines(done)
            assert len(lines) == 1 and "Read-only file system" in lines[0], done.stderr
            assert "Traceback" not in done.stderr
    finally:
        subprocess.run(["umount", str(mount_point)], timeout=10, check=False)


def test_a_data_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(DataDirError, match="is not a directory"):
        claim_data_dir(tmp_path / "file")
    with pytest.raises(DataDirError, match="cannot be created"):
        claim_data_dir(tmp_path / "file" / "sub")


def test_an_unknown_log_level_is_refused(tmp_path: Path) -> None:
    done = run_node(tmp_path / "d", "--log-level", "LOUD")
    assert done.returncode == 2
    assert "--log-level 'LOUD' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in done.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was touched


def test_a_fraction_for_an_integer_setting_is_an_error_not_rounded(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text("global_inflight = 3.7\n")
    with pytest.raises(SettingsError, match="global_inflight: not an integer: 3.7"):
        load_settings({}, env={}, config_path=config)
    config.write_text("global_inflight = 4.0\n")
    assert load_settings({}, env={}, config_path=config).global_inflight == 4
    with pytest.raises(SettingsError, match="CRAWLER_GLOBAL_INFLIGHT"):
        load_settings({}, env={"CRAWLER_GLOBAL_INFLIGHT": "3.7"})


def test_rejected_seeds_and_an_anonymous_user_agent_are_said_at_start(start_node, tmp_path: Path) -> None:
    node = start_node("n1", seeds=["http://ok.test/", "ftp://files.test/x", "http://other.test/"],
                      extra_args=["--allow-host", "ok.test"])
    deadline = 50
    for _ in range(deadline):  # bounded: the seeds are submitted right after the node starts
        log = node.log_path.read_text(errors="replace")
        if "seeds:" in log:
            break
        time.sleep(0.1)
    assert "seeds: 1 accepted, 0 already known, 2 rejected" in log
    assert "seed 'ftp://files.test/x' rejected:" in log
    assert "seed http://other.test/ rejected: out of scope" in log
    # a direct crawl with the default user agent (a placeholder contact) is warned about
    assert "names no way to reach you" in log
