"""A real DNS server for the resolver's tests: Debian's dnsmasq on a loopback port.

It answers the names it is given (each with its own TTL), NXDOMAIN for every other name under
its domain, and logs every query it receives, so a test counts what the server was asked
rather than what the client thinks it asked. Started by Popen, stopped by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

DOMAIN = "dnstest.test"
_START_TIMEOUT_S = 10.0


def free_udp_tcp_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1 (dnsmasq answers on both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free for both TCP and UDP on 127.0.0.1")


class Dnsmasq:
    """``records``: name -> (addresses, ttl). Names are relative to DOMAIN when they have no dot."""

    def __init__(self, directory: Path, records: dict[str, tuple[list[str], int]]) -> None:
        binary = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin:/sbin")
        if binary is None:
            pytest.skip("dnsmasq is not installed (Debian: dnsmasq-base)")
        self.port = free_udp_tcp_port()
        self.server = f"127.0.0.1:{self.port}"
        self.log = directory / "dnsmasq-queries.log"
        self.log.write_text("")
        command = [binary, "--keep-in-foreground", "--conf-file=/dev/null", f"--port={self.port}",
                   "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
                   "--pid-file=", "--log-queries", f"--log-facility={self.log}", f"--local=/{DOMAIN}/"]
        for name, (addresses, ttl) in records.items():
            # One IPv4 address per --host-record; repeated, a name gets several.
            command += [f"--host-record={self.name(name)},{address},{ttl}" for address in addresses]
        if os.geteuid() == 0:
            command.append("--user=root")  # it writes our log file
        self._stderr = open(directory / "dnsmasq-stderr.log", "ab")
        self.proc = subprocess.Popen(command, stdout=self._stderr, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self._sentinels = 0
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dnsmasq exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"dnsmasq did not listen on {self.port}") from None
                time.sleep(0.05)

    @staticmethod
    def name(name: str) -> str:
        return name if "." in name else f"{name}.{DOMAIN}"

    def queries(self, name: str, qtype: str = "A") -> int:
        """How many ``qtype`` queries for ``name`` the server has logged."""
        needle = f"query[{qtype}] {self.name(name)} from"
        return sum(needle in line for line in self.log.read_text(errors="replace").splitlines())

    def sync(self) -> None:
        """Return once every query sent before this call is in the log: dnsmasq answers one
        query at a time and logs it as it does, so a sentinel query seen in the log comes
        after them."""
        self._sentinels += 1
        sentinel = f"sentinel-{self._sentinels}.{DOMAIN}"
        query = _a_query(sentinel)
        deadline = time.monotonic() + 5.0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.settimeout(1.0)
            while time.monotonic() < deadline:
                udp.sendto(query, ("127.0.0.1", self.port))
                try:
                    udp.recv(512)
                except TimeoutError:
                    continue
                while time.monotonic() < deadline:
                    if self.queries(sentinel):
                        return
                    time.sleep(0.02)
        raise TimeoutError("dnsmasq did not log the sentinel query")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._stderr.close()


def _a_query(name: str) -> bytes:
    """A DNS query for ``name``'s A record (RFC 1035 4.1): header, then the question."""
    header = bytes.fromhex("1234 0100 0001 0000 0000 0000".replace(" ", ""))
    labels = b"".join(bytes([len(label)]) + label.encode("ascii") for label in name.split("."))
    return header + labels + b"\x00" + b"\x00\x01\x00\x01"
