"""A small real web inside the test run: Debian's nginx, dnsmasq and squid with an openssl CA.

``start_realweb(tmp_path)`` writes the sites (see realweb_sites.py), makes the certificates
(realweb_certs.py), and starts three real servers, each by Popen, each stopped by PID:
- nginx serves every site on its own loopback address 127.0.<block>.x (block 3 unless another
  instance holds it), on ports 80/443 (8443 for altport, 8001-8006 for shared), and writes one
  JSON access log that ``RealWeb.accesses()`` parses: what a test asserts on is what nginx saw;
- dnsmasq answers ``<site>.realweb.test`` with the site's address (TTL of a few seconds) and
  NXDOMAIN for ``missing.realweb.test``, on a loopback port (pass ``dns_server`` to --dns-server);
- squid, when installed, is a forward proxy that CONNECTs to the https sites; it resolves the test
  names from a hosts_file of ours, so no system file (/etc/hosts, /etc/resolv.conf) is touched.
Only 127.0.0.1 and 127.0.<block>.x receive traffic. When a tool is missing or ports 80/443
cannot be bound (not root), the test is skipped, unless CRAWLER_REQUIRE_REALWEB=1 (CI), where
it fails with the reason.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dnsmasq_helpers import free_udp_tcp_port
from realweb_certs import make_certificates
from realweb_sites import CERT_SITES, DOMAIN, MISSING, OCTETS, WRONG_NAME, SiteTruth, nginx_config, write_sites

__all__ = [
    "DOMAIN", "MISSING", "Access", "RealWeb", "ServerProcess", "SiteTruth",
    "peak_concurrency", "realweb", "start_realweb",
]

DNS_TTL_S = 3
_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Access:
    """One line of nginx's access log."""

    start: float  # epoch seconds the request began ($msec - $request_time)
    end: float  # $msec: when the last byte was sent
    server_addr: str
    server_port: int
    scheme: str
    host: str  # $host: the Host header's name, lower-cased, no port
    method: str
    uri: str  # $request_uri, as sent
    status: int
    bytes: int  # body bytes sent
    user_agent: str

    @property
    def path(self) -> str:
        """The request's path without its query."""
        return self.uri.split("?", 1)[0]

    @classmethod
    def from_json(cls, line: str) -> Access:
        raw = json.loads(line)
        end = float(raw["msec"])
        return cls(
            start=end - float(raw["request_time"] or 0), end=end, server_addr=raw["server_addr"],
            server_port=int(raw["server_port"]), scheme=raw["scheme"], host=raw["host"],
            method=raw["method"], uri=raw["uri"], status=int(raw["status"]),
            bytes=int(raw["bytes"] or 0), user_agent=raw["user_agent"],
        )


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process dies, so a test run killed
    from outside (a CI timeout, SIGKILL) leaves no nginx holding ports 80/443. (dnsmasq and squid
    change credentials at start, which clears this; they hold only ephemeral ports.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def peak_concurrency(records: list[Access]) -> int:
    """The most requests in progress at one moment among ``records``, from their [start, end]
    intervals (a request ending at the instant another starts does not overlap it). Counted in
    whole milliseconds, the resolution nginx logs: in floats, ``msec - request_time`` of two
    requests that merely touch can come out a hair apart and look overlapping."""
    events = sorted([(round(record.start * 1000), 1) for record in records]
                    + [(round(record.end * 1000), -1) for record in records])
    current = peak = 0
    for _, change in events:  # ends sort before starts at the same instant: -1 < 1
        current += change
        peak = max(peak, current)
    return peak


class ServerProcess:
    """One child process, started by Popen, ready when its TCP ports accept, stopped by PID."""

    def __init__(self, *, name: str, command: list[str], log: Path) -> None:
        self.name, self.command, self.log = name, command, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ready: list[tuple[str, int]]) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        waiting = list(ready)
        while waiting:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not listen on {waiting} within {_START_TIMEOUT_S}s: {self.tail()}")
            try:
                socket.create_connection(waiting[0], timeout=0.5).close()
                waiting.pop(0)
            except OSError:
                time.sleep(0.05)

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=_STOP_TIMEOUT_S)


