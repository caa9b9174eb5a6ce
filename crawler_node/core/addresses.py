"""IP addresses: literal or name, public or not (fetching a non-public one is SSRF)."""

from __future__ import annotations

import ipaddress


def is_ip_literal(host: str) -> bool:
    """True when ``host`` is an IP address rather than a name: IPv4, or IPv6 bare ("::1") or in
    a URL's brackets ("[::1]"). A port is not part of it: see :func:`bare_host`."""
    try:
        if host.startswith("[") and host.endswith("]"):
            ipaddress.IPv6Address(host[1:-1])  # only IPv6 is bracketed in a URL
        else:
            ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_public_address(ip: str) -> bool:
    """True when ``ip`` is a globally routable unicast address (fetching it is not SSRF)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False  # unknown means no: this guards against reaching internal services
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return _is_public(embedded)
    return _is_public(address)


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    # An IPv6 literal can smuggle an IPv4 target (mapped, 6to4, NAT64): judge that target.
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )
