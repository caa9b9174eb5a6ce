"""What a new user trips on at the command line, each answered in one line with its exit code:
a mistyped or abbreviated flag, a node given without its scheme, a demo asked for nothing, a
submit to a cluster with a token, a recover of a frontier that needs none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import roots

from crawler_node.datadir_layout import FRONTIER_FILENAME

HOSTS = 2
PAGES = 15


def crawler_node(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("CRAWLER_")}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "crawler_node", *args], capture_output=True, text=True,
                          timeout=60, env=environment)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_mistyped_flag_names_the_flag_meant_and_an_abbreviation_is_refused(tmp_path: Path) -> None:
    typo = crawler_node("run", "--data-dir", str(tmp_path / "d"), "--allow-privat")
    assert typo.returncode == 2
    assert one_line(typo) == ("crawler-node run: error: unrecognized arguments: --allow-privat "
                              "(did you mean --allow-private?); see crawler-node run --help")
    # a unique prefix was taken for the whole flag before: a node started with a setting not asked for
    prefix = crawler_node("run", "--data-dir", str(tmp_path / "d"), "--allow-priv", "--listen", "127.0.0.1:0")
    assert prefix.returncode == 2 and "--allow-priv" in one_line(prefix)
    status = crawler_node("status", "--node", "http://127.0.0.1:9", "--jsn")
    assert status.returncode == 2 and "did you mean --json?" in one_line(status)


def test_a_node_without_a_scheme_is_a_one_line_error() -> None:
    for command in (("status",), ("submit", "http://a.test/"), ("hosts",), ("pause",)):
        done = crawler_node(command[0], "--node", "localhost:8080", *command[1:])
        assert done.returncode == 2
        assert one_line(done) == (f"crawler-node {command[0]}: error: --node 'localhost:8080' is not a node's URL: "
                                  "give it as http://HOST:PORT")


def test_the_demo_checks_what_it_is_asked_for() -> None:
    done = crawler_node("demo", "--hosts", "0", "--nodes", "500")
    assert done.returncode == 2
    assert one_line(done) == ("crawler-node demo: error: --hosts must be at least 1, got 0; "
                              "--nodes must be at most 200, got 500")


def test_submit_reads_the_token_from_the_environment_and_a_401_names_it(start_testweb, start_node) -> None:
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=3)
    node = start_node(proxy=web.url, extra_args=["--secret", "s3cret"])
    refused = crawler_node("submit", "--node", node.url, roots(1)[0])
    assert refused.returncode == 1
    assert "HTTP 401" in one_line(refused) and "CRAWLER_SECRET" in one_line(refused)
    taken = crawler_node("submit", "--node", node.url, roots(1)[0], env={"CRAWLER_SECRET": "s3cret"})
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.startswith("accepted 1 here"), taken.stdout


def test_recover_leaves_a_whole_frontier_alone_unless_forced(start_testweb, start_node) -> None:
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=4)
    node = start_node(proxy=web.url, seeds=roots(HOSTS))
    node.wait_idle(timeout_s=120)
    assert node.stop(timeout_s=30) == 0
    data = Path(node.data_dir)
    before = (data / FRONTIER_FILENAME).read_bytes()

    left = crawler_node("recover", "--data-dir", str(data), "--allow-host", "*")
    assert left.returncode == 2
    assert "passes the start-up checks: nothing to recover" in one_line(left) and "--force" in one_line(left)
    assert (data / FRONTIER_FILENAME).read_bytes() == before and not list(data.glob("frontier-lost-*"))

    forced = crawler_node("recover", "--data-dir", str(data), "--allow-host", "*", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "recovered the frontier" in forced.stdout and list(data.glob("frontier-lost-*/frontier.sqlite3"))


def test_a_pipeline_module_in_the_working_directory_imports_and_a_missing_one_says_where(tmp_path: Path) -> None:
    """The console script (not `python -m`, whose sys.path starts with the working directory)."""
    script = shutil.which("crawler-node")
    assert script is not None, "the crawler-node console script is installed with the package"
    (tmp_path / "mypipe.py").write_text("def extract(page):\n    return [{'url': page.url}]\n")
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("CRAWLER_", "PYTHON"))}

    def config(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, "config", "--show", *args], capture_output=True, text=True, timeout=60,
                              env=environment, cwd=tmp_path)

    found = config("--pipeline", "mypipe:extract")
    assert found.returncode == 0, found.stderr
    missing = config("--pipeline", "nothere:extract")
    assert missing.returncode == 2
    assert f"searched the working directory {tmp_path}" in one_line(missing)


def test_a_private_seed_without_allow_private_is_a_warning_at_start(start_node) -> None:
    node = start_node(seeds=["http://127.0.0.1:9/"])  # direct fetches, no --allow-private
    said = ""
    for _ in range(100):  # bounded: 10 s; the seeds are checked right after the node listens
        said = node.log_tail()
        if "seed host" in said:
            break
        time.sleep(0.1)
    warning = [line for line in said.splitlines() if "seed host" in line]
    assert warning and "WARNING" in warning[0] and "127.0.0.1:9 is a private address" in warning[0], said
    assert "give --allow-private" in warning[0]