class RealWeb:
    """A running small real web; build it with ``start_realweb``."""

    def __init__(self, *, root: Path, block: int, ca_file: Path, truths: dict[str, SiteTruth]) -> None:
        self.root = root
        self.block = block
        self.ca_file = ca_file
        self.access_log = root / "nginx" / "access.log"
        self.dns_server = ""  # set once dnsmasq is up: "127.0.0.1:PORT"
        self.proxy_url: str | None = None  # "http://127.0.0.1:PORT" once squid is up
        self._truths = truths
        self._servers: list[ServerProcess] = []
        self._cleanup: list[Path] = []

    def address(self, site: str) -> str:
        """The loopback address a site is served on."""
        return f"127.0.{self.block}.{OCTETS[site]}"

    def host(self, site: str) -> str:
        return f"{site}.{DOMAIN}"

    def url(self, site: str, path: str = "/", scheme: str | None = None, port: int | None = None) -> str:
        """``https://<site>.realweb.test[:port]/path``. The scheme defaults to the site's own (http
        for shared), the port to the site's own when it is not the scheme's default (8443 for
        altport). shared is addressed by IP literal, its port defaulting to the first shared port."""
        truth = self._truths[site]
        scheme = scheme or truth.scheme
        if site == "shared":
            return f"{scheme}://{self.address(site)}:{port or truth.ports[0]}{path}"
        if port is None and scheme == truth.scheme and truth.ports[0] not in (80, 443):
            port = truth.ports[0]
        default = {"http": 80, "https": 443}[scheme]
        authority = self.host(site) if port in (None, default) else f"{self.host(site)}:{port}"
        return f"{scheme}://{authority}{path}"

    def accesses(self, site: str | None = None) -> list[Access]:
        """Every request nginx has logged so far (re-read each call), or those to one site
        (matched by the site's address, so requests by IP literal count too)."""
        if not self.access_log.exists():
            return []
        # nginx writes each line with one write(); a line not yet ended by "\n" is still coming.
        complete = self.access_log.read_text(errors="replace").rpartition("\n")[0]
        records = [Access.from_json(line) for line in complete.split("\n") if line.strip()]
        if site is None:
            return records
        address = self.address(site)
        return [record for record in records if record.server_addr == address]

    def logged(self, site: str | None, wanted: Callable[[Access], bool], count: int = 1,
               timeout_s: float = 5.0) -> list[Access]:
        """The logged requests (to ``site``, or all) that ``wanted`` picks, once there are
        ``count`` of them or ``timeout_s`` has passed. nginx logs a request after its response
        has gone out: a client that has just read the response can be ahead of the line."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [record for record in self.accesses(site) if wanted(record)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)

    def expected(self, site: str) -> SiteTruth:
        return self._truths[site]

    def stop(self) -> None:
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()
        for path in self._cleanup:
            shutil.rmtree(path, ignore_errors=True)
        self._cleanup.clear()


def _block_free(block: int) -> bool:
    """Whether this block's addresses can be bound (no other RealWeb holds them)."""
    for octet, port in ((OCTETS["redirect"], 80), (OCTETS["httpsonly"], 443), (OCTETS["shared"], 8001)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((f"127.0.{block}.{octet}", port))
            except OSError:
                return False
    return True


def _candidate_blocks() -> Iterator[int]:
    yield 3
    others = list(range(4, 250))
    random.shuffle(others)  # instances started at the same moment rarely pick the same block
    yield from others[:30]


def _unavailable(reason: str) -> None:
    if os.environ.get("CRAWLER_REQUIRE_REALWEB") == "1":
        pytest.fail(f"the small real web is required (CRAWLER_REQUIRE_REALWEB=1): {reason}")
    pytest.skip(reason)


def _check_tools() -> None:
    missing = [tool for tool in ("nginx", "dnsmasq", "openssl") if _which(tool) is None]
    if missing:
        _unavailable(f"not installed: {', '.join(missing)} (Debian: nginx-light dnsmasq-base openssl)")
    if os.geteuid() != 0:
        _unavailable("ports 80 and 443 need root")


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def _start_nginx(web: RealWeb, root: Path, certs, addresses: dict[str, str]) -> None:
    prefix = root / "nginx"
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (prefix / "temp" / kind).mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_config(
        prefix=prefix, sites_root=root / "sites", access_log=web.access_log, addresses=addresses,
        certs={"good": (certs.good.cert, certs.good.key), **{
            name: (getattr(certs, name).cert, getattr(certs, name).key) for name in CERT_SITES
        }},
    ))
    command = [str(_which("nginx")), "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")]
    nginx = ServerProcess(name="nginx", command=command, log=prefix / "stderr.log")
    web._servers.append(nginx)
    ready = [(addresses["redirect"], 80), (addresses["altport"], 8443), (addresses["shared"], 8006)]
    ready += [(addresses[name], 443) for name in OCTETS if name not in ("altport", "shared")]
    try:
        nginx.start(ready)
    except RuntimeError as error:
        raise RuntimeError(f"{error}\n{(prefix / 'error.log').read_text(errors='replace')[-2000:]}") from None


