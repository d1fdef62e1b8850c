"""Origin and Host checks, and that credentials never reach the logs."""

from __future__ import annotations

import logging

from django.test import override_settings

from mcp_app.models import McpServer
from tests.helpers import call, rpc

CALL_ECHO = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}})


async def test_foreign_origin_is_403_even_with_a_valid_token(access):
    reply = await call(access, CALL_ECHO, headers={"origin": "https://evil.example"})
    assert reply.status == 403
    assert "result" not in reply.json()


async def test_origin_listed_on_the_server_is_allowed(access, orm):
    await orm(McpServer.objects.filter(pk=access.server.pk).update, allowed_origins=["https://app.example"])
    assert (await call(access, CALL_ECHO, headers={"origin": "https://app.example"})).status == 200
    assert (await call(access, CALL_ECHO, headers={"origin": "https://app.example.evil"})).status == 403


async def test_origin_listed_in_settings_is_allowed_everywhere(access):
    with override_settings(MCP_APP={"ALLOWED_ORIGINS": ["https://console.example"]}):
        assert (await call(access, CALL_ECHO, headers={"origin": "https://console.example"})).status == 200


async def test_requests_without_origin_are_not_browser_requests_and_pass(access):
    assert (await call(access, CALL_ECHO)).status == 200


async def test_host_outside_allowed_hosts_is_421(access):
    reply = await call(access, CALL_ECHO, headers={"host": "attacker.example:8000"})
    assert reply.status == 421


async def test_allowed_host_with_port_passes(access):
    assert (await call(access, CALL_ECHO, headers={"host": "127.0.0.1:8000"})).status == 200
    assert (await call(access, CALL_ECHO, headers={"host": "localhost"})).status == 200


async def test_a_hosts_answer_follows_a_change_of_allowed_hosts(access):
    # The answer for a Host value is remembered between requests, and forgotten when the settings change.
    headers = {"host": "api.example:8000"}
    assert (await call(access, CALL_ECHO, headers=headers)).status == 421
    with override_settings(ALLOWED_HOSTS=["api.example"]):
        assert (await call(access, CALL_ECHO, headers=headers)).status == 200
    assert (await call(access, CALL_ECHO, headers=headers)).status == 421


async def test_raw_token_never_reaches_the_logs(make_access, caplog):
    access = await make_access(tools=("boom", "echo"))
    with caplog.at_level(logging.DEBUG):
        await call(access, rpc("tools/call", {"name": "boom", "arguments": {}}))
        await call(access, rpc("ping"), headers={"authorization": f"Bearer {access.raw_token}x"})
        await call(access, rpc("ping"), query="agentId=someone-else")
    assert caplog.records, "the failing tool is expected to log"
    secret = access.raw_token.split("_", 2)[2]  # mcp_<hex prefix>_<secret>: the secret may hold "_"
    assert all(secret not in record.getMessage() and secret not in (record.exc_text or "") for record in caplog.records)


def test_origins_are_read_as_serialized_origins_only():
    from mcp_app.transport.security import canonical_origin, same_origin

    assert canonical_origin("https://App.Example") == "https://app.example"
    assert canonical_origin("https://app.example:443") == "https://app.example"
    assert canonical_origin("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert canonical_origin("http://[::1]:8000") == "http://[::1]:8000"
    for bad in (
        "https://app.example/",
        "https://app.example/x",
        "https://a@app.example",
        "null",
        "file://x",
        "https://app.example?",
        "https://app.example#",
        "https://app.example:99999",
        "app.example",
    ):
        assert canonical_origin(bad) is None, bad
    assert same_origin("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert same_origin("https://app.example", "app.example")
    assert same_origin("https://app.example", "app.example:443")
    assert not same_origin("http://127.0.0.1:8000", "127.0.0.1:8001")
    assert not same_origin("http://127.0.0.1:8000", None)
