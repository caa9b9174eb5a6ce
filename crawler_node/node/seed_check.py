"""Seeds that will not be fetched, said at start: a seed on a loopback or private address without
``--allow-private`` used to end as a ``not_allowed`` line in crawl.log, and the crawl "finished"
at 100% having fetched nothing. Checked for direct fetches only (through a proxy, the proxy
resolves and decides)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from crawler_node.core.addresses import is_ip_literal, is_public_address
from crawler_node.core.urls import bare_host
from crawler_node.fetch.dns import DnsLookupError, PrivateAddressError, Resolver

MAX_CHECKED = 20  # seed hosts looked up at start, at most (a seed list of thousands is not delayed)
CHECK_TIMEOUT_S = 5.0


async def unfetchable_seed_hosts(hosts: Iterable[str], resolver: Resolver) -> list[tuple[str, str]]:
    """(host, why) for each of the first MAX_CHECKED distinct seed hosts a direct fetch would be
    refused for: a private address (the resolver's guard), or a name that does not resolve."""
    checked = list(dict.fromkeys(hosts))[:MAX_CHECKED]

    async def one(host_port: str) -> tuple[str, str] | None:
        host = bare_host(host_port)
        if is_ip_literal(host):
            address = host.strip("[]")
            return None if is_public_address(address) or resolver.allow_private else (host_port, "is a private address")
        try:
            await resolver.resolve(host)
        except PrivateAddressError as exc:
            return host_port, f"resolves only to non-public addresses {exc.addresses}"
        except DnsLookupError as exc:
            return host_port, f"does not resolve ({exc.reason})"
        return None

    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            found = await asyncio.gather(*(one(host) for host in checked))
    except TimeoutError:
        return []  # slow DNS at start: the fetches will say it, in crawl.log
    return [entry for entry in found if entry is not None]
