"""Long-lived SSE streams of one consumer: the GET stream, resumption by ``Last-Event-ID``, ``subscriptions/listen``.

``Streams.serve_get`` sends a GET stream's head (or its replay) and hands the stream, idle, to the process's
``transport.fanout``; ``listen`` and ``broadcast`` (an event for the open stream) serve ``subscriptions/listen``,
which re-checks its access at every keep-alive and on an invalidation that concerns it (``transport.watch``).
Design: docs/architecture.md ("SSE streams, resumption and cancellation").

Not here: authentication, Host/Origin, status codes of refusals before a stream (the edge), POST response
streams (``transport.writer``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from .. import PRODUCT_NAME, __version__
from ..conf import mcp_settings
from ..events import StreamEvent, server_group, session_group, stream_group
from ..protocol import versions
from ..protocol.context import OpenStream
from ..protocol.messages import list_changed
from ..protocol.serving import refusal
from . import sse
from .auth import AccessGrant
from .eventstore import GET_STREAM, POST_STREAM, get_event_store, parse_event_id, stream_kind
from .fanout import IdleStream, fan_out
from .membership import Membership
from .sessions import DatabaseSession
from .watch import Recheck, changed_lists, stream_tags, unwatch, watch
from .writer import Response, StreamTail, check_store, is_final, send_body, stream_head

logger = logging.getLogger("mcp_app.transport")


class Streams:
    """The long-lived stream of one consumer (at most one), writing through ASGI ``send``."""

    def __init__(self, response: Response, membership: Membership, recheck: Recheck | None = None) -> None:
        self._response = response
        self._membership = membership
        self._recheck = recheck
        self._grant: AccessGrant | None = None
        self.tags: tuple[str, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken = asyncio.Event()
        self._translate: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None  # listen's
        # Live events of a resumed POST stream, made by that stream only: an idle GET stream holds no queue.
        self._events: asyncio.Queue[StreamEvent] | None = None

    async def _body(self, body: bytes, *, more_body: bool = True) -> None:
        await send_body(self._response.send, body, more_body=more_body)

    # Events from the channel layer -------------------------------------------------------------------

    async def broadcast(self, event: dict[str, Any]) -> None:
        """A notification for the server's streams (``events.Broadcast``), as ``subscriptions/listen`` translates
        it. (An idle GET stream hears them in ``transport.fanout``.)"""
        if not self._membership.groups or self._translate is None:
            return
        outgoing = self._translate(event)
        if outgoing is not None:
            await self._body(sse.event(outgoing))

    async def stream_event(self, event: StreamEvent) -> None:
        if self._events is not None:
            self._events.put_nowait(event)

    # The streams ---------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Re-check access soon (thread-safe: invalidations arrive on the log follower's thread)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._woken.set)

    def _watch(self, grant: AccessGrant, session: DatabaseSession | None) -> None:
        if self._recheck is None:
            return
        self._grant = grant
        self.tags = stream_tags(grant, session)
        self._loop = asyncio.get_running_loop()
        watch(self)

    async def listen(self, grant: AccessGrant, stream: OpenStream) -> None:
        """``subscriptions/listen``: acknowledge, then forward this server's events until the client leaves."""
        self._translate = stream.translate
        group = server_group(grant.server.pk)
        self._watch(grant, None)
        await self._membership.join(group)
        await self._response.start_stream()
        for message in stream.first:
            await self._body(sse.event(message))
        await self._keep_alive(group)

    async def serve_get(
        self, grant: AccessGrant, session: DatabaseSession | None, headers: dict[str, str]
    ) -> IdleStream | None:
        """The GET stream's head (``: ready``, or the replay of a resumed GET stream), then the stream handed to
        the fan-out, idle (returned; the caller gives it its slots and waits for its client to leave). A resumed
        POST stream or a refusal is served here to its end (``None``)."""
        resume: tuple[str, int] | None = None
        last_event_id = headers.get("last-event-id")
        if last_event_id is not None and session is not None:
            resume = parse_event_id(last_event_id, session.key)
            if resume is None:
                await self._response.write(refusal(400, "Last-Event-ID does not name an event of this session."))
                return None
            if stream_kind(resume[0]) == POST_STREAM:
                await self._resume_post_stream(*resume)
                return None
        groups: tuple[str, ...] = (server_group(grant.server.pk),)
        if session is not None:
            groups += (session_group(session.key),)
        stream = IdleStream(self._response, grant, session, self._recheck, groups)
        fanout = fan_out()
        # Join before announcing readiness: a client that edits the catalog on ": ready" must get the event.
        await fanout.add(stream)
        try:
            if resume is None:
                if session is not None:
                    await check_store()  # before any byte: an unreachable store is a 503, not a broken stream
                primes = session is not None and session.protocol_version >= versions.V2025_11_25
                stream_id, head = stream_head(
                    session.key if session is not None else None, GET_STREAM, primes, sse.comment("ready")
                )
                await self._response.start_stream()
                await self._body(head)
                sequence = 0
            else:
                # Resuming this GET stream: replay what was missed under the same ids, then carry on as that stream.
                await self._response.start_stream()
                await self._body(sse.comment("resumed"))
                stream_id, sequence = resume
                for sequence, message in await get_event_store().after(*resume):
                    await self._body(sse.event(message, event_id=f"{stream_id}.{sequence}"))
        except BaseException:
            await stream.close()
            raise
        stream.release(
            StreamTail(self._response.send, stream_id, sequence, (grant.token.tenant_pk, grant.token.agent_pk))
        )
        return stream

    async def _resume_post_stream(self, stream_id: str, after: int) -> None:
        """Replay a POST response stream after ``after``, then follow its live events until the response."""
        events: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self._events = events
        await self._membership.join(stream_group(stream_id))  # listen first: no event falls between the two
        await self._response.start_stream()
        # Bytes at once: the client learns now that it is resumed (headers alone are not flushed by daphne).
        await self._body(sse.comment("resumed"))
        last = after
        kept = await get_event_store().after(stream_id, after)
        if kept and kept[0][0] > after + 1:
            # The store's bound dropped the oldest events: say so rather than replay with a silent gap.
            await self._body(sse.comment(f"events {after + 1}-{kept[0][0] - 1} of this stream were dropped"))
        for sequence, message in kept:
            last = sequence
            if await self._relay(stream_id, sequence, message):
                return
        # Its producer may be gone (the process died): after SSE_RESUME_IDLE_SECONDS without an event the
        # stream ends, and the client resumes again from its last id (SSE polling, 2025-11-25). Never a hang.
        interval = float(mcp_settings.SSE_KEEPALIVE_SECONDS)
        idle_limit = float(mcp_settings.SSE_RESUME_IDLE_SECONDS)
        heard = time.monotonic()
        while True:
            try:
                wait = max(0.0, min(interval, idle_limit - (time.monotonic() - heard)))
                event = await asyncio.wait_for(events.get(), timeout=wait)
            except TimeoutError:
                if time.monotonic() - heard >= idle_limit:
                    await self._body(b"", more_body=False)
                    return
                await self._body(sse.comment("keep-alive"))
                continue
            heard = time.monotonic()
            if event.sequence > last:
                last = event.sequence
                if await self._relay(stream_id, last, event.message):
                    return

    async def _relay(self, stream_id: str, sequence: int, message: Any) -> bool:
        """One event of a resumed POST stream; whether it was the answer, which ends the stream."""
        await self._body(sse.event(message, event_id=f"{stream_id}.{sequence}"))
        if is_final(message):
            await self._body(b"", more_body=False)
        return is_final(message)

    async def _keep_alive(self, group: str) -> None:
        interval = float(mcp_settings.SSE_KEEPALIVE_SECONDS)
        try:
            while True:
                woken = False
                try:
                    await asyncio.wait_for(self._woken.wait(), timeout=interval)
                    woken = True
                except TimeoutError:
                    pass
                self._woken.clear()
                if not await self._still_allowed():
                    await self._body(b"", more_body=False)
                    return
                if not woken:
                    await self._body(sse.comment("keep-alive"))
                    # Refreshes membership, so layers that expire groups keep streams.
                    await self._membership.join(group)
        finally:
            unwatch(self)

    async def _still_allowed(self) -> bool:
        """Check access again; announce the lists the caller's grant now shows differently."""
        if self._recheck is None or self._grant is None:
            return True
        try:
            grant = await self._recheck()
        except Exception:
            # Nothing said no (the database is unreachable, say): the stream stays, and is re-checked again at
            # the next keep-alive or invalidation.
            logger.warning("could not re-check an open stream's access; it stays open", exc_info=True)
            return True
        if grant is None:
            return False
        for kind in changed_lists(self._grant, grant):
            await self.broadcast(list_changed(kind))
        self._grant = grant
        return True


def endpoint_description(grant: AccessGrant) -> dict[str, Any]:
    """What a GET without ``Accept: text/event-stream`` answers: the product, the server, the transport."""
    server = grant.server
    return {
        "name": PRODUCT_NAME,
        "version": __version__,
        "server": {"serverId": server.server_id, "name": server.name, "title": server.title, "version": server.version},
        "transport": "streamable-http",
        "protocolVersions": list(versions.HANDSHAKE_VERSIONS),
        "tools": len(grant.catalog.tools),
    }
