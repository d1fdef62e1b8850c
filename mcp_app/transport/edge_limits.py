"""Limits daphne (Twisted) applies before the application sees a request, with proper HTTP answers.

``channel_class()`` builds ``LimitedHTTPChannel``, a subclass of Twisted's ``HTTPChannel`` that answers 414, 431,
400 and 408 itself (a JSON-RPC error body and ``Connection: close``), bounds what daphne writes (an idle timeout
that counts inactivity, ``MAX_PENDING_BYTES``, superseded progress coalesced for a slow reader) and gives
descriptors back under pressure. ``twisted_compat.install`` installs it behind ``MCP_APP["EDGE_LIMITS"]`` when the
private names listed here (``CHANNEL_INTERNALS``, ``CHANNEL_METHODS``, ``TRANSPORT_BUFFERS``) are there.
Design: docs/robustness.md ("Limits in front of the application"); descriptors: docs/limits.md.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

import orjson

from ..conf import mcp_settings
from ..protocol import errors
from . import sse
from .coalescing import Backlog

logger = logging.getLogger("mcp_app.transport.edge_limits")

# After a refusal, input is read and dropped for this long (at most this much) before the connection closes.
LINGER_SECONDS = 2.0
LINGER_MAX_BYTES = 8 * 1024 * 1024
# Answers that close their connection under descriptor pressure, and how often idle connections are swept then.
CLOSING_STATUSES = frozenset({401, 429, 503})
PRESSURE_CHECK_SECONDS = 0.5
PRESSURE_IDLE_SECONDS = 2.0
REASONS = {400: b"Bad Request", 408: b"Request Timeout", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}
# The private parts of Twisted's HTTPChannel the edge limits rely on, and the methods they override.
CHANNEL_INTERNALS = (
    "_receivedHeaderSize",
    "_handlingRequest",
    "_HTTPChannel__first_line",
    "length",
    "requests",
    "line_mode",
    "_buffer",
    "persistent",
)
CHANNEL_METHODS = (
    "lineReceived",
    "lineLengthExceeded",
    "allHeadersReceived",
    "allContentReceived",
    "rawDataReceived",
    "timeoutConnection",
    "writeSequence",
    "writeHeaders",
    "pauseProducing",
    "resumeProducing",
    "resetTimeout",
    "requestDone",
)
# The buffers of Twisted's transports (``abstract.FileDescriptor``) that hold what is written but not yet sent.
TRANSPORT_BUFFERS = ("dataBuffer", "offset", "_tempDataBuffer", "_tempDataLen")
# What may start a request line: a method is a token (RFC 9110 §5.6.2); a CR may precede it (a stray CRLF).
_REQUEST_START = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\r")


def error_response(status: int, message: str) -> bytes:
    body = orjson.dumps(errors.error_response(None, errors.InvalidRequest(message)))
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return head % (status, REASONS[status], len(body)) + body


_PENDING = "The client did not read its answer fast enough: the connection is closed (MAX_PENDING_BYTES)."
PENDING_ERROR = sse.error_event(errors.error_response(None, errors.InternalError(_PENDING)))


def _chunk_body(sequence: list[bytes]) -> bytes | None:
    """The data of one chunk as Twisted's ``Request.write`` frames it (``toChunk``), else ``None``."""
    if len(sequence) == 4 and sequence[1] == sequence[3] == b"\r\n" and len(sequence[0]) <= 16:
        return sequence[2]
    return None


