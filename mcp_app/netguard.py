"""SSRF guard for every outbound connection: which network addresses a webhook, an upstream MCP server or a client
metadata document may be reached at (``mcp_app.outbound`` applies it; the rules: docs/http-tools.md, "SSRF rules").

Pure Python (no Django): ``parse_allow_list`` reads the operator's allow-list; ``refusal`` says why one address may
not be reached (the tables below, cloud metadata, anything ``ipaddress`` does not consider global, IPv6 forms judged
by the IPv4 address they carry), or ``None``; ``resolve_checked`` resolves a host name and checks *every* address,
and the caller connects only to those (DNS rebinding cannot redirect it).

Not here: name resolution policy beyond the system resolver, proxies (http tools never use one), redirects (the
runtime refuses them).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, …
        ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.ip_address("fd00:ec2::254"),  # AWS IMDS over IPv6
    }
)

_V4: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), reason)
    for cidr, reason in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
        ("192.0.2.0/24", "reserved (documentation)"),
        ("192.88.99.0/24", "reserved (6to4 relay anycast)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved (benchmarking)"),
        ("198.51.100.0/24", "reserved (documentation)"),
        ("203.0.113.0/24", "reserved (documentation)"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
    )
)

_V6: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), reason)
    for cidr, reason in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "reserved (local-use NAT64)"),
        ("100::/64", "reserved (discard)"),
        ("2001:db8::/32", "reserved (documentation)"),
        ("2001:10::/28", "reserved (ORCHID)"),
        ("fc00::/7", "private (unique local)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One allow-list entry: a network (any port unless ``port``), or a host name as written in URLs."""

    network: IPNetwork | None = None
    host: str | None = None
    port: int | None = None

    def allows_address(self, address: IPAddress, port: int) -> bool:
        return (
            self.network is not None
            and address.version == self.network.version
            and address in self.network
            and self.port in (None, port)
        )

    def allows_host(self, host: str, port: int) -> bool:
        return self.host is not None and self.host == host.lower().rstrip(".") and self.port in (None, port)


class ForbiddenAddress(Exception):
    """The webhook's host resolves to an address http tools may not reach. The message names host and reason."""


def _parse_port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"invalid port in {entry!r}")
    return int(text)


def parse_allow_entry(entry: str) -> AllowEntry:
    """``"10.0.0.0/8"``, ``"127.0.0.1"``, ``"127.0.0.1:8080"``, ``"[::1]:8080"``, ``"::1"``, ``"fd00::/8"``,
    ``"hooks.internal"`` or ``"hooks.internal:8443"``. Raises ``ValueError`` on anything else."""
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError("allow-list entries are non-empty strings")
    text = entry.strip()
    port: int | None = None
    if text.startswith("["):
        inner, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"invalid entry {entry!r}")
            port = _parse_port(rest[1:], entry)
        text = inner
    elif text.count(":") == 1:
        text, port_text = text.split(":")
        port = _parse_port(port_text, entry)
    try:
        return AllowEntry(network=ipaddress.ip_network(text, strict=False), port=port)
    except ValueError:
        pass
    host = text.lower().rstrip(".")
    labels = host.split(".")  # an empty host has one empty label; "/" is neither alphanumeric nor "-_"
    if not all(label and len(label) < 64 and all(ch.isalnum() or ch in "-_" for ch in label) for label in labels):
        raise ValueError(f"{entry!r} is neither an address, a network nor a host name") from None
    return AllowEntry(host=host, port=port)


def parse_allow_list(entries: Iterable[str]) -> tuple[AllowEntry, ...]:
    return tuple(parse_allow_entry(entry) for entry in entries)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo client), if any."""
    if address in _MAPPED:
        return address.ipv4_mapped
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _SIX_TO_FOUR:
        return address.sixtofour
    if address in _TEREDO and address.teredo is not None:
        return address.teredo[1]
    return None


def address_reason(address: IPAddress) -> str | None:
    """Why http tools may not reach ``address`` (regardless of any allow-list), or ``None`` if they may."""
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return "scoped (link-local)"
        carried = embedded_ipv4(address)
        if carried is not None:
            reason = address_reason(carried)
            return f"an IPv6 form of {carried} ({reason})" if reason else None
        table = _V6
    else:
        table = _V4
    for network, reason in table:
        if address in network:
            return reason
    if not address.is_global:
        return "not globally reachable"
    return None


def refusal(address: IPAddress, port: int, host: str, allow: Sequence[AllowEntry] = ()) -> str | None:
    """Why a connection to ``address``:``port`` (for URL host ``host``) is refused, or ``None`` if allowed."""
    if any(entry.allows_host(host, port) or entry.allows_address(address, port) for entry in allow):
        return None
    return address_reason(address)


Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (TCP), in its order, without duplicates."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for _family, _type, _proto, _name, sockaddr in infos))


def parse_address(text: str) -> IPAddress:
    """An address as resolvers and URLs write it (IPv6 possibly bracketed, possibly with a ``%scope``)."""
    return ipaddress.ip_address(text.strip("[]"))


async def resolve_checked(
    host: str, port: int, allow: Sequence[AllowEntry] = (), resolver: Resolver = system_resolver
) -> list[IPAddress]:
    """Resolve ``host`` and return its addresses if *every* one may be reached; raise ``ForbiddenAddress``
    otherwise (also when the name does not resolve). Literal addresses are checked without resolving."""
    try:
        addresses = [parse_address(host)]
    except ValueError:
        try:
            addresses = [parse_address(text) for text in await resolver(host, port)]
        except (OSError, UnicodeError) as exc:
            raise ForbiddenAddress(f"cannot resolve host {host!r}") from exc
    if not addresses:
        raise ForbiddenAddress(f"cannot resolve host {host!r}")
    for address in addresses:
        reason = refusal(address, port, host, allow)
        if reason is not None:
            raise ForbiddenAddress(f"host {host!r} resolves to {address}, which is {reason}")
    return addresses
