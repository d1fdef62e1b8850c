"""The audit log at the wire: one ``ToolCall`` row per ``tools/call`` in both eras, whatever the outcome; the
request path only buffers (no query: counted across every thread); the flusher writes within its interval
(the most a crash can lose) and at shutdown."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils.crypto import salted_hmac

from mcp_app.models import ToolCall
from mcp_app.protocol.errors import INVALID_PARAMS
from mcp_app.runtime.audit import audit_log
from tests.helpers import DECLARING, MODERN, call, communicator, modern_call, result_of, rpc, settled
from tests.request_path import counting

LEGACY_VERSION = "2025-06-18"


def rows() -> list[ToolCall]:
    return list(ToolCall.objects.order_by("started_at", "id"))


async def legacy_call(access: Any, name: str, arguments: Any = None, id: Any = 1) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    reply = await call(access, rpc("tools/call", params, id=id), headers={"mcp-protocol-version": LEGACY_VERSION})
    assert reply.status == 200
    return reply.json()


STORE_RESULT = {"content": [{"type": "text", "text": "stored"}]}


async def test_each_call_leaves_one_record_with_who_what_and_how(make_access: Any, orm: Any, tool_factory: Any) -> None:
    access = await make_access(tools=("echo", "boom"))
    await orm(tool_factory, access.server, "store", position=5, static_result=STORE_RESULT)
    await legacy_call(access, "store", {"text": "hi", "api_key": "sk-live-123"}, id="req-7")
    result_of(await modern_call(access, "tools/call", {"name": "echo", "arguments": {"text": "yo"}}, id=8))
    await legacy_call(access, "boom", {})  # raises inside the tool: an isError result
    assert (await legacy_call(access, "nope", {}))["error"]["code"] == INVALID_PARAMS
    assert audit_log.pending() == 4  # buffered, not written, while the requests ran
    assert await orm(ToolCall.objects.count) == 0
    assert await orm(audit_log.flush) == 4
    first, second, third, fourth = await orm(rows)
    assert (first.tenant_id, first.server_id, first.agent_id) == (access.tenant.pk, access.server.pk, access.agent.pk)
    assert (first.server_key, first.agent_key, first.token_prefix) == (
        access.server.server_id,
        access.agent.agent_id,
        access.token.prefix,
    )
    assert (first.tool_name, first.status, first.error_code, first.request_id) == ("store", "ok", None, "req-7")
    assert (first.era, first.protocol_version) == ("legacy", LEGACY_VERSION)
    assert first.arguments == {"text": "hi", "api_key": "[redacted]"}
    canonical = b'{"api_key":"sk-live-123","text":"hi"}'
    assert first.arguments_digest == salted_hmac("mcp_app.audit.arguments", canonical, algorithm="sha256").hexdigest()
    assert first.arguments_digest != hashlib.sha256(canonical).hexdigest()  # keyed: secrets cannot be guessed
    assert first.finished_at >= first.started_at and first.duration_ms >= 0
    assert (second.era, second.protocol_version, second.request_id, second.status) == ("modern", MODERN, "8", "ok")
    assert (third.tool_name, third.status) == ("boom", "tool_error")
    assert (fourth.tool_name, fourth.status, fourth.error_code) == ("nope", "error", INVALID_PARAMS)
    assert "Unknown tool" in fourth.error_message


async def test_a_cancelled_call_is_recorded_as_cancelled(make_access: Any, orm: Any, fresh_gate: Any) -> None:
    access = await make_access(tools=("wait_for_release",))
    comm = communicator(access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}))
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    await comm.send_input({"type": "http.disconnect"})
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)
    await orm(audit_log.flush)
    [row] = await orm(rows)
    assert (row.tool_name, row.status) == ("wait_for_release", "cancelled")


async def test_a_call_that_becomes_a_task_links_its_task(make_access: Any, orm: Any, fresh_gate: Any) -> None:
    access = await make_access(tools=("gated_job",))
    created = result_of(
        await modern_call(access, "tools/call", {"name": "gated_job", "arguments": {}}, capabilities=DECLARING)
    )
    fresh_gate.gate.release.set()
    await settled()
    await orm(audit_log.flush)
    [row] = await orm(rows)
    assert (row.status, row.task_id) == ("task", created["taskId"])


async def test_arguments_are_redacted_and_bounded(make_access: Any, orm: Any, tool_factory: Any) -> None:
    access = await make_access(tools=())
    await orm(tool_factory, access.server, "store", static_result=STORE_RESULT)
    arguments = {
        "text": "x" * 5000,
        "password": "hunter2",
        "nested": {"Authorization": "Bearer abc", "items": list(range(80)), "clientSecret": {"a": 1}},
    }
    assert "result" in await legacy_call(access, "store", arguments)
    await orm(audit_log.flush)
    [row] = await orm(rows)
    stored = row.arguments
    assert stored["password"] == "[redacted]"
    assert stored["nested"]["Authorization"] == "[redacted]"
    assert stored["nested"]["clientSecret"] == "[redacted]"
    assert len(stored["text"]) < 300 and stored["text"].startswith("x" * 256) and "5000 chars" in stored["text"]
    assert stored["nested"]["items"][:50] == list(range(50)) and len(stored["nested"]["items"]) == 51
    assert "hunter2" not in str(stored) and "Bearer abc" not in str(stored)


# ------------------------------------------------------------------------------------- query counts


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_auditing_adds_no_query_to_a_warm_tools_call(
    make_access: Any, orm: Any, monkeypatch: pytest.MonkeyPatch, era: str
) -> None:
    access = await make_access(tools=("echo",))

    async def one_call() -> list[str]:
        with counting(monkeypatch) as cost:
            if era == "legacy":
                assert "result" in await legacy_call(access, "echo", {"text": "hi"})
            else:
                result_of(await modern_call(access, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
        return cost.queries

    await one_call()  # warm: token last-used stamp, resolved catalog
    await one_call()
    audit_log.clear()
    off_settings = {**settings.MCP_APP, "AUDIT_ENABLED": False}
    on_settings = {**settings.MCP_APP, "AUDIT_ENABLED": True}
    measured: dict[str, list[int]] = {"on": [], "off": []}
    for label, values in (("off", off_settings), ("on", on_settings), ("off", off_settings), ("on", on_settings)):
        with override_settings(MCP_APP=values):
            before = audit_log.pending()
            statements = await one_call()
            assert audit_log.pending() == before + (1 if label == "on" else 0)
        assert not [sql for sql in statements if ToolCall._meta.db_table in sql], statements
        measured[label].append(len(statements))
    # Auditing on costs exactly what auditing off costs (the request path itself may cost 0 queries or more).
    assert measured["on"] == measured["off"], measured
    assert await orm(audit_log.flush) == 2  # and the records were there, ready to be written off the path
    assert await orm(ToolCall.objects.count) == 2


# -------------------------------------------------------------------------------------- the flusher


@pytest.fixture
def flusher() -> Iterator[Any]:
    audit_log.autostart = True
    yield audit_log
    audit_log.stop()
    audit_log.autostart = False


async def test_the_flusher_writes_within_its_interval(make_access: Any, orm: Any, flusher: Any) -> None:
    """The loss bound: a record waits in memory at most one flush interval (1 s by default) before it is
    committed, so a crash loses at most the last second of records."""
    from mcp_app.conf import mcp_settings

    interval = float(mcp_settings.AUDIT_FLUSH_INTERVAL_SECONDS)
    assert interval <= 1.0
    access = await make_access(tools=("echo",))
    await legacy_call(access, "echo", {"text": "hi"})
    assert await asyncio.to_thread(audit_log.wait_written, 1, interval + 2.0)
    assert audit_log.last_lag_seconds is not None
    assert audit_log.last_lag_seconds <= interval + 0.5  # the wait, plus the time the INSERT itself took
    assert await orm(ToolCall.objects.count) == 1


async def test_shutdown_writes_what_is_buffered(make_access: Any, orm: Any, flusher: Any) -> None:
    access = await make_access(tools=("echo",))
    with override_settings(MCP_APP={**settings.MCP_APP, "AUDIT_FLUSH_INTERVAL_SECONDS": 1.0}):
        for index in range(3):
            await legacy_call(access, "echo", {"text": str(index)}, id=index)
        await orm(audit_log.stop)  # what atexit runs
    assert await orm(ToolCall.objects.count) == 3
    assert audit_log.pending() == 0
