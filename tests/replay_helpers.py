"""pywb's `wayback` server as a child process, replaying a node's WARC files by their CDXJ indexes.

    with Wayback(warc_dir, work_dir=tmp_path / "pywb") as wayback:
        status, headers, body = wayback.replay("http://site-0.test/")

The server runs in `work_dir` with a `config.yaml` whose one collection, `crawl`, reads its
index from the .cdxj files in `warc_dir` and its records from the WARC files beside them: no
wb-manager, no copies. It listens on 127.0.0.1 only and replays from the archive alone (no
live collection, no recording), so it never needs the network. `replay` asks in identity mode
(`/crawl/id_/<url>`): the stored status, headers and body, with no rewriting.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from crawler_node.tools.node_process import free_port

COLLECTION = "crawl"
# The console script `wayback` is pywb.apps.cli:wayback; run through this interpreter, it is
# the pywb of the venv the tests run in, wherever that venv's scripts are.
_WAYBACK = "import sys; from pywb.apps.cli import wayback; wayback(sys.argv[1:])"
# The interpreter's proxy settings would send pywb's calls to its own internal index server
# (http://localhost:<port>) through a proxy.
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


class Replayed(NamedTuple):
    status: int
    headers: Message  # case-insensitive `get`, every value of a repeated header in `get_all`
    body: bytes  # as pywb sent it: not decompressed


class Wayback:
    """A pywb `wayback` process, started on entering the context and stopped (by PID) on exit."""

    def __init__(self, warc_dir: Path, *, work_dir: Path, ready_timeout_s: float = 30.0,
                 stop_timeout_s: float = 10.0) -> None:
        self.warc_dir = Path(warc_dir).resolve()
        self.work_dir = Path(work_dir)
        self.host = "127.0.0.1"
        self.port = free_port(self.host)
        self.log_path = self.work_dir / "wayback.log"
        self._ready_timeout_s = ready_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def config(self) -> dict:
        # archive_paths is a prefix for the index lines' file names: it ends in a slash.
        return {"collections": {COLLECTION: {"index_paths": str(self.warc_dir),
                                             "archive_paths": f"{self.warc_dir}/"}}}

    def start(self) -> Wayback:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: pywb reads ./config.yaml from the directory it starts in.
        (self.work_dir / "config.yaml").write_text(json.dumps(self.config(), indent=2))
        env = {name: value for name, value in os.environ.items() if name.lower() not in _PROXY_VARIABLES}
        env["NO_PROXY"] = env["no_proxy"] = "*"
        # pywb imports tldextract (only its Redis cookie tracker, not configured here, calls it);
        # should anything call it, its cache stays in the work directory.
        env["TLDEXTRACT_CACHE"] = str(self.work_dir / "tldextract")
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _WAYBACK, "--bind", self.host, "--port", str(self.port)],
                cwd=self.work_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal goes to the test, not to pywb
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self._ready_timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"wayback exited with {self._proc.returncode}; log:\n{self.log_tail()}")
            try:
                if self._get("/").status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"wayback not answering after {self._ready_timeout_s:g} s; log:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> int | None:
        """SIGTERM, SIGKILL after the stop timeout; returns the exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        return proc.returncode

    def __enter__(self) -> Wayback:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def replay(self, url: str, *, accept_encoding: str | None = None, at: str | None = None) -> Replayed:
        """The capture of `url` as pywb replays it in identity mode. pywb passes a stored
        Content-Encoding and its encoded bytes through only to a client that accepts that
        encoding (else it decodes the body and renames the header), so pass the node's own
        Accept-Encoding to see the record as stored. ``at``: a 14-digit timestamp, for the
        capture closest to it (else the latest)."""
        headers = {} if accept_encoding is None else {"Accept-Encoding": accept_encoding}
        return self._get(f"/{COLLECTION}/{at or ''}id_/{url}", headers)

    def _get(self, path: str, headers: dict[str, str] | None = None) -> Replayed:
        # http.client, not urllib: no redirect is followed (a replayed 302 points at the live
        # web), no proxy is used and nothing is decompressed.
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            return Replayed(response.status, response.msg, response.read())
        finally:
            connection.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
