"""Writing one response: JSON, or SSE from the first notification on; resumable on handshake-era sessions.

``ResponseWriter`` owns how messages become bytes on the wire (not HTTP status or routing): the lazy switch to
``text/event-stream``, event ids and the priming event, the event store, and publishing events for a
reconnecting client. ``Response`` is the ASGI side of one request: its ``send``, its CORS headers on every head,
and what the edge writes itself (an ``Answer`` as JSON, a cancelled call's end, a 503 or a bare 500).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, layer_health
from ..conf import mcp_settings
from ..database import DATABASE_ERRORS
from ..events import StreamEvent, stream_group
from ..observability import metrics
from ..protocol import jsonrpc
from ..protocol.errors import DatabaseUnavailable, JsonRpcId, ProtocolError, ServiceUnavailable, error_response
from ..protocol.serving import Answer
from . import sse
from .eventstore import POST_STREAM, Owner, get_event_store, new_stream_id

logger = logging.getLogger("mcp_app.transport")

Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = Sequence[tuple[bytes, bytes]]

JSON_HEADERS: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]


async def start_response(send: Send, status: int, headers: Headers, cors: Headers = ()) -> None:
    """The response head, with the request's CORS headers (empty unless its Origin is allowed)."""
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *cors]})


async def send_body(send: Send, body: bytes, *, more_body: bool = False) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more_body})


