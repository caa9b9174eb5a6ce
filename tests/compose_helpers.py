"""Driving the real docker-compose.yml from pytest: one compose project per stack, torn down
with ``down -v`` whatever happens, every wait bounded.

A stack is the repository's compose file plus a small override written by the test (only what
a test needs that a user does not: free host ports for every node, a slower synthetic web so
that there is a "mid-crawl" to act in, and a tighter per-host limit). Node HTTP APIs are
reached through their published loopback ports; crawl.log is read with ``docker exec``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SECRET = "compose-test-secret"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def require_docker() -> None:
    """Skip without an engine and Compose v2; fail instead where CI set CRAWLER_REQUIRE_DOCKER=1."""
    reason = None
    if shutil.which("docker") is None or shutil.which("docker-compose") is None:
        reason = "needs the docker CLI and docker-compose (Compose v2; .ci/docker-setup installs both)"
    else:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=20)
        version = subprocess.run(["docker-compose", "version", "--short"], capture_output=True, text=True, timeout=20)
        if info.returncode != 0:
            reason = "no Docker engine answers (start dockerd, or run .ci/docker-setup as root)"
        elif not version.stdout.strip().startswith("2."):
            reason = f"docker-compose is not Compose v2 ({version.stdout.strip() or version.stderr.strip()})"
    if reason is None:
        return
    if os.environ.get("CRAWLER_REQUIRE_DOCKER") == "1":
        pytest.fail(f"CRAWLER_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


def wait_until(predicate, timeout_s: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval)


def get_json(url: str, *, timeout: float = 5.0, secret: str | None = None) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"} if secret else {})
    with _OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read())


def post_json(url: str, body: dict, *, secret: str) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"})
    with _OPENER.open(request, timeout=10) as response:
        return json.loads(response.read())


def override_yaml(*, nodes: list[str], pages: int, latency_ms: int, profile_path: Path) -> str:
    """The test's override: every node on a free loopback port, a slower testweb, a tighter
    per-host limit (so a crawl of a few thousand URLs lasts long enough to act in)."""
    node_env = ("    environment:\n      CRAWLER_HOST_LIMIT_CEILING: \"2\"\n"
                "      CRAWLER_HEARTBEAT_INTERVAL_S: \"0.3\"\n      CRAWLER_PEER_DNS_INTERVAL_S: \"1\"\n")
    lines = ["services:",
             "  testweb:",
             "    command: !override [\"testweb\", \"--listen\", \"0.0.0.0:8900\", \"--hosts\", \"30\", \"--pages\","
             f" \"{pages}\", \"--seed\", \"1\", \"--profile\", \"/etc/testweb-profile.json\"]",
             "    volumes:",
             f"      - {profile_path}:/etc/testweb-profile.json:ro",
             "    ports: !override [\"127.0.0.1::8900\"]"]
    for node in nodes:
        lines += [f"  {node}:", "    ports: !override [\"127.0.0.1::8080\"]", node_env.rstrip("\n")]
    profile_path.write_text(json.dumps({"site-*.test": {"latency_ms": latency_ms}}))
    return "\n".join(lines) + "\n"


class ComposeStack:
    """One compose project (``crawlertest-*``: .ci/docker-teardown removes leftovers by that name)."""

    def __init__(self, *, name: str, workdir: Path, nodes: list[str], pages: int = 150, latency_ms: int = 400,
                 profiles: tuple[str, ...] = ()) -> None:
        self.project = f"crawlertest-{name}-{os.getpid()}"
        self.workdir = workdir
        self.override = workdir / "compose.override.yml"
        self.override.write_text(override_yaml(nodes=nodes, pages=pages, latency_ms=latency_ms,
                                               profile_path=workdir / "testweb-profile.json"))
        self.profiles = profiles
        self.env = {**os.environ, "CRAWLER_SECRET": SECRET, "TESTWEB_PORT": "", "DASHBOARD_PORT": ""}
        self._ports: dict[tuple[str, int], str] = {}

    # ---------------------------------------------------------------- compose
    def compose(self, *args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess:
        profile_args = [arg for profile in self.profiles for arg in ("--profile", profile)]
        command = ["docker-compose", "-p", self.project, "-f", str(COMPOSE_FILE), "-f", str(self.override),
                   "--project-directory", str(ROOT), *profile_args, *args]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def up(self, *services: str, scale: dict[str, int] | None = None, build: bool = False) -> None:
        scale_args = [arg for service, n in (scale or {}).items() for arg in ("--scale", f"{service}={n}")]
        self.compose("up", "-d", "--wait", "--wait-timeout", "120", "--no-recreate", *(["--build"] if build else []),
                     *scale_args, *services, timeout=400)
        self._ports.clear()  # a restarted container may publish on another port

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "-t", "20", timeout=180, check=False)

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}-{service}-{index}"

    def network(self) -> str:
        return f"{self.project}_default"

    def port(self, service: str, index: int = 1, private: int = 8080) -> str:
        key = (service, index)
        if key not in self._ports:
            out = self.compose("port", "--index", str(index), service, str(private)).stdout.strip()
            self._ports[key] = out.replace("0.0.0.0", "127.0.0.1")
        return self._ports[key]

    def forget_ports(self) -> None:
        self._ports.clear()

    # ---------------------------------------------------------------- docker
    def docker(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr}")
        return result

    def inspect(self, container: str) -> dict:
        return json.loads(self.docker("inspect", container).stdout)[0]

    def crawl_log(self, container: str) -> list[dict]:
        out = self.docker("exec", container, "sh", "-c", "cat /data/crawl.log* 2>/dev/null || true").stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    # ---------------------------------------------------------------- the crawl
    def testweb(self, path: str) -> dict:
        return get_json(f"http://{self.port('testweb', private=8900)}{path}", timeout=20)

    def node(self, service: str, path: str, index: int = 1) -> dict:
        return get_json(f"http://{self.port(service, index)}{path}", secret=SECRET)

    def try_node(self, service: str, path: str, index: int = 1) -> dict | None:
        try:
            return self.node(service, path, index)
        except (OSError, ValueError, urllib.error.URLError):
            return None


def duplicates(counts: dict[str, int]) -> int:
    return sum(n - 1 for url, n in counts.items() if n > 1 and not url.endswith("/robots.txt"))
