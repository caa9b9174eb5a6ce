"""Run testweb as a child process: for tests, benchmarks and the demo.

Only the standard library is used for the control calls, so this works from sync and async
code alike; environment proxies are ignored (testweb is on loopback).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

READY_PREFIX = b"testweb listening on "


class TestwebError(RuntimeError):
    """testweb did not start, or a control call failed."""


class TestwebProcess:
    """A testweb child process, started on entering the context and stopped (by PID) on exit.

        with TestwebProcess(hosts=5, profile={"site-0.test": {"latency_ms": 50}}) as web:
            session.get("http://site-0.test/", proxy=web.url)
            assert web.stats()["hosts"]["site-0.test"]["requests"] == 1
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        hosts: int = 20,
        pages: int = 50,
        seed: int = 1,
        profile: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        listen_host: str = "127.0.0.1",
        tmp_dir: str | os.PathLike[str] | None = None,
        ready_timeout: float = 15.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self._args = [
            "--listen", f"{listen_host}:0", "--hosts", str(hosts), "--pages", str(pages),
            "--seed", str(seed), *extra_args,
        ]
        self._profile = profile
        self._tmp_dir = tmp_dir
        self._ready_timeout = ready_timeout
        self._stop_timeout = stop_timeout
        self._own_tmp: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._url: str | None = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> TestwebProcess:
        if self._proc is not None:
            raise TestwebError("testweb already started")
        args = list(self._args)
        if self._profile is not None:
            directory = self._tmp_dir or self._make_own_tmp()
            fd, profile_path = tempfile.mkstemp(prefix="testweb-profile-", suffix=".json",
                                                dir=directory)
            with os.fdopen(fd, "w") as handle:
                json.dump(self._profile, handle)
            args += ["--profile", profile_path]
        self._stderr = tempfile.TemporaryFile(dir=self._tmp_dir)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "crawler_node", "testweb", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,  # a Ctrl-C in the terminal goes to the test, not to us
        )
        try:
            self._url = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _make_own_tmp(self) -> str:
        self._own_tmp = tempfile.mkdtemp(prefix="testweb-")
        return self._own_tmp

    def _wait_ready(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self._ready_timeout
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TestwebError(f"testweb not ready after {self._ready_timeout:g} s"
                                       f"{self._stderr_tail()}")
                if selector.select(remaining):
                    chunk = os.read(self._proc.stdout.fileno(), 4096)
                    if not chunk:
                        code = self._proc.wait()
                        raise TestwebError(f"testweb exited with {code} before it was ready"
                                           f"{self._stderr_tail()}")
                    buffer += chunk
        line = buffer.split(b"\n", 1)[0].strip()
        if not line.startswith(READY_PREFIX):
            raise TestwebError(f"unexpected first line from testweb: {line!r}")
        return line[len(READY_PREFIX) :].decode()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip()
        return f": {text[-2000:]}" if text else ""

    def stop(self, signum: int = signal.SIGTERM) -> int | None:
        """Send `signum` (SIGKILL after stop_timeout), reap the process, return its exit code."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                os.kill(proc.pid, signum)
                try:
                    proc.wait(timeout=self._stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            code = proc.returncode
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._own_tmp is not None:
            shutil.rmtree(self._own_tmp, ignore_errors=True)
            self._own_tmp = None
        return code

    def __enter__(self) -> TestwebProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- where it is -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The proxy URL, e.g. http://127.0.0.1:40123."""
        if self._url is None:
            raise TestwebError("testweb is not running")
        return self._url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        """The server's process id while it runs (benchmarks read its CPU time)."""
        if self._proc is None:
            raise TestwebError("testweb is not running")
        return self._proc.pid

    # --- ground truth ------------------------------------------------------------------------

    def expected(self) -> list[str]:
        return self._call("GET", "expected")["urls"]

    def changing(self) -> list[str]:
        """The expected URLs whose bytes differ on every visit (the `changing` setting)."""
        return self._call("GET", "expected")["changing"]

    def freshness(self, *, since: float = 0.0, buckets: int = 0, pages: bool = False) -> dict[str, Any]:
        """`/_testweb/freshness`: how fresh the fetches served kept the pages with a change_rate,
        from ``since`` (seconds from testweb's start; its "now_s" is the time now)."""
        query = [("since", f"{since:g}")] if since else []
        query += ([("buckets", str(buckets))] if buckets else []) + ([("pages", "1")] if pages else [])
        return self._call("GET", "freshness" + ("?" + urllib.parse.urlencode(query) if query else ""))

    def stats(
        self, *, summary: bool = False, hosts: Sequence[str] = (), history: bool = False
    ) -> dict[str, Any]:
        """`/_testweb/stats`: `summary` = totals only (cheap at any size); `hosts` = only these
        hosts and their URLs; `history` = each host's recent requests as [started, status, path]."""
        query = [("summary", "1")] if summary else []
        query += [("host", host) for host in hosts]
        query += [("history", "1")] if history else []
        return self._call("GET", f"stats?{urllib.parse.urlencode(query)}" if query else "stats")

    def hosts(self) -> dict[str, Any]:
        return self._call("GET", "hosts")

    def reset(self) -> None:
        self._call("POST", "reset", {})

    def set_quota(self, quota: int | None) -> None:
        self._call("POST", "api/quota", {"quota": quota})

    def _call(self, method: str, name: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/_testweb/{name}", data=data, method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with self._opener.open(request, timeout=30) as response:
                return json.load(response)
        except OSError as exc:
            raise TestwebError(f"testweb {method} /_testweb/{name} failed: {exc}") from exc

