"""The MCP endpoint ``/mcp/<server_id>`` as a Channels consumer: the HTTP edge of Streamable HTTP, and only that.

One consumer instance serves one HTTP request: ``OPTIONS`` is a CORS preflight; every other request meets the
edge's ``checks`` in order, each a refusal or ``None``; then a POST goes to ``transport.exchange``, a GET to
``transport.streams``, and a DELETE ends the session. The checks and their statuses: docs/architecture.md ("The
HTTP edge").

A GET stream outlives its consumer: once its head is out it is the process's ``transport.fanout``'s, with its
stream slot, and the application instance (``McpConsumer.as_asgi``) drops the consumer and only waits for the
client to leave.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from channels.exceptions import StopConsumer

from ..conf import mcp_settings
from ..events import Broadcast, CallCancelled, Reply, StreamEvent
from ..limits.admit import Caller, admit
from ..limits.caps import Slot
from ..oauth.resources import metadata_url
from ..observability import logging as request_log
from ..protocol import jsonrpc, versions
from ..protocol.errors import ServiceUnavailable
from ..protocol.serving import Answer, refusal, refused
from . import cors, security
from .auth import AccessDenied, AccessGrant, Credentials, bearer_token
from .exchange import PostExchange
from .fanout import IdleStream
from .membership import InboxConsumer
from .sessions import DatabaseSession
from .streams import Streams, endpoint_description
from .writer import Response, ResponseWriter

logger = logging.getLogger("mcp_app.transport")

ALLOWED_METHODS = ("GET", "POST", "DELETE")
Check = Callable[[], Awaitable[Answer | None]]

# Calls whose client went away but which go on (resumable handshake-era streams); referenced until done.
detached_calls: set[asyncio.Task[None]] = set()


class McpConsumer(InboxConsumer):
    """Streamable HTTP endpoint of one hosted MCP server."""

    @classmethod
    def as_asgi(cls, **initkwargs: Any) -> Any:
        """Like ``AsyncConsumer.as_asgi``, but an idle GET stream's application instance keeps only the stream."""

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            consumer = cls(**initkwargs)
            try:
                await consumer(scope, receive, send)
            except BaseException:
                if consumer.idle is not None:
                    await consumer.idle.close()
                raise
            idle = consumer.idle
            del consumer  # the consumer goes; the stream is the fan-out's
            if idle is not None:
                await idle.wait(receive)

        app.consumer_class = cls  # type: ignore[attr-defined]
        app.consumer_initkwargs = initkwargs  # type: ignore[attr-defined]
        functools.update_wrapper(app, cls, updated=())
        return app

    idle: IdleStream | None = None  # the GET stream handed to the fan-out, once its head is out

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.headers = security.request_headers(scope)
        self.credentials = Credentials.of(scope, self.headers)
        self.caller = Caller.of(scope, bearer_token(self.headers.get("authorization")))
        origin = self.headers.get("origin")  # only its canonical form is ever echoed
        self.canonical = security.canonical_origin(origin) if origin is not None else None
        self.response = Response(send)
        self._body = bytearray()
        self._post: PostExchange | None = None
        self._streams: Streams | None = None  # a GET stream, a resumed stream or subscriptions/listen
        self._grant: AccessGrant | None = None
        self._session: DatabaseSession | None = None  # the one Mcp-Session-Id names, when alive
        self._slots: list[Slot] = []  # a stream slot held (mcp_app.limits)
        await super().__call__(scope, receive, send)

    @property
    def _writer(self) -> ResponseWriter | None:
        return self._post.writer if self._post is not None else None

    async def http_request(self, message: dict[str, Any]) -> None:
        if self.begun:
            return
        self._body += message.get("body", b"")
        limit, declared = mcp_settings.MAX_BODY_BYTES, self.headers.get("content-length", "")
        if len(self._body) > limit or (declared.isdigit() and int(declared) > limit):
            await self.response.write(refusal(400, f"Request body exceeds {limit} bytes."))  # seed 000: -32600
            raise StopConsumer
        if not message.get("more_body"):
            # Only a handshake-era session's stream goes on when its client leaves; a GET streams from its start.
            own_task = self.credentials.session_id is not None or self.scope["method"] == "GET"
            self.begin(self._serve(bytes(self._body)), own_task=own_task)

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        idle, self.idle = self.idle, None
        if idle is not None:  # it left as its head went out: its application instance waits for nothing
            await idle.close()
        writer, work = self._writer, self.work
        if writer is not None and writer.resumable and writer.streaming and work is not None and not work.done():
            # Handshake era: a disconnect is not a cancellation. The call goes on, its events go to the store
            # and to a reconnecting GET, and this consumer's listeners stay until the call ends.
            writer.disconnected = self.detached = True
            detached_calls.add(work)
            work.add_done_callback(detached_calls.discard)
            work.add_done_callback(lambda _task: asyncio.ensure_future(self.cleanup()))
        raise StopConsumer

    async def mcp_broadcast(self, message: dict[str, Any]) -> None:
        broadcast = Broadcast.from_wire(message)
        if self._streams is not None and broadcast is not None:
            await self._streams.broadcast(broadcast.message)

    async def mcp_stream_event(self, message: dict[str, Any]) -> None:
        event = StreamEvent.from_wire(message)
        if self._streams is not None and event is not None:
            await self._streams.stream_event(event)

    async def mcp_reply(self, message: dict[str, Any]) -> None:
        reply = Reply.from_wire(message)
        if self._post is not None and self._post.backchannel is not None and reply is not None:
            self._post.backchannel.reply(reply)

    async def mcp_cancel(self, message: dict[str, Any]) -> None:
        """``notifications/cancelled`` for the request this consumer serves: stop it, end the response."""
        if await self.stop_work():
            await self.response.end_cancelled(self._writer)

    async def mcp_layer_down(self, message: dict[str, Any]) -> None:
        """The layer pump lost the layer: a GET or listen stream cannot hear anything more; end it with an error
        event (the client reconnects, and gets a 503 until the layer is back). Calls go on without it."""
        if self._streams is not None and self.response.started:
            await self.stop_work()
            await self.response.unavailable(ServiceUnavailable(), self._writer, None, None)
            raise StopConsumer

    def cancel_soon(self) -> None:
        """Stop the call this consumer serves, from this event loop (its own message loop ends the response)."""
        if not self.detached:
            self.put_nowait(CallCancelled().to_wire())
        elif self.work is not None:
            self.work.cancel()  # nobody reads the response any more

    async def cleanup(self) -> None:
        while self._slots:  # popped: a second clean-up releases nothing twice
            await self._slots.pop().release()
        if self._post is not None:
            await self._post.close()
        try:
            await self.stop_work()
        except Exception:
            logger.exception("background task failed during clean-up")
        await super().cleanup()
        self._post = None  # it holds ``cancel_soon``: no cycle left for the garbage collector to find

    # The request ---------------------------------------------------------------------------------------

    async def _serve(self, body: bytes) -> None:
        try:
            await self._respond(body)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            # For an answer the protocol did not produce: the id of the request, when it can be read.
            owed = self._post.call_id if self._post is not None else None
            readable = jsonrpc.peek_id(body) if owed is None and self.scope["method"] == "POST" and body else owed
            owed = owed if self._streams is None else None
            await self.response.fail(error, self._writer, readable, owed, self.scope)

    async def _respond(self, body: bytes) -> None:
        if self.canonical is not None and security.origin_listed(self.canonical, ()):
            self.response.cors = cors.response_headers(self.canonical)
        if self.scope["method"] == "OPTIONS":
            wrong_host = await self._known_host()
            if wrong_host is None:
                self.response.cors = []  # a preflight carries its own CORS headers, or none
            await self.response.write(wrong_host or await cors.preflight(self.credentials.server_id, self.headers))
            return
        for check in self.checks():
            answer = await check()
            if answer is not None:
                await self.response.write(answer)
                return
        await self._serve_method(body)

    def checks(self) -> tuple[Check, ...]:
        """The edge's checks, in order: each answers a refusal, or ``None`` to let the request on."""
        post = self.scope["method"] == "POST"
        later = (self._json_body, self._nonempty) if post else (self._within_rates, self._live_session)
        return (
            self._allowed_method,
            self._known_host,
            self._not_blocked,
            self._authenticated,
            self._allowed_origin,
            self._served_era,
            *later,
        )

    async def _allowed_method(self) -> Answer | None:
        method = self.scope["method"]
        if method in ALLOWED_METHODS:
            return None
        return refusal(405, f"Method {method} is not allowed.", (("allow", ", ".join((*ALLOWED_METHODS, "OPTIONS"))),))

    async def _known_host(self) -> Answer | None:
        if security.host_allowed(self.headers.get("host")):
            return None
        return refusal(421, "This host name is not served here.")

    async def _not_blocked(self) -> Answer | None:
        limited = await admit(self.caller)  # cannot authenticate, spent its failures: no lookups for now
        return None if limited is None else refused(limited)

    async def _authenticated(self) -> Answer | None:
        try:
            # Who calls, which server, and (handshake era) which session: from the per-process caches, or in one
            # worker-thread call when this process has not seen them yet.
            self._grant, self._session = await self.credentials.admit()
        except AccessDenied as denied:
            limited = await admit(self.caller, failed=True) if denied.status == 401 else None
            if limited is not None:
                return refused(limited)
            server_id, canonical, host = self.credentials.server_id, self.canonical, self.headers.get("host")
            challenge = denied.challenge(metadata_url(security.request_origin(self.scope, self.headers), server_id))
            if (
                canonical is not None
                and not self.response.cors
                and await cors.server_allows(server_id, canonical, host)
            ):
                self.response.cors = cors.response_headers(canonical)  # a browser client reads the challenge
            return refusal(denied.status, denied.message, (("www-authenticate", challenge),) if challenge else ())
        self.caller = Caller(self.caller.address, self.caller.raw_token, self._grant.token)
        request_log.bind(tenant=self._grant.server.tenant_slug, agent=self._grant.token.agent_id)
        return None

    async def _allowed_origin(self) -> Answer | None:
        assert self._grant is not None
        if not security.origin_allowed(
            self.headers.get("origin"), self._grant.server.allowed_origins, self.headers.get("host")
        ):
            return refusal(403, cors.ORIGIN_REFUSED)
        if self.canonical is not None:
            self.response.cors = cors.response_headers(self.canonical)
        return None

    async def _served_era(self) -> Answer | None:
        assert self._grant is not None
        method = self.scope["method"]
        if method == "POST" or versions.handshake_versions(self._grant.server.supported_versions):
            return None
        # The stateless revision removed the GET stream and session termination.
        message = f"Method {method} is not allowed: this server speaks only 2026-07-28."
        return refusal(405, message, (("allow", "POST"),))

    async def _json_body(self) -> Answer | None:
        if security.is_json_content_type(self.headers.get("content-type")):
            return None
        return refusal(415, "Content-Type must be application/json.")

    async def _nonempty(self) -> Answer | None:
        return None if self._body.strip() else refusal(400, "The request body is empty.")

    async def _within_rates(self) -> Answer | None:
        limited = await admit(self.caller, requests=1)
        return None if limited is None else refused(limited)

    async def _live_session(self) -> Answer | None:
        if self.credentials.session_id is None or self._session is not None:
            return None
        return refusal(404, "Session not found: it expired or was terminated; initialize a new one.")

    async def _serve_method(self, body: bytes) -> None:
        grant, method = self._grant, self.scope["method"]
        assert grant is not None
        if method == "POST":
            post = self._post = PostExchange(
                self.response, self.membership, grant, self.caller, self.headers, self.cancel_soon
            )
            answer = await post.serve(body, self._session)
            if answer.stream is None:
                await post.finish(answer)
            elif await self._hold_stream(post.request_id):
                await self._stream().listen(grant, answer.stream)
        elif method == "DELETE":
            if self._session is not None:
                await self._session.terminate()
            await self.response.write(Answer(204))
        elif "text/event-stream" not in self.headers.get("accept", "").lower():
            await self.response.write(Answer(200, endpoint_description(grant)))
        elif await self._hold_stream(None):
            self.idle = await self._stream().serve_get(grant, self._session, self.headers)
            if self.idle is not None:  # its slot goes with it
                self.idle.slots, self._slots = self._slots, []

    async def _hold_stream(self, request_id: str | int | None) -> bool:
        """Take a stream slot (held until clean-up), or answer the refusal and return ``False``."""
        limited = await admit(self.caller, stream=self._slots)
        if limited is not None:
            await self.response.write(refused(limited, request_id))
        return limited is None

    def _stream(self) -> Streams:
        self._streams = Streams(self.response, self.membership, self.credentials.recheck)
        return self._streams
