"""An in-process client of the endpoint, for the admin's "Try it": one request, as one agent token, on one server.

``run_as`` serves a JSON-RPC request like a sessionless handshake-era POST, through the wire's own grant,
context, dispatcher and runner (grants and audit apply), and returns what a client would have received. Not
done here: sampling and elicitation, streams, sessions, tasks. A run is bounded by ``TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from ..models import AgentToken, McpServer
from ..protocol import versions
from ..protocol.handlers import dispatcher
from .auth import AccessDenied, grant_for_token

PROTOCOL_VERSION = "2025-11-25"
TIMEOUT_SECONDS = 30.0


@dataclass
class ConsoleRun:
    """What a client would have seen."""

    request: dict[str, Any]
    notifications: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] | None = None
    refused: str | None = None  # the token may not use the server (the wire's 403/404 message)
    timed_out: bool = False

    @property
    def result(self) -> Any:
        return (self.response or {}).get("result")

    @property
    def error(self) -> Any:
        return (self.response or {}).get("error")


async def run_as(
    token: AgentToken,
    server: McpServer,
    method: str,
    params: dict[str, Any],
    *,
    time_limit: float = TIMEOUT_SECONDS,
    on_notification: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> ConsoleRun:
    """Send ``method`` with ``params`` to ``server`` as ``token``'s agent; collect notifications and response.
    ``on_notification`` hears each notification as it is sent (the admin shows progress live with it)."""
    request_id = f"try-it-{secrets.token_hex(6)}"
    params = {**params, "_meta": {"progressToken": request_id}}
    run = ConsoleRun(request={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    try:
        # The token as authentication resolves it (by digest). The caller is a Django request (the admin), which
        # owns its database connection: no connection recycling here, unlike the consumer's database_sync_to_async.
        grant = await sync_to_async(grant_for_token, thread_sensitive=True)(token.digest, server.server_id)
    except AccessDenied as exc:
        run.refused = exc.message
        return run

    async def emit(message: dict[str, Any]) -> None:
        run.notifications.append(message)
        if on_notification is not None:
            await on_notification(message)

    ctx = grant.request_context(
        era=versions.LEGACY, protocol_version=PROTOCOL_VERSION, durable_tasks=False, emit=emit, headers={}
    )
    try:
        run.response = await asyncio.wait_for(dispatcher.dispatch(run.request, ctx, max_batch_size=1), time_limit)
    except TimeoutError:
        run.timed_out = True
    return run
