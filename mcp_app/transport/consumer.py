"""The MCP endpoint ``/mcp/<server_id>`` as a Channels consumer: the HTTP edge of Streamable HTTP, and only that.

One consumer instance serves one HTTP request. It buffers the body up to ``MAX_BODY_BYTES``, then runs the
response in a task so that it keeps listening for ``http.disconnect`` (which cancels the work, except for a
resumable handshake-era stream, whose call goes on) and for channel-layer events (``transport.membership``).

What the edge owns, in the order a request meets it:

1. ``OPTIONS``: CORS preflight (``transport.cors``), decided from the cached server snapshot: no query, no hop;
2. method (405 with ``Allow``), ``Host`` (421);
3. authentication and authorization (``transport.auth.admit``: 401/403/404 from the per-process caches); an
   address or token prefix that keeps failing authentication gets 429 instead, never a valid token
   (``mcp_app.limits.bruteforce``);
   the rate limits of the tenant, agent and tools called (``mcp_app.limits.rates``: 429 with ``Retry-After``;
   a POST is drawn once decoded, through ``_PostExchange.admit``, so its tools count too);
4. ``Origin`` (403) and the CORS headers of every later answer (a refusal at 3, the 401 that starts OAuth among
   them, carries them too when the server allows the origin);
5. era routing of methods: a modern-only server answers GET and DELETE with 405;
6. POST: ``Content-Type`` (415) and an empty body (400), then the body goes to ``protocol.serving.serve_post``
   once and comes back as an ``Answer`` (status, payload, a stream to open, a session to open), which is
   written as JSON or, once the request has notified, as SSE (``transport.writer``);
7. GET: the endpoint's description, or a stream (``transport.streams``); DELETE: session termination (204);
   a GET or listen stream holds a slot of its tenant's and agent's stream caps, and a new session must fit
   their session caps (``mcp_app.limits.caps``: 429), unless the process is short of file descriptors (503);
8. failures: 503 with ``Retry-After`` while the channel layer or event store is unreachable, or the database
   refuses, fails or passes its bounds (``mcp_app.database``; an error event on a stream that has started), 500
   with a bare ``Internal error`` for anything else.

Not here: JSON-RPC rules and which status carries an answer (``protocol.serving``, ``protocol.statuses``), the
back-channel of server-to-client requests and cancellation (``transport.backchannel``), stream replay and
keep-alives (``transport.streams``), the runner and the ports of each era (``mcp_app.services.request_context``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.consumer import AsyncConsumer, get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from django.conf import settings

from ..caching import identity
from ..caching.identity import CacheMiss
from ..channel_layer import LAYER_ERRORS, layer_health
from ..conf import mcp_settings
from ..database import DATABASE_ERRORS
from ..events import CANCEL_EVENT
from ..limits import bruteforce, caps, rates
from ..oauth.resources import metadata_url
from ..observability import logging as request_log
from ..observability import metrics
from ..protocol import jsonrpc, serving, versions
from ..protocol.context import RequestContext
from ..protocol.errors import (
    DatabaseUnavailable,
    InvalidRequest,
    JsonRpcId,
    ProtocolError,
    RateLimited,
    ServiceUnavailable,
    error_response,
)
from . import cors, sse
from .auth import AccessDenied, AccessGrant, admit, bearer_token
from .backchannel import BackChannel
from .membership import Membership
from .security import accepts, canonical_origin, host_allowed, is_json_content_type, origin_allowed, same_origin
from .sessions import DatabaseSession, open_session
from .streams import Streams, endpoint_description
from .writer import JSON_HEADERS, ResponseWriter, send_body, start_response

logger = logging.getLogger("mcp_app.transport")

ALLOWED_METHODS = ("GET", "POST", "DELETE")
CAP_RETRY_AFTER = b"5"  # seconds: when a stream or session slot frees depends on the caller, not on time

# Calls whose client went away but which go on (resumable handshake-era streams); referenced until done.
_detached: set[asyncio.Task[None]] = set()


class McpConsumer(AsyncConsumer):
    """Streamable HTTP endpoint of one hosted MCP server."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.base_send = send
        self.channel_layer = None
        self.channel_name = None
        self._body = bytearray()
        self._inbox: deque[dict[str, Any]] = deque()  # channel-layer and internal events, dispatched in order
        self._waiter: asyncio.Future[None] | None = None
        self._work: asyncio.Task[None] | None = None
        self._membership = Membership(self)
        self._response_started = False
        self._writer: ResponseWriter | None = None  # of the POST this consumer serves
        self._backchannel: BackChannel | None = None  # of a handshake-era POST
        self._streams: Streams | None = None  # a GET stream, a resumed stream or subscriptions/listen
        self._detached = False
        self._named_session: DatabaseSession | None = None
        self._cors: list[tuple[bytes, bytes]] = []  # on every answer once the Origin is known to be allowed
        self._request_id: str | int | None = None  # of a POST request, for its answer if the stream must end
        self._slot: caps.Slot | None = None  # of a GET or listen stream (mcp_app.limits.caps)
        try:
            await self._run(receive)
        except StopConsumer:
            pass
        finally:
            if not self._detached:
                await self._cleanup()

    async def _run(self, receive: Any) -> None:
        """The message loop, without Channels' ``await_many_dispatch`` (a task per source and per message): the
        body in a plain loop over ``receive()``, then one pending ``receive()`` (for ``http.disconnect``) beside
        the work, and the inbox, which only channel-layer members and cancellations ever fill."""
        while self._work is None:
            await self.dispatch(await receive())  # http.request (the body), or http.disconnect: StopConsumer
        work = self._work
        work.add_done_callback(self._wake)
        pending = asyncio.ensure_future(receive())
        pending.add_done_callback(self._wake)
        try:
            while True:
                while self._inbox:
                    await self.dispatch(self._inbox.popleft())
                if pending.done():
                    message = pending.result()
                    pending = asyncio.ensure_future(receive())
                    pending.add_done_callback(self._wake)
                    await self.dispatch(message)
                    continue
                if work.done():
                    return
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
        finally:
            self._waiter = None
            pending.cancel()

    def _wake(self, _source: object = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def put_nowait(self, message: dict[str, Any]) -> None:
        """The inbox (``membership.Inbox``): an event for this consumer's message loop."""
        self._inbox.append(message)
        self._wake()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Unlike AsyncConsumer.dispatch, no connection clean-up per message: all ORM work goes through
        # database_sync_to_async, which already closes stale connections around each call.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    # ASGI plumbing -------------------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """The ASGI ``send`` every writer of this request gets; notes when the response has started."""
        if message["type"] == "http.response.start":
            self._response_started = True
        await self.base_send(message)

    async def send_response(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        await start_response(self.send, status, headers, self._cors)
        await send_body(self.send, body)

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
            await self.send_error(400, f"Request body exceeds {limit} bytes.")  # seed 000: 400, -32600
            raise StopConsumer
        if message.get("more_body"):
            return
        self._work = asyncio.create_task(self._serve(bytes(self._body)))

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

    async def mcp_broadcast(self, message: dict[str, Any]) -> None:
        if self._streams is not None:
            await self._streams.broadcast(message)

    async def mcp_stream_event(self, message: dict[str, Any]) -> None:
        if self._streams is not None:
            await self._streams.stream_event(message)

    async def mcp_reply(self, message: dict[str, Any]) -> None:
        if self._backchannel is not None:
            self._backchannel.reply(message)

    async def mcp_cancel(self, message: dict[str, Any]) -> None:
        """``notifications/cancelled`` for the request this consumer serves: stop it and end the response
        without a JSON-RPC answer, as the spec asks."""
        if self._work is None or self._work.done():
            return
        self._work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._work
        if self._writer is not None:
            await self._writer.settle()
        if self._writer is not None and self._writer.streaming:
            self._writer.discard()
            await send_body(self.send, b"")
        elif not self._response_started:
            await start_response(self.send, 200, sse.SSE_HEADERS, self._cors)
            await send_body(self.send, b"")

    async def mcp_layer_down(self, message: dict[str, Any]) -> None:
        """The layer pump lost the layer: a GET or listen stream cannot hear anything more; end it with an error
        event (the client reconnects, and gets a 503 until the layer is back). Calls go on without it."""
        if self._streams is not None and self._response_started:
            if self._work is not None and not self._work.done():
                self._work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._work
            await self._layer_unavailable()
            raise StopConsumer

    def _declared_length(self) -> int:
        value = self._header("content-length")
        return int(value) if value and value.isdigit() else 0

    def _headers(self) -> dict[str, str]:
        """Request headers by lower-case name; of repeated headers the first counts."""
        headers: dict[str, str] = {}
        for key, value in self.scope.get("headers", ()):
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        return headers

    def _origin(self) -> str:
        """This request's origin as clients see it (the proxy's scheme header counts, as in Django); the Host
        header was checked against ALLOWED_HOSTS already."""
        scheme = self.scope.get("scheme") or "http"
        proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        if proxy and self._header(proxy[0].removeprefix("HTTP_").replace("_", "-").lower()) == proxy[1]:
            scheme = "https"
        return f"{scheme}://{self._header('host') or 'localhost'}"

    def _header(self, name: str) -> str | None:
        encoded = name.encode()
        for key, value in self.scope.get("headers", ()):
            if key.lower() == encoded:
                return value.decode("latin-1")
        return None

    async def _cleanup(self) -> None:
        if self._slot is not None:
            await self._slot.release()
        if self._writer is not None:
            self._writer.stop_timers()
        if self._backchannel is not None:
            await self._backchannel.close()
        work = self._work
        if work is not None and not work.done():
            work.cancel()
            try:
                await work
            except asyncio.CancelledError:
                pass
            except Exception:
                logger.exception("background task failed during clean-up")
        await self._membership.close()

    # The request ---------------------------------------------------------------------------------------

    async def _serve(self, body: bytes) -> None:
        try:
            await self._respond(body)
        except asyncio.CancelledError:
            raise
        except ServiceUnavailable as error:
            metrics.record_dependency_error(error.dependency)
            await self._layer_unavailable(error)
        except DATABASE_ERRORS as error:
            # Refused, failed or past its bounds (mcp_app.database): a 503 the client retries, no traceback.
            metrics.record_dependency_error("database")
            logger.warning("database unavailable serving %s: %s", self.scope.get("path"), type(error).__name__)
            await self._layer_unavailable(DatabaseUnavailable())
        except LAYER_ERRORS as error:
            layer_health.failed(error)
            metrics.record_dependency_error("channel_layer")
            await self._layer_unavailable()
        except Exception as exc:
            metrics.record_exception(exc)
            logger.exception("unhandled error serving %s %s", self.scope.get("method"), self.scope.get("path"))
            if self._writer is not None:
                await self._writer.settle()
                self._writer.stop_timers()
            if not self._response_started:
                await self.send_response(
                    500,
                    jsonrpc.encode(error_response(self._readable_id(), ProtocolError("Internal error"))),
                    JSON_HEADERS,
                )

    def _readable_id(self) -> JsonRpcId:
        """The id of the request being answered, when it can be read (for an answer the protocol did not
        produce: a 503 or a 500); ``None`` for a batch, a notification or a body that is not JSON."""
        if self._request_id is not None:
            return self._request_id
        if self.scope.get("method") != "POST" or not self._body:
            return None
        try:
            payload = orjson.loads(bytes(self._body))
        except orjson.JSONDecodeError:
            return None
        request_id = jsonrpc.recover_id(payload)
        return None if isinstance(request_id, str) and "\x00" in request_id else request_id

    async def _layer_unavailable(self, error: ServiceUnavailable | None = None) -> None:
        """The channel layer, event store or database failed: a 503 before the response started, else end the
        stream with an error (a POST stream's request gets its JSON-RPC error answer, so the client never waits
        forever)."""
        error = error or ServiceUnavailable()
        if self._writer is not None:
            await self._writer.settle()
        if not self._response_started:
            body = jsonrpc.encode(error_response(self._readable_id(), error))
            retry = (b"retry-after", str(error.retry_after_seconds).encode())
            await self.send_response(503, body, [*JSON_HEADERS, retry])
            return
        if self._request_id is not None and self._streams is None:
            frame = sse.event(error_response(self._request_id, error))
        else:
            frame = sse.error_event(error_response(None, error))
        if self._writer is not None:
            self._writer.discard()
        with contextlib.suppress(Exception):  # the client may be gone already; nothing else to tell anyone
            await send_body(self.send, frame, more_body=True)
            await send_body(self.send, b"")

    async def _respond(self, body: bytes) -> None:
        method = self.scope["method"]
        origin = self._header("origin")
        canonical = canonical_origin(origin) if origin is not None else None  # the only form ever echoed
        if canonical is not None and cors.origin_listed(canonical, ()):
            self._cors = cors.response_headers(canonical)
        if method == "OPTIONS":
            if not host_allowed(self._header("host")):
                await self.send_error(421, "This host name is not served here.")
            else:
                await self._preflight(origin, canonical)
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
        address = bruteforce.client_address(self.scope)
        raw_token = bearer_token(self._header("authorization"))
        throttled = bruteforce.blocked(address, raw_token)
        if throttled is not None:  # cannot authenticate, and spent its failures: no more lookups for a while
            await self._rate_limited(throttled, None)
            return
        try:
            # Who calls, which server, and (handshake era) which session: from the per-process caches, or in one
            # worker-thread call when this process has not seen them yet.
            grant, self._named_session = await admit(
                server_id, agent_id, self._header("authorization"), self._header("mcp-session-id")
            )
        except AccessDenied as denied:
            if denied.status == 401:
                bruteforce.log_failure(address, 401)
                throttled = await bruteforce.failed(address, raw_token)
                if throttled is not None:
                    await self._rate_limited(throttled, None)
                    return
            challenge = denied.challenge(metadata_url(self._origin(), server_id))
            extra = [(b"www-authenticate", challenge.encode())] if challenge else []
            if canonical is not None and not self._cors and await self._server_allows(server_id, canonical):
                # A browser client reads the challenge (and finds OAuth) only with the CORS headers.
                self._cors = cors.response_headers(canonical)
            await self.send_error(denied.status, denied.message, headers=extra)
            return
        request_log.bind(tenant=grant.tenant_slug, agent=grant.agent_id)
        if not origin_allowed(origin, grant.server.allowed_origins, self._header("host")):
            await self.send_error(403, "This Origin is not allowed to use this server.")
            return
        if canonical is not None:
            self._cors = cors.response_headers(canonical)
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
        try:
            await rates.take(rates.request_buckets(grant.token))
        except RateLimited as limited:
            await self._rate_limited(limited, None)
            return
        if self._header("mcp-session-id") is not None and self._named_session is None:
            await self.send_error(404, "Session not found: it expired or was terminated; initialize a new one.")
            return
        session = self._named_session
        if method == "GET":
            await self._serve_get(grant, session)
        else:
            if session is not None:
                await session.terminate()
            await self.send_response(204, b"", [])

    async def _rate_limited(self, limited: RateLimited, request_id: JsonRpcId) -> None:
        body = jsonrpc.encode(error_response(request_id, limited))
        retry = (b"retry-after", str(limited.retry_after_seconds).encode())
        await self.send_response(429, body, [*JSON_HEADERS, retry])

    async def _preflight(self, origin: str | None, canonical: str | None) -> None:
        """CORS preflight (see ``cors``); without an Origin, a plain OPTIONS naming the methods."""
        self._cors = []
        if origin is None or self._header("access-control-request-method") is None:
            await self.send_response(204, b"", [(b"allow", b"GET, POST, DELETE, OPTIONS")])
            return
        if canonical is None or not await self._server_allows(
            self.scope["url_route"]["kwargs"]["server_id"], canonical
        ):
            await self.send_error(403, "This Origin is not allowed to use this server.")
            return
        headers = cors.preflight_headers(canonical, self._header("access-control-request-headers"))
        await self.send_response(204, b"", headers)

    async def _server_allows(self, server_id: str, canonical: str) -> bool:
        """Whether the servable server ``server_id`` takes requests from ``canonical`` (its allowed origins,
        ``ALLOWED_ORIGINS``, or its own origin), from the per-process server cache (one worker-thread load when
        this process has not seen the server yet). An unknown server allows only ``ALLOWED_ORIGINS``, like any."""
        try:
            server = identity.server(server_id, load=False)
        except CacheMiss:
            server = await database_sync_to_async(identity.server)(server_id, load=True)
        if server is None:
            return cors.origin_listed(canonical, ())
        return cors.origin_listed(canonical, server.allowed_origins) or same_origin(canonical, self._header("host"))

    async def _serve_post(self, grant: AccessGrant, body: bytes) -> None:
        if not is_json_content_type(self._header("content-type")):
            await self.send_error(415, "Content-Type must be application/json.")
            return
        if not body.strip():
            await self.send_error(400, "The request body is empty.")
            return
        headers = self._headers()
        request = serving.PostRequest(
            headers=headers,
            supported_versions=grant.server.supported_versions,
            max_depth=mcp_settings.MAX_JSON_DEPTH,
            max_batch_size=mcp_settings.MAX_BATCH_SIZE,
            max_client_info_bytes=mcp_settings.MAX_CLIENT_INFO_BYTES,
            sessions_required=grant.server.sessions_required,
            session_named="mcp-session-id" in headers,
            session=self._named_session,
        )
        exchange = _PostExchange(self, grant, headers)
        try:
            answer = await serving.serve_post(body, request, exchange)
        finally:
            if self._backchannel is not None:
                self._backchannel.release()
        if answer.stream is not None:
            if not await self._hold_stream(grant, exchange.request_id):
                return
            self._streams = Streams(self.send, self._cors, self._membership, recheck=self._readmit)
            await self._streams.listen(grant, answer.stream)
            return
        extra = [(name.encode(), value.encode()) for name, value in answer.headers]
        if answer.new_session is not None:
            try:
                raw = await database_sync_to_async(_open_capped_session)(grant, answer.new_session)
            except caps.CapacityExceeded as refused:
                await self._over_capacity(refused, exchange.request_id)
                return
            extra.append((b"mcp-session-id", raw.encode()))
        if self._writer is not None:
            await self._writer.finish(answer.status, answer.payload, extra)
        elif answer.payload is None:
            await self.send_response(answer.status, b"", [])
        else:
            await self.send_response(answer.status, jsonrpc.encode(answer.payload), [*JSON_HEADERS, *extra])

    def _context(
        self, grant: AccessGrant, headers: dict[str, str], route: serving.Route, **fields: Any
    ) -> RequestContext:
        """The request's context once the protocol has routed it: its response writer, and for a handshake-era
        request its back-channel (cancellable from now on when it has an id)."""
        allow_stream = accepts(headers.get("accept"), "text/event-stream")
        if route.era == versions.MODERN:
            self._writer = ResponseWriter(self.send, cors=self._cors, allow_stream=allow_stream)
            return grant.request_context(
                era=versions.MODERN,
                protocol_version=route.protocol_version,
                headers=headers,
                emit=self._writer.notify,
                **fields,
            )
        session = fields.get("session")
        writer = ResponseWriter(
            self.send,
            cors=self._cors,
            allow_stream=allow_stream,
            session_key=session.key if session is not None else None,
            priming=route.protocol_version >= versions.V2025_11_25,
            owner=(grant.token.tenant_pk, grant.token.agent_pk),
        )
        self._writer = writer
        scope = session.key if session is not None else f"t{grant.token.pk}"
        self._backchannel = BackChannel(scope, writer, self._membership, self._cancel_soon)
        ctx = grant.request_context(
            era=versions.LEGACY,
            protocol_version=route.protocol_version,
            headers=headers,
            emit=writer.notify,
            outbound=self._backchannel,
            **fields,
        )
        if route.request_id is not None:
            self._request_id = route.request_id
            self._backchannel.watch(route.request_id)
        return ctx

    def _cancel_soon(self) -> None:
        """Stop the call this consumer serves, from this event loop (its own message loop ends the response)."""
        if self._detached:
            if self._work is not None:
                self._work.cancel()  # nobody reads the response any more
            return
        self.put_nowait({"type": CANCEL_EVENT})

    async def _hold_stream(self, grant: AccessGrant, request_id: str | int | None) -> bool:
        """Take a stream slot (``mcp_app.limits.caps``), or answer the refusal and return ``False``."""
        try:
            self._slot = await caps.hold_stream(grant.token, uuid.uuid4().hex)
        except caps.CapacityExceeded as refused:
            await self._over_capacity(refused, request_id)
            return False
        return True

    async def _over_capacity(self, refused: caps.CapacityExceeded, request_id: str | int | None) -> None:
        """A cap of the caller: 429; the process short of file descriptors: 503. Both with ``Retry-After``."""
        status, retry = (503, b"1") if refused.scope == "process" else (429, CAP_RETRY_AFTER)
        body = jsonrpc.encode(error_response(request_id, refused))
        await self.send_response(status, body, [*JSON_HEADERS, (b"retry-after", retry)])

    async def _serve_get(self, grant: AccessGrant, session: DatabaseSession | None) -> None:
        accept = self._header("accept") or ""
        if "text/event-stream" not in accept.lower():
            await self.send_response(200, jsonrpc.encode(endpoint_description(grant)), JSON_HEADERS)
            return
        if not await self._hold_stream(grant, None):
            return
        self._streams = Streams(self.send, self._cors, self._membership, recheck=self._readmit)
        await self._streams.serve_get(grant, session, self._headers())

    async def _readmit(self) -> AccessGrant | None:
        """This request's credentials checked again (an open stream's re-check): the grant, or ``None`` when
        they are refused now or the session it named has ended."""
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        session_id = self._header("mcp-session-id")
        try:
            grant, session = await admit(
                self.scope["url_route"]["kwargs"]["server_id"],
                (query.get("agentId") or [None])[0],
                self._header("authorization"),
                session_id,
            )
        except AccessDenied:
            return None
        return None if session_id is not None and session is None else grant


def _open_capped_session(grant: AccessGrant, new: serving.NewSession) -> str:
    """Record a new session if its agent and tenant are under their session caps (one worker-thread call)."""
    caps.check_sessions(grant.token.tenant_pk, grant.token.agent_pk)
    return open_session(grant.server.pk, grant.token.agent_pk, new.protocol_version, dict(new.params))


class _PostExchange:
    """The ``protocol.serving.Exchange`` of one POST: the request log, and contexts built by the consumer."""

    def __init__(self, consumer: McpConsumer, grant: AccessGrant, headers: dict[str, str]) -> None:
        self._payload: Any = None
        self._consumer = consumer
        self._grant = grant
        self._headers = headers
        self.request_id: str | int | None = None  # of a single request, for an answer the edge writes itself

    def routed(self, era: str, payload: Any) -> None:
        request_log.bind(method=metrics.rpc_method(payload), era=era)
        self.request_id = jsonrpc.recover_id(payload)
        self._payload = payload

    async def admit(self, payload: Any) -> None:
        """Every message of the body draws one token from its tenant's and agent's buckets, and a ``tools/call``
        one from its tool's (found in the grant's cached catalog): one round trip, no query."""
        messages = payload if isinstance(payload, list) else [payload]
        tools = []
        for message in messages:
            if isinstance(message, dict) and message.get("method") == "tools/call":
                params = message.get("params")
                name = params.get("name") if isinstance(params, dict) else None
                tool = self._grant.catalog.tool(name) if isinstance(name, str) else None
                if tool is not None:
                    tools.append(tool)
        await rates.take(rates.request_buckets(self._grant.token, tools=tools, cost=max(1, len(messages))))

    def context(self, route: serving.Route, **fields: Any) -> RequestContext:
        ctx = self._consumer._context(self._grant, self._headers, route, **fields)
        writer = self._consumer._writer
        if route.era == versions.LEGACY and writer is not None:
            delay = opening_delay(self._payload, fields.get("session") is not None)
            if delay is not None:
                writer.open_soon(delay)
        return ctx


def opening_delay(payload: Any, on_session: bool) -> float | None:
    """When a handshake-era POST opens its SSE stream before any notification (``None``: only then): at once
    for a tool call with a progress token (its client waits for progress), after ``SSE_OPEN_AFTER_SECONDS`` for
    any other tool call on a session. Either way a silent call sends its headers and first bytes (the priming
    event) long before a proxy's read timeout, and keep-alives after (``ResponseWriter.open_soon``)."""
    calls = [
        message
        for message in (payload if isinstance(payload, list) else [payload])
        if isinstance(message, dict) and message.get("method") == "tools/call" and "id" in message
    ]
    if not calls:
        return None
    for message in calls:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and meta.get("progressToken") is not None:
            return 0.0
    return float(mcp_settings.SSE_OPEN_AFTER_SECONDS) if on_session else None
