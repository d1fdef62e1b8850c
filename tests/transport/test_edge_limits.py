"""The Twisted/daphne internals ``edge_limits`` builds on: this test fails when an upgrade changes them."""

from __future__ import annotations

import daphne
import twisted

from mcp_app.transport import edge_limits


def test_the_installed_twisted_and_daphne_are_the_versions_the_limits_were_written_for():
    assert edge_limits.versions_supported(), (twisted.__version__, daphne.__version__)


def test_every_private_attribute_the_limits_use_still_exists():
    assert edge_limits.internals_missing() == []


def test_install_makes_daphne_build_limited_channels():
    from daphne.http_protocol import HTTPFactory

    assert edge_limits.install() is True
    protocol = HTTPFactory.protocol(HTTPFactory(server=None))
    assert type(protocol._channel).__name__ == "LimitedHTTPChannel"


def test_refusals_are_complete_http_answers_with_a_json_rpc_body():
    raw = edge_limits.error_response(431, "too big")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"connection: close" in head and f"content-length: {len(body)}".encode() in head
    assert body == b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"too big"}}'