class _Collector:
    """Stands in for the transport while Twisted writes a response head that must wait its turn."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def writeSequence(self, parts: list[bytes]) -> None:
        self.parts.extend(parts)


def channel_class() -> type:
    """``LimitedHTTPChannel``, the subclass of Twisted's ``HTTPChannel`` with the limits of the module docstring."""
    from twisted.web import http

    # Typed as Any: this class works with Twisted's private internals (name-mangled attributes, the transport
    # before it is set, ``callLater`` of the channel) that its type hints do not describe; the version guard and
    # the internals test pin them instead.
    from ..limits.caps import descriptors_short

    base: Any = http.HTTPChannel
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor  # the installed reactor (daphne's); its module-level type is not its own
    # The open connections of the process; when descriptors were last counted (and idle connections closed),
    # whether they were short, and the recount scheduled while they are.
    channels: weakref.WeakSet[Any] = weakref.WeakSet()
    pressure: dict[str, Any] = {"checked": 0.0, "swept": 0.0, "short": False, "recount": None}

    def under_pressure(fresh: bool = False) -> bool:
        """Whether descriptors are short (counted at most every PRESSURE_CHECK_SECONDS unless ``fresh``). While
        they are, they are counted again every PRESSURE_CHECK_SECONDS, and the keep-alive connections idle for
        PRESSURE_IDLE_SECONDS are closed."""
        now = time.monotonic()
        if fresh or now - pressure["checked"] >= PRESSURE_CHECK_SECONDS:
            pressure["checked"], pressure["short"] = now, descriptors_short()
            if pressure["short"] and now - pressure["swept"] >= PRESSURE_CHECK_SECONDS:
                pressure["swept"] = now
                idle = [channel for channel in channels if channel._mcp_idle(now)]
                if idle:
                    logger.warning("descriptors short: closing %d idle keep-alive connections", len(idle))
                for channel in idle:
                    channel.transport.loseConnection()
            if pressure["short"] and pressure["recount"] is None:
                pressure["recount"] = reactor.callLater(PRESSURE_CHECK_SECONDS, recount)
        return bool(pressure["short"])

    def recount() -> None:
        pressure["recount"] = None
        under_pressure(fresh=True)

    class LimitedHTTPChannel(base):
        """``HTTPChannel`` with the limits of the module docstring."""

        _mcp_refused = False
        _mcp_body_bytes = 0
        _mcp_deadline: Any = None  # the request deadline's timer, kept between requests and pushed back by each
        _mcp_receiving = False  # a request's first byte arrived, its last one not yet
        _mcp_deadline_seconds = 0.0  # the deadline of the request being received

        _mcp_discarded = 0
        _mcp_written = 0  # bytes handed to the transport
        _mcp_sent_at_timeout = 0  # bytes the client had read when the idle timer last fired
        _mcp_cut = False
        _mcp_backlog = False  # the transport paused this channel: the client is not keeping up
        _mcp_served_at: float | None = None  # when its last request was answered (an idle keep-alive since)

        def connectionMade(self) -> None:
            self._mcp_held = Backlog()  # what is held back while the client is not keeping up
            self.timeOut = float(mcp_settings.IDLE_TIMEOUT_SECONDS)
            self.abortTimeout = LINGER_SECONDS
            super().connectionMade()
            channels.add(self)
            under_pressure()

        def _mcp_idle(self, now: float) -> bool:
            """A keep-alive connection between requests for PRESSURE_IDLE_SECONDS (a client reusing it at once
            is not cut as it sends its next request)."""
            served = self._mcp_served_at
            return served is not None and now - served >= PRESSURE_IDLE_SECONDS and not self.requests

        def requestDone(self, request: Any) -> None:
            super().requestDone(request)
            self._mcp_served_at = time.monotonic() if not self.requests else None

        def _mcp_unsent(self) -> int:
            """Bytes written to the transport but not yet taken by the kernel; 0 if unknown (TLS)."""
            transport = self.transport
            try:
                return int(len(transport.dataBuffer) - transport.offset + transport._tempDataLen)
            except (AttributeError, TypeError):
                return 0

        def _mcp_pending(self) -> int:
            """Bytes the client has not read yet that daphne holds: the transport's and the backlog's."""
            return self._mcp_unsent() + self._mcp_held.size

        # Coalescing for a slow consumer (docs/robustness.md) -----------------------------------------------

        def pauseProducing(self) -> None:
            self._mcp_backlog = True
            super().pauseProducing()

        def resumeProducing(self) -> None:
            self._mcp_backlog = False
            super().resumeProducing()
            parts = self._mcp_held.release()
            if parts:
                self._mcp_send(super().writeSequence, parts, parts, None)

        def _mcp_holding(self, chunk: bytes | None) -> bool:
            """Hold these bytes back: something is held already (order), or a stream's chunk meets a backlog."""
            return bool(self._mcp_held) or (chunk is not None and self._mcp_backlog and self._mcp_streaming())

        def _mcp_streaming(self) -> bool:
            """The response under way is a stream (chunked): what grows without end, unlike a JSON answer."""
            request = self.requests[0] if self.requests else None
            return request is not None and bool(getattr(request, "chunked", False))

        def writeHeaders(self, version: bytes, code: bytes, reason: bytes, headers: Any) -> None:
            this: Any = self  # ``persistent`` is Twisted's (public, untyped)
            status = int(code)
            # A 503 is counted afresh: the descriptor guard's own refusal must close its connection.
            if status in CLOSING_STATUSES and this.persistent and under_pressure(fresh=status == 503):
                # Twisted keeps a connection alive whatever the answer says: not persistent, it closes once sent.
                this.persistent = False
                headers.setRawHeaders(b"Connection", [b"close"])  # the request's ``responseHeaders``
            if self._mcp_held:  # a pipelined request's answer: after what is held
                channel: Any = self  # the transport swapped for a moment: its type is not the transport's
                transport, collected = channel.transport, _Collector()
                channel.transport = collected
                try:
                    super().writeHeaders(version, code, reason, headers)
                finally:
                    channel.transport = transport
                self._mcp_held.hold(b"".join(collected.parts), False)
                return
            super().writeHeaders(version, code, reason, headers)

        def write(self, data: bytes) -> None:
            self._mcp_send(super().write, data, [data], None)

        def writeSequence(self, sequence: Any) -> None:
            sequence = list(sequence)
            self._mcp_send(super().writeSequence, sequence, sequence, _chunk_body(sequence))

        def _mcp_send(self, forward: Any, payload: Any, parts: list[bytes], chunk: bytes | None) -> None:
            """``forward(payload)`` (``parts`` are its bytes, ``chunk`` the data of a body chunk), or hold it while
            the client is not keeping up; nothing once the connection was cut."""
            if self._mcp_cut:
                return
            if self._mcp_holding(chunk):
                self._mcp_held.hold(b"".join(parts) if chunk is None else chunk, chunk is not None)
            else:
                forward(payload)
                self._mcp_written += sum(len(part) for part in parts)
            self._mcp_check_pending()

        def _mcp_check_pending(self) -> None:
            if self._mcp_pending() <= mcp_settings.MAX_PENDING_BYTES or not self._mcp_streaming():
                return
            logger.warning(
                "a client is not reading its answer: %d bytes pending, connection ended", self._mcp_pending()
            )
            self._mcp_cut = True  # from now on the application's writes are dropped
            self._mcp_held = Backlog()
            if self.requests[0].startedWriting:
                # One more chunk of the response under way, past the override (which drops writes now).
                super().write(b"%x\r\n%s\r\n" % (len(PENDING_ERROR), PENDING_ERROR))
            self.transport.loseConnection()
            self._mcp_linger = self.callLater(LINGER_SECONDS, self.transport.abortConnection)

        def timeoutConnection(self) -> None:
            # Idle means nothing received and nothing read: a client still draining a long answer is not idle.
            sent = self._mcp_written - self._mcp_unsent()
            if self._mcp_pending() > 0 and sent > self._mcp_sent_at_timeout:
                self._mcp_sent_at_timeout = sent
                self.resetTimeout()
                return
            super().timeoutConnection()

        def _mcp_refuse(self, status: int, message: str) -> None:
            if self._mcp_refused:
                return
            self._mcp_refused = True
            self._mcp_disarm()
            self.transport.write(error_response(status, message))
            # Lingering close: a client still sending its body would get a reset instead of the answer if the
            # connection closed now. Read and drop what follows for a moment (never more than
            # LINGER_MAX_BYTES), then close.
            self._mcp_linger = self.callLater(LINGER_SECONDS, self.transport.loseConnection)

        def _mcp_disarm(self) -> None:
            self._mcp_receiving = False
            if self._mcp_deadline is not None and self._mcp_deadline.active():
                self._mcp_deadline.cancel()
            self._mcp_deadline = None

        def _mcp_arm(self) -> None:
            """A request's first byte: answer 408 unless its last one arrives within REQUEST_DEADLINE_SECONDS.
            One timer per connection, pushed back by each request (``reset`` to a later time is arithmetic; a new
            timer and a cancelled one per request cost the reactor two reschedules); when it fires between
            requests it does nothing and lapses."""
            self._mcp_receiving = True
            seconds = self._mcp_deadline_seconds = float(mcp_settings.REQUEST_DEADLINE_SECONDS)
            deadline = self._mcp_deadline
            if deadline is not None and deadline.active():
                deadline.reset(seconds)
            else:
                self._mcp_deadline = self.callLater(seconds, self._mcp_expired)

        def _mcp_expired(self) -> None:
            self._mcp_deadline = None
            if self._mcp_receiving:
                seconds = self._mcp_deadline_seconds
                self._mcp_refuse(408, f"The request was not received within {seconds:g} seconds.")

        def dataReceived(self, data: bytes) -> None:
            if self._mcp_refused:
                self._mcp_discarded += len(data)
                if self._mcp_discarded > LINGER_MAX_BYTES:
                    self.transport.loseConnection()
                return
            if not self._mcp_receiving and not self._handlingRequest:
                self._mcp_arm()
            super().dataReceived(data)
            if not self._mcp_refused and self.line_mode and not self._handlingRequest and self._buffer:
                self._mcp_check_partial_line(self._buffer)

        def _mcp_check_partial_line(self, pending: bytes) -> None:
            """Refuse at once what can never become a request line or header (Twisted would wait for a CRLF
            until the deadline): bytes no request starts with, or a line ended by a bare LF."""
            if self._HTTPChannel__first_line and pending[0] not in _REQUEST_START:
                self._mcp_refuse(400, "This is not an HTTP/1.1 request (TLS to a plain-HTTP port?).")
            elif b"\n" in pending:
                self._mcp_refuse(400, "Lines of a request must end with CRLF, not a bare LF.")

        def lineReceived(self, line: bytes) -> None:
            if self._mcp_refused:
                return
            line_too_long = self._HTTPChannel__first_line and len(line) > mcp_settings.MAX_REQUEST_LINE_BYTES
            if line_too_long or self._receivedHeaderSize + len(line) > mcp_settings.MAX_HEADER_BYTES:
                self._mcp_too_long(line_too_long)
                return
            super().lineReceived(line)

        def lineLengthExceeded(self, line: bytes) -> None:
            self._mcp_too_long(self._HTTPChannel__first_line)

        def _mcp_too_long(self, request_line: bool) -> None:
            if request_line:
                self._mcp_refuse(414, f"The request line exceeds {mcp_settings.MAX_REQUEST_LINE_BYTES} bytes.")
            else:
                self._mcp_refuse(431, f"The request headers exceed {mcp_settings.MAX_HEADER_BYTES} bytes.")

        def allHeadersReceived(self) -> None:
            request = self.requests[-1]
            hosts = request.requestHeaders.getRawHeaders(b"host") or []
            if len(hosts) > 1:
                self._mcp_refuse(400, "A request must carry exactly one Host header.")
                return
            if not hosts and getattr(self, "_version", None) == b"HTTP/1.1":
                self._mcp_refuse(400, "An HTTP/1.1 request must carry a Host header.")
                return
            limit = mcp_settings.MAX_BODY_BYTES
            if self.length is not None and self.length > limit:
                self._mcp_refuse(400, f"Request body exceeds {limit} bytes.")
                return
            self._mcp_body_bytes = 0
            super().allHeadersReceived()

        def rawDataReceived(self, data: bytes) -> None:
            if self._mcp_refused:
                return
            if not self._handlingRequest:
                self._mcp_body_bytes += len(data)
                # Chunk framing counts too; allow it a little room over the limit on the decoded body.
                if self._mcp_body_bytes > mcp_settings.MAX_BODY_BYTES + 64 * 1024:
                    self._mcp_refuse(400, f"Request body exceeds {mcp_settings.MAX_BODY_BYTES} bytes.")
                    return
            super().rawDataReceived(data)

        def allContentReceived(self) -> None:
            self._mcp_receiving = False  # the deadline's timer stays for the next request (``_mcp_arm``)
            if self._mcp_refused:
                return  # refused on its headers: the request never reaches daphne
            super().allContentReceived()

        def connectionLost(self, reason: Any) -> None:
            channels.discard(self)
            self._mcp_disarm()
            linger = getattr(self, "_mcp_linger", None)
            if linger is not None and linger.active():
                linger.cancel()
            super().connectionLost(reason)
            self._mcp_drop_unsent()

        def _mcp_drop_unsent(self) -> None:
            """Free what a lost connection never sent, now. Twisted leaves it on the transport, which the channel,
            the request and the application reference in a cycle: an aborted unread answer would stay in memory
            until the garbage collector's next full pass (tens of MiB under a client that never reads)."""
            self._mcp_held = Backlog()
            transport = self.transport
            if all(hasattr(transport, name) for name in TRANSPORT_BUFFERS):
                transport.dataBuffer, transport.offset = b"", 0
                transport._tempDataBuffer, transport._tempDataLen = [], 0

    return LimitedHTTPChannel
