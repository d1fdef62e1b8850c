"""The "none" ports: a request without tasks, 2025-11-25 tasks or an audit log gets objects that do nothing,
never ``None``, and the handlers ask them instead of testing for ``None``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from mcp_app.protocol import versions
from mcp_app.protocol.context import NO_HANDSHAKE_TASKS, CallContext, RequestContext
from mcp_app.protocol.errors import METHOD_NOT_FOUND, MethodNotFound
from mcp_app.protocol.modern import TASKS_EXTENSION
from mcp_app.protocol.ports import NO_AUDIT, NO_CHANNEL, NO_TASKS
from mcp_app.protocol.reporters import LogReporter, ProgressReporter, discard

from .fakes import TOOLS

MakeCtx = Callable[..., RequestContext]


def test_a_context_defaults_to_the_none_ports(make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    assert ctx.outbound is NO_CHANNEL
    assert ctx.tasks is NO_TASKS and not ctx.tasks.available
    assert ctx.handshake_tasks is NO_HANDSHAKE_TASKS and not ctx.handshake_tasks.available
    assert ctx.audit is NO_AUDIT


def test_a_context_is_frozen(make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.log_level = "debug"  # type: ignore[misc]
    assert dataclasses.replace(ctx, log_level="debug").log_level == "debug"


async def test_no_tasks_knows_no_task() -> None:
    assert await NO_TASKS.get("t1") is None
    assert await NO_TASKS.update("t1", {"a": 1}) is False
    assert await NO_TASKS.cancel("t1") is False


async def test_no_handshake_tasks_knows_no_task_and_starts_none(make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    assert await NO_HANDSHAKE_TASKS.get(ctx, "t1") is None
    assert await NO_HANDSHAKE_TASKS.result(ctx, "t1") is None
    assert await NO_HANDSHAKE_TASKS.cancel(ctx, "t1") is None
    assert await NO_HANDSHAKE_TASKS.list(ctx, None) == {"tasks": []}
    call = CallContext(request=ctx, progress=ProgressReporter(None, discard), log=LogReporter(None, discard))
    with pytest.raises(MethodNotFound) as raised:
        await NO_HANDSHAKE_TASKS.start(TOOLS[0], {}, call, ttl_ms=None, request_id=1)
    assert raised.value.code == METHOD_NOT_FOUND


def test_no_audit_records_nothing() -> None:
    assert NO_AUDIT.record_call({"name": "echo"}, 1, 0.0, result={"content": []}) is None


async def test_stateless_task_methods_answer_unknown_task_without_a_task_service(
    make_ctx: MakeCtx, rpc: Callable[..., Any]
) -> None:
    ctx = dataclasses.replace(
        make_ctx(protocol_version=versions.V2026_07_28),
        era=versions.MODERN,
        client_capabilities={"extensions": {TASKS_EXTENSION: {}}},
    )
    for method, params in (
        ("tasks/get", {"taskId": "t1"}),
        ("tasks/update", {"taskId": "t1", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "t1"}),
    ):
        response = await rpc(ctx, method, params)
        assert response["error"]["data"] == {"taskId": "t1"}, (method, response)
