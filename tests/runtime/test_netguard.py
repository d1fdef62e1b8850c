"""The SSRF guard, pure: which addresses are refused and why, the allow-list syntax, and resolution checks."""

from __future__ import annotations

import ipaddress

import pytest

from mcp_app.netguard import (
    ForbiddenAddress,
    address_reason,
    embedded_ipv4,
    parse_allow_entry,
    parse_allow_list,
    refusal,
    resolve_checked,
)

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("100.127.255.254", "shared (CGNAT)"),
        ("169.254.1.1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.10", "reserved (documentation)"),
        ("198.18.0.1", "reserved (benchmarking)"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fc00::1", "private (unique local)"),
        ("fd12:3456::1", "private (unique local)"),
        ("fd00:ec2::254", "cloud metadata"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "reserved (documentation)"),
        ("::ffff:127.0.0.1", "an IPv6 form of 127.0.0.1 (loopback)"),
        ("::ffff:169.254.169.254", "an IPv6 form of 169.254.169.254 (cloud metadata)"),
        ("::127.0.0.1", "an IPv6 form of 127.0.0.1 (loopback)"),
        ("64:ff9b::a00:1", "an IPv6 form of 10.0.0.1 (private)"),
        ("64:ff9b::7f00:1", "an IPv6 form of 127.0.0.1 (loopback)"),
        ("2002:c0a8:0101::1", "an IPv6 form of 192.168.1.1 (private)"),
        ("2002:7f00:1::1", "an IPv6 form of 127.0.0.1 (loopback)"),
        ("64:ff9b:1::1", "reserved (local-use NAT64)"),
    ],
)
def test_forbidden_addresses_and_their_reasons(address: str, reason: str):
    assert address_reason(ip(address)) == reason


@pytest.mark.parametrize(
    "address",
    ["93.184.215.14", "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"],
)
def test_public_addresses_pass(address: str):
    assert address_reason(ip(address)) is None


def test_scoped_ipv6_addresses_are_refused():
    assert address_reason(ip("fe80::1%eth0")) is not None


def test_embedded_ipv4_forms():
    assert embedded_ipv4(ip("::ffff:10.0.0.1")) == ip("10.0.0.1")
    assert embedded_ipv4(ip("64:ff9b::1.2.3.4")) == ip("1.2.3.4")
    assert embedded_ipv4(ip("2002:0102:0304::")) == ip("1.2.3.4")
    assert embedded_ipv4(ip("2606:4700::1")) is None


@pytest.mark.parametrize(
    ("entry", "network", "host", "port"),
    [
        ("10.0.0.0/8", "10.0.0.0/8", None, None),
        ("127.0.0.1", "127.0.0.1/32", None, None),
        ("127.0.0.1:8080", "127.0.0.1/32", None, 8080),
        ("::1", "::1/128", None, None),
        ("[::1]:8443", "::1/128", None, 8443),
        ("fd00::/8", "fd00::/8", None, None),
        ("Hooks.Internal.", None, "hooks.internal", None),
        ("hooks.internal:8443", None, "hooks.internal", 8443),
    ],
)
def test_allow_list_syntax(entry: str, network: str | None, host: str | None, port: int | None):
    parsed = parse_allow_entry(entry)
    assert (str(parsed.network) if parsed.network else None, parsed.host, parsed.port) == (network, host, port)


@pytest.mark.parametrize("entry", ["", "   ", "10.0.0.0/33", "127.0.0.1:http", "127.0.0.1:70000", "[::1]x", "a b"])
def test_malformed_allow_list_entries_are_rejected(entry: str):
    with pytest.raises(ValueError):
        parse_allow_entry(entry)


def test_the_allow_list_admits_exactly_what_it_names():
    allow = parse_allow_list(["127.0.0.1:9000", "10.1.0.0/16", "hooks.internal"])
    assert refusal(ip("127.0.0.1"), 9000, "127.0.0.1", allow) is None
    assert refusal(ip("127.0.0.1"), 9001, "127.0.0.1", allow) == "loopback"
    assert refusal(ip("10.1.200.3"), 443, "x.example", allow) is None
    assert refusal(ip("10.2.0.1"), 443, "x.example", allow) == "private"
    assert refusal(ip("192.168.9.9"), 80, "HOOKS.internal", allow) is None
    # An IPv4 entry does not admit the IPv6 forms that carry the same address.
    assert refusal(ip("::ffff:127.0.0.1"), 9000, "::ffff:127.0.0.1", allow) is not None


async def test_every_resolved_address_is_checked():
    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "::ffff:192.168.0.7"]

    with pytest.raises(ForbiddenAddress, match=r"192\.168\.0\.7"):
        await resolve_checked("mixed.example", 443, (), resolver)


async def test_resolution_returns_the_checked_addresses_and_literals_skip_the_resolver():
    calls: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["93.184.215.14"]

    assert await resolve_checked("public.example", 443, (), resolver) == [ip("93.184.215.14")]
    assert await resolve_checked("8.8.8.8", 443, (), resolver) == [ip("8.8.8.8")]
    assert calls == ["public.example"]


async def test_unresolvable_names_are_refused():
    async def resolver(host: str, port: int) -> list[str]:
        raise OSError("name or service not known")

    with pytest.raises(ForbiddenAddress, match="cannot resolve"):
        await resolve_checked("nowhere.invalid", 80, (), resolver)
