"""Run `crawler-node run` as a child process: used by the demo, the tests and the benchmarks.

Every process started here is tracked by PID and stopped by PID, SIGTERM first and SIGKILL
after a deadline, so nothing outlives the code that started it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from crawler_node.tools import client


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class NodeProcess:
    def __init__(
        self,
        *,
        node_id: str,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        proxy: str | None = None,
        seeds: list[str] | tuple[str, ...] = (),
        peers: dict[str, str] | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        pace: str | None = "adaptive",
        wrapper: list[str] | tuple[str, ...] = (),
    ) -> None:
        """``pace``: the demo, the tests and the benchmarks crawl testweb and servers they
        started themselves, so they go at the adaptive pace; None keeps the node's default
        (polite), as does a ``--pace`` in ``extra_args``. ``wrapper``: a command that execs
        the node (``ip netns exec NS``), so the PID is still the node's."""
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.proxy = proxy
        self.seeds = list(seeds)
        self.peers = dict(peers or {})
        self.extra_args = list(extra_args)
        self.env = env
        self.pace = pace
        self.wrapper = list(wrapper)
        self.log_path = log_path or (self.data_dir.parent / f"{node_id}.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        cmd = [*self.wrapper, sys.executable, "-m", "crawler_node", "run", "--node-id", self.node_id,
               "--listen", f"{self.host}:{self.port}", "--data-dir", str(self.data_dir)]
        if self.proxy:
            cmd += ["--proxy", self.proxy]
        for seed in self.seeds:
            cmd += ["--seed", seed]
        for peer_id, peer_url in self.peers.items():
            cmd += ["--peer", f"{peer_id}={peer_url}"]
        if self.pace is not None and "--pace" not in self.extra_args:
            cmd += ["--pace", self.pace]
        return cmd + self.extra_args

    def start(self, *, wait: bool = True, timeout_s: float = 30.0) -> NodeProcess:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        if wait:
            self.wait_healthy(timeout_s)
        return self

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.node_id} exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                client.request_json(f"{self.url}/healthz", timeout=1.0)
                return
            except client.NodeError:
                time.sleep(0.1)
        raise TimeoutError(f"{self.node_id} not healthy after {timeout_s}s; log:\n{self.log_tail()}")

    def status(self, timeout: float = 10.0, *, fresh: bool = True) -> dict[str, Any]:
        """Fresh by default: the tests and benchmarks count on seeing what they just did."""
        return client.status(self.url, timeout=timeout, fresh=fresh)

    def wait_idle(self, timeout_s: float = 120.0, *, settle_polls: int = 2, interval_s: float = 0.25) -> dict[str, Any]:
        """Poll until the node reports idle on ``settle_polls`` consecutive polls."""
        deadline = time.monotonic() + timeout_s
        streak = 0
        while time.monotonic() < deadline:
            status = self.status()
            streak = streak + 1 if status["idle"] else 0
            if streak >= settle_polls:
                return status
            time.sleep(interval_s)
        raise TimeoutError(f"{self.node_id} not idle after {timeout_s}s: {self.status()}")

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (graceful stop), then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # a frozen (SIGSTOPped) node cannot stop itself
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> NodeProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
