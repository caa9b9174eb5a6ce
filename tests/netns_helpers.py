"""Nodes in network namespaces, for partitions: each node has a namespace of its own, with its
address (10.77.<net>.<10+i>/32) on the namespace's loopback; a veth pair to each other node
carries the cluster's traffic, and a veth pair to the root namespace carries the node's fetches
to testweb and the test's own calls. Nothing is routed or bridged through the root namespace
(a Docker engine's FORWARD policy, DROP, would apply there): every packet goes over one veth,
to an address of the namespace at its other end.

Cutting a node off (:meth:`Network.cut`) sets its links to the other nodes down: it still
reaches testweb, and the test still reaches its API, but the cluster is split in two — the
partition in which two nodes may crawl one host at once. This sandbox has no iptables binary;
links going down is the cut.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

ROOT_ADDRESS_NET = "10.78"  # the root namespace's side: testweb and the test's client


def available() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip binary (iproute2)"
    probe = "cnprobe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Network:
    """Namespaces for ``names`` (at most 9), made by :meth:`up` and removed by :meth:`down`."""

    names: list[str]
    net: int = 0  # the third octet: two networks at once need two values
    tag: str = field(default_factory=lambda: f"{os.getpid() % 10000:04d}")
    _made_ns: list[str] = field(default_factory=list)
    _made_links: list[str] = field(default_factory=list)

    def ns(self, name: str) -> str:
        return f"cn{self.tag}{name}"

    def address(self, name: str) -> str:
        return f"10.77.{self.net}.{10 + self.names.index(name)}"

    @property
    def root_address(self) -> str:
        """The root namespace's address the nodes reach: testweb listens there."""
        return f"{ROOT_ADDRESS_NET}.{self.net}.1"

    def _mesh_link(self, a: str, b: str) -> tuple[str, str]:
        i, j = self.names.index(a), self.names.index(b)
        return f"m{self.tag}{i}{j}", f"m{self.tag}{j}{i}"

    def _root_link(self, name: str) -> tuple[str, str]:
        i = self.names.index(name)
        return f"r{self.tag}{i}", f"n{self.tag}{i}"

    def up(self) -> Network:
        try:
            for name in self.names:
                ns = self.ns(name)
                _ip("netns", "add", ns)
                self._made_ns.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self.address(name)}/32", "dev", "lo")
            for k, a in enumerate(self.names):
                for b in self.names[k + 1:]:
                    end_a, end_b = self._mesh_link(a, b)
                    _ip("link", "add", end_a, "type", "veth", "peer", "name", end_b)
                    self._made_links.append(end_a)
                    for end, here, there in ((end_a, a, b), (end_b, b, a)):
                        _ip("link", "set", end, "netns", self.ns(here))
                        _ip("-n", self.ns(here), "link", "set", end, "up")
                        _ip("-n", self.ns(here), "route", "add", f"{self.address(there)}/32", "dev", end,
                            "src", self.address(here))
            for name in self.names:
                outer, inner = self._root_link(name)
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                self._made_links.append(outer)
                _ip("link", "set", inner, "netns", self.ns(name))
                if name == self.names[0]:
                    _ip("addr", "add", f"{self.root_address}/32", "dev", outer)
                _ip("link", "set", outer, "up")
                _ip("-n", self.ns(name), "link", "set", inner, "up")
                _ip("-n", self.ns(name), "route", "add", f"{self.root_address}/32", "dev", inner,
                    "src", self.address(name))
                _ip("route", "add", f"{self.address(name)}/32", "dev", outer, "src", self.root_address)
        except BaseException:
            self.down()
            raise
        return self

    def wrapper(self, name: str) -> list[str]:
        """The command prefix that runs a process in the node's namespace."""
        return ["ip", "netns", "exec", self.ns(name)]

    def _set_mesh(self, name: str, state: str) -> None:
        for other in self.names:
            if other != name:
                end, _ = self._mesh_link(name, other)
                _ip("-n", self.ns(name), "link", "set", end, state)

    def cut(self, name: str) -> None:
        """Cut ``name`` off from the other nodes (not from testweb, nor from the test)."""
        self._set_mesh(name, "down")

    def heal(self, name: str) -> None:
        self._set_mesh(name, "up")
        for other in self.names:  # a link brought back up has lost its routes
            if other != name:
                end, peer_end = self._mesh_link(name, other)
                for ns, dev, dst, src in ((self.ns(name), end, self.address(other), self.address(name)),
                                          (self.ns(other), peer_end, self.address(name), self.address(other))):
                    subprocess.run(["ip", "-n", ns, "route", "replace", f"{dst}/32", "dev", dev, "src", src],
                                   capture_output=True, timeout=10)
                    # a neighbour that failed while the link was down would be unreachable for a while
                    subprocess.run(["ip", "-n", ns, "neigh", "flush", "dev", dev], capture_output=True, timeout=10)

    def down(self) -> None:
        """Remove what :meth:`up` made (deleting a namespace deletes the veth ends in it)."""
        for outer in self._made_links:
            subprocess.run(["ip", "link", "del", outer], capture_output=True, timeout=10)
        for ns in self._made_ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        for name in self.names:
            subprocess.run(["ip", "route", "del", f"{self.address(name)}/32"], capture_output=True, timeout=10)
        self._made_links.clear()
        self._made_ns.clear()
