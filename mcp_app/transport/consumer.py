"""The MCP endpoint ``/mcp/<server_id>`` as a Channels consumer (Streamable HTTP).

One consumer instance serves one HTTP request. It buffers the body up to ``MAX_BODY_BYTES``, then runs the
response in a task so that it keeps listening for ``http.disconnect`` (which cancels the work) and, for GET
streams, for channel-layer broadcasts. The response is JSON unless the request produced notifications and the
client accepts SSE, in which case it switches to an event stream the moment the first notification is emitted.

Both protocol eras share the endpoint. A body with the 2026-07-28 ``_meta`` envelope (or a stateless-era
``MCP-Protocol-Version``) is served statelessly after the envelope/header/version ladder of
``protocol.modern``; anything else is handshake-era traffic. Each server's ``protocol_versions`` decides which
eras it accepts: a modern-only server answers GET and DELETE with 405 and refuses handshake requests (naming its
versions, never with the modern-only codes); a legacy-only server answers modern requests with -32022.

Status codes: 400 bad request, 401/403 auth, 404 unknown server, 405 method, 415 media type, 421 Host, 202 for
bodies that owe no answer, 204 for DELETE. Handshake era: JSON-RPC errors about a whole body (-32700, -32600)
are 400, errors of individual methods ride on 200. Stateless era: see ``MODERN_STATUS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import AsyncConsumer, get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

from .. import PRODUCT_NAME, __version__
from ..channel_layer import LAYER_ERRORS, layer_health, receive_forever
from ..conf import mcp_settings
from ..events import (
    BROADCAST_EVENT,
    CANCEL_EVENT,
    REPLY_EVENT,
    STREAM_EVENT,
    call_group,
    reply_group,
    server_group,
    session_group,
    stream_group,
)
from ..observability import logging as request_log
from ..observability import metrics
from ..protocol import jsonrpc, limits, messages, modern, versions
from ..protocol.context import OpenStream, RequestContext
from ..protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    InvalidParams,
    InvalidRequest,
    ProtocolError,
    RequestTimeout,
    ServiceUnavailable,
    error_response,
)
from ..protocol.handlers import dispatcher
from ..runtime.tasks import TaskService
from ..workers.runner import WorkerRunner
from . import cancellation, cors, sse
from .auth import AccessDenied, AccessGrant, admit
from .eventstore import GET_STREAM, POST_STREAM, get_event_store, parse_event_id, stream_kind
from .security import accepts, host_allowed, is_json_content_type, origin_allowed
from .sessions import DatabaseSession, open_session
from .writer import JSON_HEADERS, ResponseWriter, is_final

logger = logging.getLogger("mcp_app.transport")

ALLOWED_METHODS = ("GET", "POST", "DELETE")
_BODY_ERROR_CODES = frozenset({PARSE_ERROR, INVALID_REQUEST})
# 2026-07-28: errors of the validation ladder are 400, an unknown method 404; other errors ride on 200.
MODERN_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

# Worker tools go to the workers, the rest runs inline (the lead moves this to services.get_runner at merge).
runner = WorkerRunner()
# Calls whose client went away but which go on (resumable handshake-era streams); referenced until done.
_detached: set[asyncio.Task[None]] = set()


def _forward(event: dict[str, Any]) -> dict[str, Any]:
    return event


class McpConsumer(AsyncConsumer):
    """Streamable HTTP endpoint of one hosted MCP server."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.base_send = send
        self.channel_layer = None
        self.channel_name = None
        self._body = bytearray()
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._work: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._groups: list[str] = []
        self._response_started = False
        self._translate: Any = _forward
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._watch: asyncio.Task[None] | None = None
        self._writer: ResponseWriter | None = None
        self._detached = False
        self._stream_writer: ResponseWriter | None = None
        self._stream_events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._session_stream: DatabaseSession | None = None
        self._named_session: DatabaseSession | None = None
        self._cors: list[tuple[bytes, bytes]] = []  # on every answer once the Origin is known to be allowed
        self._request_id: str | int | None = None  # of a POST request, for its answer if the stream must end
        self._long_stream = False  # a GET stream, a resumed stream or subscriptions/listen
        try:
            await await_many_dispatch([receive, self._events.get], self.dispatch)
        except StopConsumer:
            pass
        finally:
            if not self._detached:
                await self._cleanup()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Unlike AsyncConsumer.dispatch, no connection clean-up per message: all ORM work goes through
        # database_sync_to_async, which already closes stale connections around each call.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    # ASGI plumbing -------------------------------------------------------------------------------------

    async def send_headers(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._response_started = True
        if self._cors:
            headers = [*headers, *self._cors]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def send_body(self, body: bytes, *, more_body: bool = False) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": more_body})

    async def send_response(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        await self.send_headers(status, headers)
        await self.send_body(body)

    async def send_error(self, status: int, message: str, *, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        """A transport-level rejection: an id-less JSON-RPC error body, as the spec allows for 4xx answers."""
        body = jsonrpc.encode(error_response(None, InvalidRequest(message)))
        await self.send_response(status, body, [*JSON_HEADERS, *(headers or [])])

    async def http_request(self, message: dict[str, Any]) -> None:
        if self._work is not None:
            return
        self._body += message.get("body", b"")
        limit = mcp_settings.MAX_BODY_BYTES
        if len(self._body) > limit or self._declared_length() > limit:
            await self.send_error(413, f"Request body exceeds {limit} bytes.")
            raise StopConsumer
        if message.get("more_body"):
            return
        self._work = asyncio.create_task(self._serve(bytes(self._body)))
        self._work.add_done_callback(lambda _task: self._events.put_nowait({"type": "mcp.finished"}))

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        writer = self._writer
        work = self._work
        if writer is not None and writer.resumable and writer.streaming and work is not None and not work.done():
            # Handshake era: a disconnect is not a cancellation. The call goes on, its events go to the store
            # and to a reconnecting GET, and this consumer's listeners stay until the call ends.
            writer.disconnected = True
            self._detached = True
            _detached.add(work)
            work.add_done_callback(_detached.discard)
            work.add_done_callback(lambda _task: asyncio.ensure_future(self._cleanup()))
        raise StopConsumer

    async def mcp_finished(self, message: dict[str, Any]) -> None:
        raise StopConsumer

    async def mcp_broadcast(self, message: dict[str, Any]) -> None:
        if not self._groups:
            return
        event = message["message"]
        if event.get("method") == "notifications/resources/updated" and self._session_stream is not None:
            # Only subscribed sessions hear about updates; subscriptions may have changed on another process.
            if event.get("params", {}).get("uri") not in await self._session_stream.reload_subscriptions():
                return
        elif event.get("method") == "notifications/resources/updated" and self._translate is _forward:
            return
        outgoing = self._translate(event)
        if outgoing is None:
            return
        if self._stream_writer is not None:
            await self._stream_writer.event(outgoing)
        else:
            await self.send_body(sse.event(outgoing), more_body=True)

    async def mcp_stream_event(self, message: dict[str, Any]) -> None:
        await self._stream_events.put(message)

    async def mcp_reply(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message["id"])
        if future is not None and not future.done():
            future.set_result(message["answer"])

    async def mcp_cancel(self, message: dict[str, Any]) -> None:
        """``notifications/cancelled`` for the request this consumer serves: stop it and end the response
        without a JSON-RPC answer, as the spec asks."""
        if self._work is None or self._work.done():
            return
        self._work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._work
        if self._writer is not None and self._writer.streaming:
            await self.send_body(b"")
        elif not self._response_started:
            await self.send_headers(200, sse.SSE_HEADERS)
            await self.send_body(b"")

    def _declared_length(self) -> int:
        value = self._header("content-length")
        return int(value) if value and value.isdigit() else 0

    def _headers(self) -> dict[str, str]:
        """Request headers by lower-case name; of repeated headers the first counts."""
        headers: dict[str, str] = {}
        for key, value in self.scope.get("headers", ()):
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        return headers

    def _header(self, name: str) -> str | None:
        encoded = name.encode()
        for key, value in self.scope.get("headers", ()):
            if key.lower() == encoded:
                return value.decode("latin-1")
        return None

    async def _cleanup(self) -> None:
        for task in (self._watch, self._work, self._pump):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception:
                    logger.exception("background task failed during clean-up")
        if self.channel_layer is not None and self.channel_name is not None:
            for group in self._groups:
                try:
                    await self.channel_layer.group_discard(group, self.channel_name)
                except LAYER_ERRORS as error:
                    # Membership expires with the layer's group_expiry; nothing to repair here.
                    logger.info("could not leave group %s: %s", group, type(error).__name__)
                except Exception:
                    logger.warning("could not leave group %s", group, exc_info=True)

    # The request ---------------------------------------------------------------------------------------

    async def _serve(self, body: bytes) -> None:
        try:
            await self._respond(body)
        except asyncio.CancelledError:
            raise
        except ServiceUnavailable:
            metrics.record_dependency_error("channel_layer")
            await self._layer_unavailable()
        except LAYER_ERRORS as error:
            layer_health.failed(error)
            metrics.record_dependency_error("channel_layer")
            await self._layer_unavailable()
        except Exception as exc:
            metrics.record_exception(exc)
            logger.exception("unhandled error serving %s %s", self.scope.get("method"), self.scope.get("path"))
            if not self._response_started:
                await self.send_response(
                    500, jsonrpc.encode(error_response(None, ProtocolError("Internal error"))), JSON_HEADERS
                )

    async def _layer_unavailable(self, message: dict[str, Any] | None = None) -> None:
        """The channel layer or event store failed: a 503 before the response started, else end the stream with
        an error (a POST stream's request gets its JSON-RPC error answer, so the client never waits forever)."""
        error = ServiceUnavailable()
        if not self._response_started:
            body = jsonrpc.encode(error_response(None, error))
            await self.send_response(503, body, [*JSON_HEADERS, (b"retry-after", b"1")])
            return
        if self._request_id is not None and not self._long_stream:
            frame = sse.event(error_response(self._request_id, error))
        else:
            frame = sse.error_event(error_response(None, error))
        with contextlib.suppress(Exception):  # the client may be gone already; nothing else to tell anyone
            await self.send_body(frame, more_body=True)
            await self.send_body(b"")

    async def mcp_layer_down(self, message: dict[str, Any]) -> None:
        """The layer pump lost the layer: a GET or listen stream cannot hear anything more; end it with an error
        event (the client reconnects, and gets a 503 until the layer is back). Calls go on without it."""
        if self._long_stream and self._response_started:
            if self._work is not None and not self._work.done():
                self._work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._work
            await self._layer_unavailable()
            raise StopConsumer

    async def _respond(self, body: bytes) -> None:
        method = self.scope["method"]
        origin = self._header("origin")
        if origin is not None and cors.origin_listed(origin, ()):
            self._cors = cors.response_headers(origin)
        if method == "OPTIONS":
            if not host_allowed(self._header("host")):
                await self.send_error(421, "This host name is not served here.")
            else:
                await self._preflight(origin)
            return
        if method not in ALLOWED_METHODS:
            await self.send_error(
                405,
                f"Method {method} is not allowed.",
                headers=[(b"allow", ", ".join((*ALLOWED_METHODS, "OPTIONS")).encode())],
            )
            return
        if not host_allowed(self._header("host")):
            await self.send_error(421, "This host name is not served here.")
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        agent_id = (query.get("agentId") or [None])[0]
        server_id = self.scope["url_route"]["kwargs"]["server_id"]
        try:
            # Who calls, which server, and (handshake era) which session: from the per-process caches, or in one
            # worker-thread call when this process has not seen them yet.
            grant, self._named_session = await admit(
                server_id, agent_id, self._header("authorization"), self._header("mcp-session-id")
            )
        except AccessDenied as denied:
            challenge = denied.www_authenticate
            extra = [(b"www-authenticate", challenge.encode())] if challenge else []
            await self.send_error(denied.status, denied.message, headers=extra)
            return
        request_log.bind(tenant=grant.tenant_slug, agent=grant.agent_id)
        if not origin_allowed(origin, grant.server.allowed_origins):
            await self.send_error(403, "This Origin is not allowed to use this server.")
            return
        if origin is not None:
            self._cors = cors.response_headers(origin)
        if method != "POST" and not versions.handshake_versions(grant.server.supported_versions):
            # The stateless revision removed the GET stream and session termination.
            await self.send_error(
                405,
                f"Method {method} is not allowed: this server speaks only 2026-07-28.",
                headers=[(b"allow", b"POST")],
            )
            return
        if method == "POST":
            await self._serve_post(grant, body)
            return
        session, found = await self._session(grant)
        if not found:
            return
        if method == "GET":
            await self._serve_get(grant, session)
        else:
            if session is not None:
                await session.terminate()
            await self.send_response(204, b"", [])

    async def _preflight(self, origin: str | None) -> None:
        """CORS preflight (see ``cors``); without an Origin, a plain OPTIONS naming the methods."""
        self._cors = []
        if origin is None or self._header("access-control-request-method") is None:
            await self.send_response(204, b"", [(b"allow", b"GET, POST, DELETE, OPTIONS")])
            return
        server_id = self.scope["url_route"]["kwargs"]["server_id"]
        origins = await database_sync_to_async(cors.server_origins)(server_id)
        if not cors.origin_listed(origin, origins):
            await self.send_error(403, "This Origin is not allowed to use this server.")
            return
        headers = cors.preflight_headers(origin, self._header("access-control-request-headers"))
        await self.send_response(204, b"", headers)

    async def _session(self, grant: AccessGrant) -> tuple[DatabaseSession | None, bool]:
        """The handshake-era session named by ``Mcp-Session-Id``; answers 404 (and returns found=False) for an
        unknown, expired or terminated id, or one of another agent or server."""
        if self._header("mcp-session-id") is None:
            return None, True
        session = self._named_session
        if session is None:
            await self.send_error(404, "Session not found: it expired or was terminated; initialize a new one.")
            return None, False
        return session, True

    async def _serve_post(self, grant: AccessGrant, body: bytes) -> None:
        if not is_json_content_type(self._header("content-type")):
            await self.send_error(415, "Content-Type must be application/json.")
            return
        if not body.strip():
            await self.send_error(400, "The request body is empty.")
            return
        try:
            payload = jsonrpc.decode(body, max_depth=mcp_settings.MAX_JSON_DEPTH)
        except ProtocolError as exc:
            await self.send_response(400, jsonrpc.encode(error_response(None, exc)), JSON_HEADERS)
            return
        headers = self._headers()
        is_modern = modern.is_modern(payload, headers.get(modern.HEADER_PROTOCOL_VERSION))
        request_log.bind(method=metrics.rpc_method(payload), era=versions.MODERN if is_modern else versions.LEGACY)
        if is_modern:
            await self._serve_modern(grant, payload, headers)
        else:
            await self._serve_legacy(grant, payload, headers)

    def _context(self, grant: AccessGrant, writer: ResponseWriter, **fields: Any) -> RequestContext:
        return grant.request_context(runner=runner, emit=writer.notify, **fields)

    async def _serve_legacy(self, grant: AccessGrant, payload: Any, headers: dict[str, str]) -> None:
        supported = versions.handshake_versions(grant.server.supported_versions)
        if not supported:
            await self._refuse_handshake_era(grant, payload)
            return
        initialize = isinstance(payload, dict) and payload.get("method") == "initialize" and "id" in payload
        if initialize and isinstance(payload.get("params"), dict):
            try:
                limits.check_client_metadata(
                    payload["params"].get("clientInfo"),
                    payload["params"].get("capabilities"),
                    mcp_settings.MAX_CLIENT_INFO_BYTES,
                )
            except ProtocolError as exc:
                await self.send_response(200, jsonrpc.encode(error_response(payload["id"], exc)), JSON_HEADERS)
                return
        session: DatabaseSession | None = None
        if not initialize:
            session, found = await self._session(grant)
            if not found:
                return
            if session is None and grant.server.sessions_required:
                await self.send_error(400, "Mcp-Session-Id is required: initialize a session first.")
                return
        version = headers.get(modern.HEADER_PROTOCOL_VERSION)
        if session is not None:
            # The spec asks 400 only for an invalid or unsupported version. A supported one that differs from
            # the session's is served under the version the session negotiated (its features, its framing).
            if version is not None and version not in supported:
                await self.send_error(
                    400, f"Unsupported MCP-Protocol-Version {version!r}; supported: {', '.join(supported)}."
                )
                return
            version = session.protocol_version
        elif version is None:
            version = (
                versions.DEFAULT_UNANNOUNCED_VERSION
                if versions.DEFAULT_UNANNOUNCED_VERSION in supported
                else max(supported)
            )
        elif version not in supported:
            await self.send_error(
                400, f"Unsupported MCP-Protocol-Version {version!r}; supported: {', '.join(supported)}."
            )
            return
        writer = ResponseWriter(
            self,
            allow_stream=accepts(headers.get("accept"), "text/event-stream"),
            session_key=session.key if session is not None else None,
            priming=version >= versions.V2025_11_25,
        )
        self._writer = writer
        scope = session.key if session is not None else f"t{grant.token.pk}"
        ctx = self._context(
            grant,
            writer,
            protocol_version=version,
            era=versions.LEGACY,
            headers=headers,
            session=session,
            client_capabilities=session.client_capabilities if session is not None else {},
            ask=self._asker(scope, writer),
            deliver=self._deliverer(scope),
            cancel=self._canceller(scope),
            close_stream=writer.close_stream if writer.resumable else None,
        )
        group = None
        if isinstance(payload, dict) and isinstance(payload.get("id"), str | int) and "method" in payload:
            self._request_id = payload["id"]
            group = call_group(scope, payload["id"])
            # Cancellable in this process from now on; from others once the watcher has joined the group.
            cancellation.register(group, self._cancel_soon)
            self._watch = asyncio.create_task(self._watch_cancellation(group))
        try:
            outcome = await dispatcher.dispatch(payload, ctx, max_batch_size=mcp_settings.MAX_BATCH_SIZE)
        finally:
            if group is not None:
                cancellation.unregister(group)
        status = 200
        if isinstance(outcome, dict) and outcome.get("error", {}).get("code") in _BODY_ERROR_CODES:
            status = 400
        extra: list[tuple[bytes, bytes]] = []
        if initialize and isinstance(outcome, dict) and "result" in outcome:
            params = payload.get("params") if isinstance(payload.get("params"), dict) else {}
            raw = await database_sync_to_async(open_session)(
                grant.server.pk, grant.token.agent_pk, outcome["result"]["protocolVersion"], params
            )
            extra.append((b"mcp-session-id", raw.encode()))
        await writer.finish(status, outcome, extra)

    # Server-to-client requests and cancellation (handshake era) ------------------------------------------

    def _asker(self, scope: str, writer: ResponseWriter) -> Any:
        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            request_id = f"mcp-host-{secrets.token_hex(12)}"
            future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._pending[request_id] = future
            group = reply_group(scope, request_id)
            try:
                # Listen before asking: the answer may reach another process and come back at once.
                await self._join(group)
                await writer.notify(messages.request(request_id, method, params))
                return await asyncio.wait_for(future, timeout=mcp_settings.CLIENT_REQUEST_TIMEOUT_SECONDS)
            except TimeoutError:
                return {"error": RequestTimeout(f"The client did not answer {method} in time").to_wire()}
            finally:
                self._pending.pop(request_id, None)
                await self._leave(group)

        return ask

    def _deliverer(self, scope: str) -> Any:
        async def deliver(request_id: str | int, answer: dict[str, Any]) -> None:
            layer = get_channel_layer()
            if layer is not None:
                await layer.group_send(
                    reply_group(scope, request_id), {"type": REPLY_EVENT, "id": str(request_id), "answer": answer}
                )

        return deliver

    def _canceller(self, scope: str) -> Any:
        async def cancel(request_id: str | int) -> None:
            await cancellation.request_cancel(call_group(scope, request_id))

        return cancel

    def _cancel_soon(self) -> None:
        """Stop the call this consumer serves, from this event loop (its own message loop ends the response)."""
        if self._detached:
            if self._work is not None:
                self._work.cancel()  # nobody reads the response any more
            return
        self._events.put_nowait({"type": CANCEL_EVENT})

    async def _watch_cancellation(self, group: str) -> None:
        """Only calls still running after a moment join their cancellation group: quick calls, the vast
        majority, cost the channel layer nothing. A cancellation noted before the join is honoured here."""
        await asyncio.sleep(cancellation.CANCEL_WATCH_DELAY_SECONDS)
        try:
            await self._join(group)
            noted = await cancellation.cancelled_before_listening(group)
        except LAYER_ERRORS as error:
            # The call goes on; only cancellations from other processes cannot reach it while the layer is down.
            layer_health.failed(error)
            return
        if noted:
            self._cancel_soon()
        cancellation.announce_listening(group)

    async def _refuse_handshake_era(self, grant: AccessGrant, payload: Any) -> None:
        """A modern-only server names what it speaks, without the stateless-only error codes."""
        supported = versions.newest_first(grant.server.supported_versions)
        request_id = jsonrpc.recover_id(payload)
        if isinstance(payload, dict) and payload.get("method") == "initialize":
            params = payload.get("params") if isinstance(payload.get("params"), dict) else {}
            error: ProtocolError = InvalidParams(
                f"Unsupported protocol version: this server speaks only {', '.join(supported)}",
                {"supported": supported, "requested": params.get("protocolVersion")},
            )
        else:
            error = InvalidRequest(
                f"This server speaks only {', '.join(supported)}: send the _meta envelope and routing headers",
                {"supported": supported},
            )
        await self.send_response(400, jsonrpc.encode(error_response(request_id, error)), JSON_HEADERS)

    async def _serve_modern(self, grant: AccessGrant, payload: Any, headers: dict[str, str]) -> None:
        if isinstance(payload, dict) and "method" in payload and "id" not in payload:
            await self.send_response(202, b"", [])  # no client notifications are defined on HTTP in this revision
            return
        try:
            envelope = modern.admit(payload, headers, grant.server.supported_versions)
            limits.check_client_metadata(
                envelope.client_info, envelope.client_capabilities, mcp_settings.MAX_CLIENT_INFO_BYTES
            )
        except ProtocolError as exc:
            body = jsonrpc.encode(error_response(jsonrpc.recover_id(payload), exc))
            await self.send_response(MODERN_STATUS.get(exc.code, 400), body, JSON_HEADERS)
            return
        writer = ResponseWriter(self, allow_stream=accepts(headers.get("accept"), "text/event-stream"))
        ctx = self._context(
            grant,
            writer,
            protocol_version=envelope.protocol_version,
            era=versions.MODERN,
            headers=headers,
            client_info=envelope.client_info,
            client_capabilities=envelope.client_capabilities,
            log_level=envelope.log_level,
            cache_ttl_ms=mcp_settings.CACHE_TTL_MS,
            tasks=TaskService(grant.server.pk, grant.token.agent_pk, runner),
        )
        ctx.tasks.bind(ctx)  # type: ignore[union-attr]
        outcome = await dispatcher.dispatch(payload, ctx, max_batch_size=1)
        if isinstance(outcome, OpenStream):
            await self._serve_subscription(grant, outcome)
            return
        status = 200
        if isinstance(outcome, dict) and "error" in outcome:
            status = MODERN_STATUS.get(outcome["error"].get("code"), 200)
        await writer.finish(status, outcome)

    async def _serve_subscription(self, grant: AccessGrant, stream: OpenStream) -> None:
        """``subscriptions/listen``: acknowledge, then forward this server's events until the client leaves."""
        self._translate = stream.translate
        self._long_stream = True
        group = server_group(grant.server.pk)
        await self._join(group)
        await self.send_headers(200, sse.SSE_HEADERS)
        for message in stream.first:
            await self.send_body(sse.event(message), more_body=True)
        await self._keep_alive(group)

    async def _serve_get(self, grant: AccessGrant, session: DatabaseSession | None) -> None:
        accept = self._header("accept") or ""
        if "text/event-stream" not in accept.lower():
            server = grant.server
            info = {
                "name": PRODUCT_NAME,
                "version": __version__,
                "server": {
                    "serverId": server.server_id,
                    "name": server.name,
                    "title": server.title,
                    "version": server.version,
                },
                "transport": "streamable-http",
                "protocolVersions": list(versions.HANDSHAKE_VERSIONS),
                "tools": len(grant.catalog.tools),
            }
            await self.send_response(200, jsonrpc.encode(info), JSON_HEADERS)
            return
        self._long_stream = True
        resume: tuple[str, int] | None = None
        last_event_id = self._header("last-event-id")
        if last_event_id is not None and session is not None:
            resume = parse_event_id(last_event_id, session.key)
            if resume is None:
                await self.send_error(400, "Last-Event-ID does not name an event of this session.")
                return
            if stream_kind(resume[0]) == POST_STREAM:
                await self._resume_post_stream(*resume)
                return
        group = server_group(grant.server.pk)
        # Join before announcing readiness: a client that edits the catalog on ": ready" must get the event.
        await self._join(group)
        writer = ResponseWriter(
            self,
            allow_stream=True,
            session_key=session.key if session is not None else None,
            priming=session is not None and session.protocol_version >= versions.V2025_11_25 and resume is None,
            kind=GET_STREAM,
        )
        if session is not None:
            self._session_stream = session
            await self._join(session_group(session.key))
        if resume is None:
            await writer.start(sse.comment("ready"))
        else:
            # Resuming this GET stream: replay what was missed under the same ids, then carry on as that stream.
            await self.send_headers(200, sse.SSE_HEADERS)
            await self.send_body(sse.comment("resumed"), more_body=True)
            writer.streaming = True
            writer.stream_id, writer.sequence = resume
            for sequence, message in await get_event_store().after(*resume):
                await self.send_body(sse.event(message, event_id=f"{resume[0]}.{sequence}"), more_body=True)
                writer.sequence = sequence
        self._stream_writer = writer
        await self._keep_alive(group)

    async def _resume_post_stream(self, stream_id: str, after: int) -> None:
        """Replay a POST response stream after ``after``, then follow its live events until the response."""
        await self._join(stream_group(stream_id))  # listen first, so no event falls between replay and listening
        await self.send_headers(200, sse.SSE_HEADERS)
        # Bytes at once: the client learns now that it is resumed (headers alone are not flushed by daphne).
        await self.send_body(sse.comment("resumed"), more_body=True)
        last = after
        for sequence, message in await get_event_store().after(stream_id, after):
            await self.send_body(sse.event(message, event_id=f"{stream_id}.{sequence}"), more_body=True)
            last = sequence
            if is_final(message):
                await self.send_body(b"")
                return
        # Its producer may be gone (the process died): after SSE_RESUME_IDLE_SECONDS without an event the
        # stream ends, and the client resumes again from its last id (SSE polling, 2025-11-25). Never a hang.
        interval = float(mcp_settings.SSE_KEEPALIVE_SECONDS)
        idle_limit = float(mcp_settings.SSE_RESUME_IDLE_SECONDS)
        heard = time.monotonic()
        while True:
            try:
                wait = max(0.0, min(interval, idle_limit - (time.monotonic() - heard)))
                event = await asyncio.wait_for(self._stream_events.get(), timeout=wait)
            except TimeoutError:
                if time.monotonic() - heard >= idle_limit:
                    await self.send_body(b"")
                    return
                await self.send_body(sse.comment("keep-alive"), more_body=True)
                continue
            heard = time.monotonic()
            if event["sequence"] <= last:
                continue
            last = event["sequence"]
            await self.send_body(sse.event(event["message"], event_id=f"{stream_id}.{last}"), more_body=True)
            if is_final(event["message"]):
                await self.send_body(b"")
                return

    async def _keep_alive(self, group: str) -> None:
        interval = float(mcp_settings.SSE_KEEPALIVE_SECONDS)
        while True:
            await asyncio.sleep(interval)
            await self.send_body(sse.comment("keep-alive"), more_body=True)
            await self._join(group)  # refreshes membership, so layers that expire groups keep long streams

    async def _join(self, group: str) -> None:
        layer = self.channel_layer or get_channel_layer()
        if layer is None:
            return
        if self.channel_name is None:
            self.channel_layer = layer
            self.channel_name = await layer.new_channel()
            self._pump = asyncio.create_task(self._pump_layer())
        await layer.group_add(group, self.channel_name)
        if group not in self._groups:
            self._groups.append(group)

    async def _leave(self, group: str) -> None:
        if self.channel_layer is not None and self.channel_name is not None and group in self._groups:
            self._groups.remove(group)
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _pump_layer(self) -> None:
        assert self.channel_layer is not None and self.channel_name is not None

        async def lost(_error: BaseException) -> None:
            self._events.put_nowait({"type": "mcp.layer_down"})

        async for message in receive_forever(self.channel_layer, self.channel_name, on_error=lost):
            if message.get("type") in (BROADCAST_EVENT, REPLY_EVENT, CANCEL_EVENT, STREAM_EVENT):
                await self._events.put(message)