def _start_dnsmasq(web: RealWeb, root: Path, addresses: dict[str, str]) -> None:
    port = free_udp_tcp_port()
    command = [
        str(_which("dnsmasq")), "--keep-in-foreground", "--conf-file=/dev/null", f"--pid-file={root / 'dnsmasq.pid'}",
        f"--port={port}", "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
        "--log-facility=-", f"--local-ttl={DNS_TTL_S}", f"--auth-ttl={DNS_TTL_S}", f"--local=/{DOMAIN}/",
        f"--address=/{MISSING}.{DOMAIN}/",
    ]
    command += [f"--address=/{site}.{DOMAIN}/{address}" for site, address in addresses.items()]
    if os.geteuid() == 0:
        command.append("--user=root")  # its log is our file; nothing to protect by dropping to nobody
    dnsmasq = ServerProcess(name="dnsmasq", command=command, log=root / "dnsmasq.log")
    web._servers.append(dnsmasq)
    dnsmasq.start([("127.0.0.1", port)])
    web.dns_server = f"127.0.0.1:{port}"


def _start_squid(web: RealWeb, addresses: dict[str, str]) -> None:
    """Squid drops to its own user, which cannot enter pytest's private tmp dirs: its files live
    in a directory of its own under /tmp, removed at stop. -n gives its shared-memory segments a
    name of this instance, so instances (and a crashed earlier run) do not collide."""
    squid = _which("squid")
    if squid is None:
        return
    try:
        user: pwd.struct_passwd | None = pwd.getpwnam("proxy")  # Debian's squid user
    except KeyError:
        user = None
    state = Path(tempfile.mkdtemp(prefix="realweb-squid-"))
    web._cleanup.append(state)
    if user is not None:
        os.chown(state, user.pw_uid, user.pw_gid)
    state.chmod(0o755)
    hosts = state / "hosts"
    hosts.write_text("".join(f"{address} {site}.{DOMAIN}\n" for site, address in addresses.items()))
    port = free_udp_tcp_port()
    conf = state / "squid.conf"
    conf.write_text(
        f"http_port 127.0.0.1:{port}\nacl loopback src 127.0.0.0/8\nhttp_access allow loopback\n"
        "http_access deny all\ncache deny all\nvia off\nforwarded_for delete\n"
        f"hosts_file {hosts}\npid_filename none\ncache_log {state / 'cache.log'}\n"
        f"access_log stdio:{state / 'access.log'} squid\ncache_store_log none\ncoredump_dir {state}\n"
        f"netdb_filename none\nshutdown_lifetime 0 seconds\ncache_effective_user {user.pw_name if user else 'nobody'}\n"
    )
    name = f"realweb{os.getpid()}x{port}"
    proxy = ServerProcess(name="squid", command=[squid, "-N", "-n", name, "-f", str(conf)], log=state / "stderr.log")
    web._servers.append(proxy)
    proxy.start([("127.0.0.1", port)])
    web.proxy_url = f"http://127.0.0.1:{port}"


def start_realweb(tmp_path: Path) -> RealWeb:
    """Write the sites and certificates under ``tmp_path`` and start nginx, dnsmasq and squid."""
    _check_tools()
    root = Path(tmp_path)
    errors = []
    for block in _candidate_blocks():
        if not _block_free(block):
            continue
        addresses = {site: f"127.0.{block}.{octet}" for site, octet in OCTETS.items()}
        truths = write_sites(root / "sites", addresses)
        good = [site for site in OCTETS if site not in CERT_SITES]
        certs = make_certificates(
            root / "certs", names=[f"{site}.{DOMAIN}" for site in good], ips=[addresses[site] for site in good],
            expired_name=f"expired.{DOMAIN}", selfsigned_name=f"selfsigned.{DOMAIN}", wrong_name=WRONG_NAME,
        )
        web = RealWeb(root=root, block=block, ca_file=certs.ca, truths=truths)
        try:
            _start_nginx(web, root, certs, addresses)
        except RuntimeError as error:
            web.stop()
            errors.append(str(error))
            if "Address already in use" in str(error):
                continue  # another instance took this block between the check and the bind
            raise
        try:
            _start_dnsmasq(web, root, addresses)
            _start_squid(web, addresses)
        except BaseException:
            web.stop()
            raise
        return web
    _unavailable(f"no free 127.0.x block for nginx: {errors[-1:] or 'all in use'}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def realweb(tmp_path_factory) -> Iterator[RealWeb]:
    web = start_realweb(tmp_path_factory.mktemp("realweb"))
    try:
        yield web
    finally:
        web.stop()
