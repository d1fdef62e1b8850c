"""http tools at the runtime, against a real HTTP server on 127.0.0.1: request, reply mapping, every failure,
the SSRF guard (allow-list, mapped addresses, redirects, proxies), pinning, cancellation, secrets in logs."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Any

import orjson
import pytest
from django.test import override_settings

from mcp_app import outbound
from mcp_app.definitions.targets import HttpTarget
from mcp_app.protocol.context import CallContext, InvalidToolArguments, Principal, RequestContext
from mcp_app.protocol.descriptors import ServerCatalog, ServerDescription, ToolDescriptor
from mcp_app.protocol.reporters import LogReporter, ProgressReporter, discard
from mcp_app.runtime import webhooks
from mcp_app.runtime.execution import InlineRunner
from tests.webhook_server import BIG_TOTAL, WebhookServer, running_server, self_signed_certificate

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
LOCAL = {"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}


def tool(url: str, *, output_schema: Any = None, **target: Any) -> ToolDescriptor:
    return ToolDescriptor(
        name="weather",
        input_schema=SCHEMA,
        output_schema=output_schema,
        target=HttpTarget(url=url, method=target.pop("method", "POST"), **target),
    )


def tool_call() -> CallContext:
    request = RequestContext(
        server=ServerDescription(server_id="srv-1", name="srv"),
        catalog=ServerCatalog(),
        runner=InlineRunner(),
        protocol_version="2025-06-18",
        principal=Principal(tenant="acme", agent_id="bot-7"),
    )
    return CallContext(request=request, progress=ProgressReporter(None, discard), log=LogReporter(None, discard))


async def run(descriptor: ToolDescriptor, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return await InlineRunner().call_tool(descriptor, {"city": "Oslo"} if arguments is None else arguments, tool_call())


def error_code(result: dict[str, Any]) -> str:
    assert result["isError"] is True
    return orjson.loads(result["content"][1]["text"])["code"]


# ------------------------------------------------------------------------------------------- requests and replies


@override_settings(MCP_APP=LOCAL)
async def test_the_call_is_posted_as_json_with_arguments_agent_and_a_unique_call_id(webhook_server: WebhookServer):
    descriptor = tool(webhook_server.url("/content"), headers=(("X-Team", "billing"),))
    first = await run(descriptor)
    await run(descriptor, {"city": "Bergen"})
    assert first == {"content": [{"type": "text", "text": "hello from the webhook"}]}
    one, two = webhook_server.requests
    assert one.method == "POST" and one.path == "/content"
    assert one.headers["Content-Type"] == "application/json"
    assert one.headers["X-Team"] == "billing"
    payload = one.json()
    assert payload["arguments"] == {"city": "Oslo"}
    assert payload["agent"] == "bot-7"
    assert payload["tool"] == "weather" and payload["server"] == "srv-1"
    assert len(payload["call_id"]) == 32
    assert two.json()["arguments"] == {"city": "Bergen"}
    assert two.json()["call_id"] != payload["call_id"]


@override_settings(MCP_APP=LOCAL)
async def test_the_configured_method_is_used(webhook_server: WebhookServer):
    await run(tool(webhook_server.url("/content"), method="PUT"))
    assert webhook_server.requests[0].method == "PUT"


@override_settings(MCP_APP=LOCAL)
async def test_structured_content_is_the_result_and_is_checked_against_the_output_schema(
    webhook_server: WebhookServer,
):
    good_schema = {"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]}
    result = await run(tool(webhook_server.url("/structured"), output_schema=good_schema))
    assert result["structuredContent"] == {"temp": 21.5, "unit": "C"}
    # The runner serialises structured content as text for clients without structured-output support.
    assert orjson.loads(result["content"][0]["text"]) == {"temp": 21.5, "unit": "C"}
    assert "isError" not in result

    bad_schema = {"type": "object", "properties": {"temp": {"type": "string"}}}
    refused = await run(tool(webhook_server.url("/structured"), output_schema=bad_schema))
    assert error_code(refused) == "INVALID_OUTPUT"

    both = await run(tool(webhook_server.url("/both")))
    assert both == {"content": [{"type": "text", "text": "warm"}], "structuredContent": {"temp": 30}}


@override_settings(MCP_APP=LOCAL)
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/value", {"content": [{"type": "text", "text": '[1,"two",{"three":3}]'}]}),
        ("/string", {"content": [{"type": "text", "text": "plain words"}]}),
        ("/no-content", {"content": []}),
        ("/tool-error", {"content": [{"type": "text", "text": "no such city"}], "isError": True}),
    ],
)
async def test_other_replies_map_to_text_empty_or_the_webhooks_own_error(
    webhook_server: WebhookServer, path: str, expected: dict[str, Any]
):
    assert await run(tool(webhook_server.url(path))) == expected


@override_settings(MCP_APP=LOCAL)
async def test_arguments_are_validated_before_anything_is_sent(webhook_server: WebhookServer):
    with pytest.raises(InvalidToolArguments, match="city"):
        await run(tool(webhook_server.url("/content")), {"city": 5})
    assert webhook_server.requests == []


# ----------------------------------------------------------------------------------------------------- failures


@override_settings(MCP_APP=LOCAL)
async def test_an_error_status_is_an_error_result_without_the_body(webhook_server: WebhookServer):
    result = await run(tool(webhook_server.url("/status/503")))
    assert error_code(result) == "WEBHOOK_HTTP_STATUS"
    assert "HTTP 503" in result["content"][0]["text"]
    assert "maintenance" not in orjson.dumps(result).decode()


@override_settings(MCP_APP=LOCAL)
async def test_a_slow_webhook_times_out(webhook_server: WebhookServer):
    result = await asyncio.wait_for(run(tool(webhook_server.url("/slow"), timeout_seconds=0.3)), timeout=5)
    assert error_code(result) == "WEBHOOK_TIMEOUT"
    assert "0.3 s" in result["content"][0]["text"]


@override_settings(MCP_APP={**LOCAL, "HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS": 0.2})
async def test_the_operators_default_timeout_applies_and_the_maximum_bounds_stored_timeouts(
    webhook_server: WebhookServer,
):
    by_default = await asyncio.wait_for(run(tool(webhook_server.url("/slow"))), timeout=5)
    assert "0.2 s" in by_default["content"][0]["text"]
    with override_settings(
        MCP_APP={**LOCAL, "HTTP_TOOL_MAX_TIMEOUT_SECONDS": 0.3, "HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS": 0.3}
    ):
        bounded = await asyncio.wait_for(run(tool(webhook_server.url("/slow"), timeout_seconds=30)), timeout=5)
    assert error_code(bounded) == "WEBHOOK_TIMEOUT" and "0.3 s" in bounded["content"][0]["text"]


@override_settings(MCP_APP={**LOCAL, "HTTP_TOOL_MAX_RESPONSE_BYTES": 4096})
async def test_an_oversize_reply_is_refused_while_streaming_without_reading_it_all(webhook_server: WebhookServer):
    result = await run(tool(webhook_server.url("/big")))
    assert error_code(result) == "WEBHOOK_TOO_LARGE"
    assert "4096 bytes" in result["content"][0]["text"]
    # The server was cut off long before it could send its 64 MiB.
    assert webhook_server.big_bytes_sent < BIG_TOTAL


@override_settings(MCP_APP={**LOCAL, "HTTP_TOOL_MAX_RESPONSE_BYTES": 4096})
async def test_an_oversize_content_length_is_refused_before_reading(webhook_server: WebhookServer):
    result = await asyncio.wait_for(run(tool(webhook_server.url("/declared-big"))), timeout=5)
    assert error_code(result) == "WEBHOOK_TOO_LARGE"


@override_settings(MCP_APP=LOCAL)
@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/invalid", "WEBHOOK_INVALID_JSON"),
        ("/bad-result", "WEBHOOK_INVALID_RESULT"),
        ("/gzip", "WEBHOOK_INVALID_JSON"),
    ],
)
async def test_invalid_replies_are_error_results(webhook_server: WebhookServer, path: str, code: str):
    result = await run(tool(webhook_server.url(path)))
    assert error_code(result) == code


@override_settings(MCP_APP=LOCAL)
async def test_a_refused_connection_is_an_error_result():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        result = await run(tool(f"http://127.0.0.1:{port}/"))
    assert error_code(result) == "WEBHOOK_UNREACHABLE"
    assert f"127.0.0.1:{port}" in result["content"][0]["text"]
    assert "Traceback" not in result["content"][0]["text"]


# ---------------------------------------------------------------------------------------------------- SSRF guard


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
async def test_loopback_in_any_form_is_refused_without_the_allow_list(webhook_server: WebhookServer, host: str):
    result = await run(tool(webhook_server.url("/content", host=host)))
    assert error_code(result) == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert webhook_server.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "http://192.168.1.20/hook",
        "http://100.64.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[::ffff:10.0.0.1]/hook",
        "http://[64:ff9b::7f00:1]/hook",
        "http://[fe80::1]/hook",
        "http://0.0.0.0/hook",
    ],
)
async def test_private_link_local_metadata_and_mapped_addresses_are_refused(url: str):
    result = await asyncio.wait_for(run(tool(url)), timeout=5)
    assert error_code(result) == "WEBHOOK_FORBIDDEN_ADDRESS"


@override_settings(MCP_APP=LOCAL)
async def test_allow_listing_ipv4_does_not_admit_its_ipv6_mapped_form(webhook_server: WebhookServer):
    result = await run(tool(webhook_server.url("/content", host="[::ffff:127.0.0.1]")))
    assert error_code(result) == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert webhook_server.requests == []


async def test_the_outbound_allow_list_admits_a_webhook_as_the_http_tool_one_does(webhook_server: WebhookServer):
    refused = await run(tool(webhook_server.url("/content")))
    with override_settings(MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        allowed = await run(tool(webhook_server.url("/content")))
    assert error_code(refused) == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert "isError" not in allowed
    assert len(webhook_server.requests) == 1


async def test_an_allow_list_entry_with_a_port_admits_only_that_port(webhook_server: WebhookServer):
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": [f"127.0.0.1:{webhook_server.port}"]}):
        allowed = await run(tool(webhook_server.url("/content")))
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": [f"127.0.0.1:{webhook_server.port + 1}"]}):
        refused = await run(tool(webhook_server.url("/content")))
    assert "isError" not in allowed
    assert error_code(refused) == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert len(webhook_server.requests) == 1


async def test_a_redirect_is_never_followed_even_to_an_allowed_address(webhook_server: WebhookServer):
    inner = webhook_server.url("/content")
    with override_settings(MCP_APP=LOCAL):
        to_allowed = await run(tool(webhook_server.url(f"/redirect?to={inner}&status=307")))
        to_metadata = await run(tool(webhook_server.url("/redirect")))
    assert error_code(to_allowed) == "WEBHOOK_REDIRECT"
    assert error_code(to_metadata) == "WEBHOOK_REDIRECT"
    assert [request.path for request in webhook_server.requests] == ["/redirect", "/redirect"]


async def test_the_connection_is_pinned_to_the_checked_address_and_keeps_the_host_name(
    webhook_server: WebhookServer, monkeypatch: pytest.MonkeyPatch
):
    lookups: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(outbound, "resolver", resolver)
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        result = await run(tool(webhook_server.url("/content", host="hooks.example.test")))
    assert "isError" not in result
    # One resolution, whose checked answer was connected to: nothing resolved the name a second time.
    assert lookups == ["hooks.example.test"]
    assert webhook_server.requests[0].headers["Host"] == f"hooks.example.test:{webhook_server.port}"


async def test_tls_verifies_the_url_hosts_certificate_over_the_pinned_connection(tmp_path, monkeypatch):
    certificate, key = self_signed_certificate(tmp_path, "hooks.example.test")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(certificate, key)
    monkeypatch.setattr(outbound, "ssl_context", lambda: ssl.create_default_context(cafile=str(certificate)))

    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    monkeypatch.setattr(outbound, "resolver", resolver)
    with running_server(server_tls) as server, override_settings(MCP_APP=LOCAL):
        good = await run(tool(server.url("/content", host="hooks.example.test")))
        wrong = await run(tool(server.url("/content", host="other.example.test")))
    # Socket to 127.0.0.1, but SNI and certificate checks for the URL's name: the right name passes ...
    assert good == {"content": [{"type": "text", "text": "hello from the webhook"}]}
    assert server.sni_names[0] == "hooks.example.test"
    assert server.requests[0].headers["Host"] == f"hooks.example.test:{server.port}"
    # ... and a name the certificate does not cover fails, although it reached the same address.
    assert error_code(wrong) == "WEBHOOK_UNREACHABLE"
    assert "certificate" in wrong["content"][0]["text"]
    assert len(server.requests) == 1


async def test_a_name_with_any_forbidden_address_is_refused(monkeypatch: pytest.MonkeyPatch):
    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "10.1.2.3"]

    monkeypatch.setattr(outbound, "resolver", resolver)
    result = await run(tool("http://rebind.example.test/hook"))
    assert error_code(result) == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert "10.1.2.3" in result["content"][0]["text"]


async def test_proxies_from_the_environment_are_not_used(
    webhook_server: WebhookServer, monkeypatch: pytest.MonkeyPatch
):
    proxy = webhook_server.url("/")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    with override_settings(MCP_APP=LOCAL):
        result = await run(tool("http://10.20.30.40/hook"))
    assert error_code(result) == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert webhook_server.requests == []


# ------------------------------------------------------------------------------------ cancellation and secrets


@override_settings(MCP_APP=LOCAL)
async def test_cancelling_the_call_aborts_the_request(webhook_server: WebhookServer):
    running = asyncio.create_task(run(tool(webhook_server.url("/hold"), timeout_seconds=30)))
    assert await asyncio.to_thread(webhook_server.received.wait, 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await asyncio.to_thread(webhook_server.closed_by_client.wait, 5)


@override_settings(MCP_APP=LOCAL)
async def test_secret_headers_reach_the_server_but_no_log_or_result(
    webhook_server: WebhookServer, caplog: pytest.LogCaptureFixture
):
    from mcp_app.crypto import encrypt

    secret = "Bearer s3cr3t-value-0123456789"
    token = encrypt(orjson.dumps({"Authorization": secret}))
    caplog.set_level(logging.DEBUG)
    for path in ("/content", "/status/500", "/invalid", "/slow"):
        url = webhook_server.url(f"{path}?key=query-key-5150")
        result = await run(tool(url, secret_headers=token, timeout_seconds=0.5))
        assert secret not in orjson.dumps(result).decode()
        assert "query-key-5150" not in orjson.dumps(result).decode()
    assert {request.headers["Authorization"] for request in webhook_server.requests} == {secret}
    assert caplog.records, "the capture must see the runtime's and httpx's records for this test to mean anything"
    assert secret not in caplog.text
    # A key in the URL is not logged either (httpx's client would log every request URL at INFO).
    assert "query-key-5150" not in caplog.text
    assert token not in repr(tool(webhook_server.url("/content"), secret_headers=token))


@override_settings(MCP_APP=LOCAL)
async def test_an_unexpected_failure_is_logged_by_type_only(
    webhook_server: WebhookServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    def explode(body: bytes) -> dict[str, Any]:
        raise RuntimeError("Illegal header value b'Bearer leaked-secret'")

    monkeypatch.setattr(webhooks, "map_reply", explode)
    caplog.set_level(logging.DEBUG)
    result = await run(tool(webhook_server.url("/content")))
    assert error_code(result) == "WEBHOOK_FAILED"
    assert "RuntimeError" in caplog.text
    assert "leaked-secret" not in caplog.text and "leaked-secret" not in orjson.dumps(result).decode()
