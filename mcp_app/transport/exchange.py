"""One POST once the edge let it in: the ``protocol.serving.Exchange`` it lends the protocol, and its answer.

``PostExchange.serve`` runs ``protocol.serving.serve_post``, which calls back ``admit`` (the limits) and
``context`` (the ``ResponseWriter``, the handshake era's ``BackChannel``, the handlers' context); ``finish``
opens the session the answer asks for and writes the answer. The consumer reads ``writer``, ``backchannel`` and
``call_id`` back to cancel or clean up the response.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from ..conf import mcp_settings
from ..limits.admit import Caller, admit
from ..observability import logging as request_log
from ..observability import metrics
from ..protocol import serving, versions
from ..protocol.context import RequestContext
from ..protocol.errors import JsonRpcId
from ..protocol.serving import Answer, Demand, Refusal, Route
from .auth import AccessGrant
from .backchannel import BackChannel
from .membership import Membership
from .security import accepts
from .sessions import DatabaseSession, open_session
from .writer import Response, ResponseWriter


@dataclass(eq=False)
class PostExchange:
    """The ``Exchange`` of one POST under ``grant`` (see the module docstring)."""

    response: Response
    membership: Membership
    grant: AccessGrant
    caller: Caller
    headers: dict[str, str]
    on_cancel: Callable[[], None]
    demand: Demand | None = None
    request_id: JsonRpcId = None  # of a single request, for an answer the edge writes itself
    call_id: str | int | None = None  # of the handshake-era request being served (cancellable)
    writer: ResponseWriter | None = None
    backchannel: BackChannel | None = None

    async def serve(self, body: bytes, session: DatabaseSession | None) -> Answer:
        grant = self.grant
        request = serving.PostRequest(
            headers=self.headers,
            supported_versions=grant.server.supported_versions,
            max_depth=mcp_settings.MAX_JSON_DEPTH,
            max_batch_size=mcp_settings.MAX_BATCH_SIZE,
            max_client_info_bytes=mcp_settings.MAX_CLIENT_INFO_BYTES,
            sessions_required=grant.server.sessions_required,
            session_named="mcp-session-id" in self.headers,
            session=session,
        )
        try:
            return await serving.serve_post(body, request, self)
        finally:
            if self.backchannel is not None:
                self.backchannel.release()

    async def finish(self, answer: Answer) -> None:
        extra = []
        if answer.new_session is not None:
            limited = await admit(self.caller, session=True)
            if limited is not None:
                await self.response.write(serving.refused(limited, self.request_id))
                return
            new, grant = answer.new_session, self.grant
            raw = await database_sync_to_async(open_session)(
                grant.server.pk, grant.token.agent_pk, new.protocol_version, dict(new.params)
            )
            extra.append((b"mcp-session-id", raw.encode()))
        if self.writer is None:
            await self.response.write(answer, extra)
            return
        headers = [(name.encode(), value.encode()) for name, value in answer.headers]
        await self.writer.finish(answer.status, answer.payload, [*headers, *extra])

    async def admit(self, demand: Demand) -> Refusal | None:
        request_log.bind(method=metrics.rpc_method(demand.payload), era=demand.era)
        self.request_id = demand.request_id
        self.demand = demand
        found = (self.grant.catalog.tool(name) for name in demand.tools)
        tools = [tool for tool in found if tool is not None]
        return await admit(self.caller, requests=demand.messages, tools=tools)

    def context(self, route: Route, **fields: Any) -> RequestContext:
        grant, version, session = self.grant, route.protocol_version, fields.get("session")
        writer = self.writer = ResponseWriter(
            self.response,
            allow_stream=accepts(self.headers.get("accept"), "text/event-stream"),
            session_key=session.key if session is not None else None,  # resumable: handshake-era sessions only
            priming=version >= versions.V2025_11_25,
            owner=(grant.token.tenant_pk, grant.token.agent_pk),
        )
        backchannel: BackChannel | None = None
        if route.era != versions.MODERN:  # the 2026-07-28 era has no back-channel
            scope = session.key if session is not None else f"t{grant.token.pk}"
            backchannel = fields["outbound"] = self.backchannel = BackChannel(
                scope, writer, self.membership, self.on_cancel
            )
        ctx = grant.request_context(
            era=route.era, protocol_version=version, headers=self.headers, emit=writer.notify, **fields
        )
        if backchannel is None:
            return ctx
        if route.request_id is not None:
            self.call_id = route.request_id
            backchannel.watch(route.request_id)
        delay = opening_delay(self.demand, session is not None)
        if delay is not None:
            writer.open_soon(delay)
        return ctx

    async def close(self) -> None:
        """The response is over or abandoned: no more timers, and the back-channel lets go of its groups."""
        if self.writer is not None:
            self.writer.stop_timers()
        if self.backchannel is not None:
            await self.backchannel.close()


def opening_delay(demand: Demand | None, on_session: bool) -> float | None:
    """When a handshake-era POST opens its SSE stream before any notification (``None``: only then): at once for a
    tool call with a progress token, after ``SSE_OPEN_AFTER_SECONDS`` for any other tool call on a session."""
    if demand is None or not demand.calls:
        return None
    if demand.progress:
        return 0.0
    return float(mcp_settings.SSE_OPEN_AFTER_SECONDS) if on_session else None