class Response:
    """The one response of a request at the edge (see the module docstring)."""

    __slots__ = ("_send", "cors", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.cors: list[tuple[bytes, bytes]] = []  # on every answer once the Origin is known to be allowed
        self.started = False

    async def send(self, message: dict[str, Any]) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)

    async def write(self, answer: Answer, extra: Headers = ()) -> None:
        """The protocol's answer or the edge's refusal, as JSON (no body without a payload)."""
        headers = [*((name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers), *extra]
        if answer.payload is not None:
            headers = [*JSON_HEADERS, *headers]
        await start_response(self.send, answer.status, headers, self.cors)
        await send_body(self.send, b"" if answer.payload is None else jsonrpc.encode(answer.payload))

    async def start_stream(self) -> None:
        await start_response(self.send, 200, sse.SSE_HEADERS, self.cors)

    async def end_cancelled(self, writer: ResponseWriter | None) -> None:
        """A cancelled call's response ends without a JSON-RPC answer, as the spec asks."""
        if writer is not None:
            await writer.settle()
        if writer is not None and writer.streaming:
            writer.discard()
            if not self.started:  # its head was owed to a flush that never ran
                await self.start_stream()
            await send_body(self.send, b"")
        elif not self.started:
            await self.start_stream()
            await send_body(self.send, b"")

    async def fail(
        self, error: Exception, writer: ResponseWriter | None, request_id: JsonRpcId, owed: JsonRpcId, scope: Any
    ) -> None:
        """``error`` ended the request: a 503 or an error event (``unavailable``), or a 500."""
        if isinstance(error, DATABASE_ERRORS):
            # Refused, failed or past its bounds (mcp_app.database): a 503 the client retries, no traceback.
            logger.warning("database unavailable serving %s: %s", scope.get("path"), type(error).__name__)
            error = DatabaseUnavailable()
        elif isinstance(error, LAYER_ERRORS):
            layer_health.failed(error)
            error = ServiceUnavailable()
        if isinstance(error, ServiceUnavailable):
            metrics.record_dependency_error(error.dependency)
            await self.unavailable(error, writer, request_id, owed)
            return
        metrics.record_exception(error)
        logger.error("unhandled error serving %s %s", scope.get("method"), scope.get("path"), exc_info=error)
        if writer is not None:
            await writer.settle()
            writer.stop_timers()
        if not self.started:
            if writer is not None:
                writer.discard()  # a head it still owed never goes out after this answer
            await self.write(Answer(500, error_response(request_id, ProtocolError("Internal error"))))

    async def unavailable(
        self, error: ServiceUnavailable, writer: ResponseWriter | None, request_id: JsonRpcId, owed: JsonRpcId
    ) -> None:
        """A 503 for ``request_id`` before the response started; else the end of its stream with an error event,
        the JSON-RPC error answer of the request a POST stream still ``owed`` (so its client never waits
        forever)."""
        if writer is not None:
            await writer.settle()
        if not self.started:
            if writer is not None:
                writer.discard()  # a head it still owed never goes out after this answer
            retry = (("retry-after", str(error.retry_after_seconds)),)
            await self.write(Answer(503, error_response(request_id, error), headers=retry))
            return
        answer = error_response(owed, error)
        frame = sse.event(answer) if owed is not None else sse.error_event(answer)
        if writer is not None:
            writer.discard()
        with contextlib.suppress(Exception):  # the client may be gone already; nothing else to tell anyone
            await send_body(self.send, frame, more_body=True)
            await send_body(self.send, b"")


async def check_store() -> None:
    """A resumable stream's store, checked before any byte of the stream goes out: unreachable, a 503."""
    try:
        await get_event_store().check()
    except LAYER_ERRORS as error:
        raise ServiceUnavailable() from error


def stream_head(session_key: str | None, kind: str, priming: bool, first: bytes) -> tuple[str | None, bytes]:
    """A new stream's id (a resumable stream's, on a session) and its first bytes: the priming event, if it
    primes, then ``first``."""
    if session_key is None:
        return None, first
    stream_id = new_stream_id(session_key, kind)
    if priming:
        return stream_id, sse.priming(f"{stream_id}.0", mcp_settings.SSE_RETRY_MS) + first
    return stream_id, first


async def store_events(stream_id: str, events: list[tuple[int, Any]], owner: Owner | None, warned: bool) -> bool:
    """Append ``events`` to the store, in the store before on the wire (a client that sees an event can resume
    after it); over its owner's bound they are sent live all the same, only not resumable (``warned``: said once
    per stream already). Whether it has been said now; ``ServiceUnavailable`` when the store fails."""
    try:
        stored = await get_event_store().append_many(stream_id, events, owner)
    except LAYER_ERRORS as error:
        raise ServiceUnavailable() from error
    if not stored and not warned:
        logger.warning("stream %s: events not stored, %s over its bound", stream_id, owner)
        return True
    return warned


def is_final(message: Any) -> bool:
    """A response (not a request or notification): the last event a POST stream carries."""
    return isinstance(message, dict | list) and not (isinstance(message, dict) and "method" in message)


class ResponseWriter:
    """Writes one response as JSON, or as SSE once a notification has to go out before the answer.

    Events produced in the same turn of the event loop leave as one ``http.response.body``, sent by a flush
    scheduled for the next turn, or with the answer when it comes first. On a resumable stream they are appended
    to the store in one call *before* their bytes are sent: a client never sees an event a resume by
    ``Last-Event-ID`` cannot find. A failure of the store stops the stream: the events it could not keep are not
    sent, and the next event or the answer raises ``ServiceUnavailable``.

    A resumable stream that the call opens itself (its first notification, or ``open_soon``) owes its head: the
    head and the priming event leave with the first flush, once the store took that flush's burst, so that append
    is the store's check (no round trip of its own; a flush with nothing to append checks the store instead). A
    store that fails it leaves the head unsent, and the edge answers 503 as it does when ``start``'s check fails.
    """

    def __init__(
        self,
        response: Response,
        *,
        allow_stream: bool,
        session_key: str | None = None,
        priming: bool = False,
        kind: str = POST_STREAM,
        owner: Owner | None = None,
    ) -> None:
        self._response = response  # its send, and the request's CORS headers
        self._owner = owner  # whose bytes the stored events count against (the event store's owner bounds)
        self._allow_stream = allow_stream
        self._session_key = session_key
        self._priming = priming
        self._kind = kind
        self.streaming = False
        self.disconnected = False
        self.stream_id: str | None = None
        self.sequence = 0
        self._pending: list[bytes] = []  # bytes not sent yet, in order
        self._unstored: list[tuple[int, Any]] = []  # events among them that the store does not hold yet
        self._flusher: asyncio.Task[None] | None = None  # the flush scheduled for the next turn of the loop
        self._flushing = False  # a flush is storing or sending: the next one waits for it
        self._failure: BaseException | None = None
        self._starting: asyncio.Event | None = None  # set once the (one) start is over, whatever its outcome
        self._open_timer: asyncio.TimerHandle | None = None  # open_soon's timer (a handle, not a task: cheap)
        self._opener: asyncio.Task[None] | None = None  # open_soon's start, once the timer fired
        self._keeper: asyncio.TimerHandle | None = None  # the next keep-alive of a started POST stream
        self._keepalive_seconds = 0.0
        self._sent_at = 0.0  # loop time of the last bytes sent
        self.ended = False  # the body is over (or handed to the edge): nothing more is written
        self._unstored_logged = False
        self._head_owed = False  # streaming, but the head waits for the first flush (see the class docstring)
        self._dropped = False  # ``discard``: the edge ends the response; a flush under way sends nothing more

    @property
    def resumable(self) -> bool:
        return self._session_key is not None

    async def start(self, first: bytes = b"") -> None:
        """Send the SSE headers (and ``first``); resumable streams get their id and priming event here. Once: the calls
        of a batch notify concurrently and the store's check yields to the loop, so a caller arriving while the first
        one starts waits for that start (its ``first`` is not sent) instead of starting the response a second time."""
        if self._starting is not None:
            await self._starting.wait()
            if not self.streaming:  # the first start failed (or was cancelled): so does this call
                raise ServiceUnavailable()
            return
        self._starting = asyncio.Event()
        try:
            await self._start(first)
        finally:
            self._starting.set()

    def _start_owing_head(self, first: bytes = b"") -> None:
        """``start`` for a resumable stream the call opens: nothing awaited, the head owed to the first flush."""
        self._starting = asyncio.Event()
        self.streaming = self._head_owed = True
        self._begin(first)
        if self._flusher is None:  # nothing queued: a flush of its own sends the head
            self._flusher = asyncio.ensure_future(self._flush_soon())
        self._starting.set()

    def open_soon(self, delay: float) -> None:
        """Start the stream ``delay`` seconds from now (0: at once) unless the answer comes first, so that a silent
        call still sends its first bytes; keep-alive comments follow while it stays silent."""
        if not self._allow_stream or self._starting is not None or self._open_timer is not None:
            return
        if delay <= 0:
            self._open_now()
        else:
            self._open_timer = asyncio.get_running_loop().call_later(delay, self._open_now)

    def _open_now(self) -> None:
        self._open_timer = None
        if self.resumable:  # nothing to await: its start owes the head to the first flush
            if self._starting is None and not self.ended and not self.disconnected:
                self._start_owing_head(b"" if self._priming else sse.comment("open"))
        elif self._opener is None:
            self._opener = asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        if self._starting is None and not self.ended and not self.disconnected:
            try:
                await self.start(sse.comment("open"))
            except ServiceUnavailable as error:
                self._failure = error  # the next event or the answer raises it, as for a failed flush

    async def settle(self) -> None:
        """Before the edge ends the response itself: no start of ``open_soon`` may begin after this returns,
        and one under way has finished (``streaming`` tells whether the stream began; ``Response.started``, whether
        its head went out)."""
        if self._open_timer is not None:
            self._open_timer.cancel()
            self._open_timer = None
        opener, self._opener = self._opener, None
        if opener is not None and not opener.done():
            if self._starting is None:
                opener.cancel()
            else:
                with contextlib.suppress(Exception):
                    await asyncio.shield(opener)

    def stop_timers(self) -> None:
        """No more keep-alives or delayed start (the response ended, or the client went away)."""
        if self._open_timer is not None:
            self._open_timer.cancel()
            self._open_timer = None
        opener = self._opener
        # A start under way completes (``settle`` waits for it).
        if opener is not None and not opener.done() and opener is not asyncio.current_task() and self._starting is None:
            opener.cancel()
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None

    def _keep_alive(self) -> None:
        """A comment when nothing was sent for ``SSE_KEEPALIVE_SECONDS`` (a timer, re-armed: no task per stream)."""
        self._keeper = None
        if self.ended or self.disconnected or self._failure is not None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._sent_at >= self._keepalive_seconds:
            self._queue(sse.comment("keep-alive"))
            self._sent_at = loop.time()
        self._keeper = loop.call_at(self._sent_at + self._keepalive_seconds, self._keep_alive)

    @property
    def started(self) -> bool:
        """The stream began: its id is set, its head and priming event are out or owed to the first flush (see the
        class docstring), so events may follow."""
        return self._starting is not None and self._starting.is_set() and self.streaming

    async def _start(self, first: bytes) -> None:
        if self._session_key is not None:
            # Before any byte goes out: a resumable stream needs its store, and an unreachable one must be a 503
            # rather than a stream that breaks after its headers.
            await check_store()
        self.streaming = True
        await self._response.start_stream()
        self._begin(first)

    def _begin(self, first: bytes) -> None:
        """The stream's id, its priming event and ``first`` queued, keep-alives started."""
        self.stream_id, head = stream_head(self._session_key, self._kind, self._priming, first)
        if head:
            self._queue(head)
        loop = asyncio.get_running_loop()
        self._sent_at = loop.time()
        if self._kind == POST_STREAM:
            self._keepalive_seconds = float(mcp_settings.SSE_KEEPALIVE_SECONDS)
            self._keeper = loop.call_at(self._sent_at + self._keepalive_seconds, self._keep_alive)

    async def close_stream(self) -> bool:
        """End the response stream now while the call goes on (SEP-1699): it starts the stream if need be (so
        the client holds the priming event's id), ends the body, and from then on events wait in the event
        store and are published for a GET with ``Last-Event-ID``. Only resumable streams can be closed."""
        if not self.resumable or self.disconnected:
            return False
        await self.start()
        await self._drain(last=True)
        self.disconnected = True
        return True

    async def notify(self, message: dict[str, Any]) -> None:
        if not self._allow_stream:
            return
        if self._starting is None and self.resumable:
            self._start_owing_head()  # this event's append checks the store
        elif not self.started:
            await self.start()
        await self.event(message)

    async def event(self, message: Any) -> None:
        """Queue one SSE event for the flush of this turn (see the class docstring)."""
        if self._failure is not None:
            raise ServiceUnavailable() from self._failure
        if self.stream_id is None:
            self._queue(sse.event(message))
            return
        self.sequence += 1
        self._unstored.append((self.sequence, message))
        self._queue(sse.event(message, event_id=f"{self.stream_id}.{self.sequence}"))

    async def finish(self, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        await self.settle()
        self.stop_timers()
        if self._failure is not None and not self.streaming:
            raise ServiceUnavailable() from self._failure
        if self.streaming:
            if payload is not None:
                await self.event(payload)
            await self._drain(last=True)
        elif payload is None:
            await self._response.write(Answer(202))
        else:
            await self._response.write(Answer(status, payload), headers or ())

    def discard(self) -> None:
        """Drop what is not sent yet: the edge ends the response itself (a cancelled call, a lost layer)."""
        self._pending.clear()
        self._unstored.clear()
        self.ended = self._dropped = True
        self.stop_timers()
        if self._flusher is not None and not self._flushing:
            self._flusher.cancel()
            self._flusher = None

    # Coalescing ----------------------------------------------------------------------------------------

    def _queue(self, data: bytes) -> None:
        self._pending.append(data)
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        try:
            await self._flush(last=False)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # kept for the next event or the answer, which raise it
            self._failure = error
        finally:
            self._flusher = None

    async def _drain(self, *, last: bool) -> None:
        """Send what is pending now (after a flush that is already under way), then, if ``last``, end the body."""
        flusher = self._flusher
        if flusher is not None and self._flushing:
            await asyncio.shield(flusher)
        if self._failure is not None:
            raise ServiceUnavailable() from self._failure
        await self._flush(last=last)

    async def _flush(self, *, last: bool) -> None:
        if self._flushing and not last:
            return  # a flush is under way (the answer's, which overtook this one): it sends what is queued
        self._flushing = True
        try:
            while True:
                events, self._unstored = self._unstored, []
                data = b"".join(self._pending)
                self._pending.clear()
                if self._head_owed and not events:
                    await check_store()  # nothing to append stands for the store's check: check it on its own
                if events:
                    assert self.stream_id is not None
                    self._unstored_logged = await store_events(
                        self.stream_id, events, self._owner, self._unstored_logged
                    )
                    if self.disconnected:
                        try:
                            await self._publish(events)
                        except LAYER_ERRORS as error:
                            raise ServiceUnavailable() from error
                        data = b""
                if self._dropped:  # discarded while the store answered: the edge wrote (or writes) the end
                    return
                done = not self._pending and not self._unstored
                if last and done:
                    self.ended = True
                    self.stop_timers()
                if not self.disconnected and self._head_owed:
                    self._head_owed = False  # the store took this burst (or answered): the head may go
                    await self._response.start_stream()
                if not self.disconnected and (data or (last and done)):
                    self._sent_at = asyncio.get_running_loop().time()
                    await send_body(self._response.send, data, more_body=not (last and done))
                if done:
                    return
        finally:
            self._flushing = False

    async def _publish(self, events: list[tuple[int, Any]]) -> None:
        """The client went away: a reconnecting GET with ``Last-Event-ID`` follows the call's events here."""
        assert self.stream_id is not None
        layer = get_channel_layer()
        if layer is None:
            return
        for sequence, message in events:
            await layer.group_send(stream_group(self.stream_id), StreamEvent(sequence, message).to_wire())


class StreamTail:
    """What an idle stream (``transport.fanout``) writes its events with once its head is out: its ``send``, its id
    and last sequence (resumable: events are stored before they are sent, as ``ResponseWriter``'s are), whose
    bytes they count against. No timers, no coalescing of its own: its one writer hands it each burst whole."""

    __slots__ = ("_send", "_warned", "owner", "sequence", "stream_id")

    def __init__(self, send: Send, stream_id: str | None, sequence: int, owner: Owner | None) -> None:
        self._send = send
        self.stream_id = stream_id
        self.sequence = sequence
        self.owner = owner
        self._warned = False

    async def write(self, messages: list[Any]) -> None:
        """One ``http.response.body`` with ``messages`` as events (raises ``ServiceUnavailable``, nothing sent,
        when the store fails)."""
        stream_id = self.stream_id
        if stream_id is None:
            data = b"".join(sse.event(message) for message in messages)
        else:
            events = [(self.sequence + index, message) for index, message in enumerate(messages, 1)]
            self._warned = await store_events(stream_id, events, self.owner, self._warned)
            self.sequence = events[-1][0]
            data = b"".join(sse.event(message, event_id=f"{stream_id}.{sequence}") for sequence, message in events)
        await send_body(self._send, data, more_body=True)
