"""Kept-alive HTTP/1.1 connections to one upstream, for ``fastcall``: asyncio streams, no HTTP library.

``Links(url, ...)`` is the pool of one pooled upstream ``Connection``: ``acquire()`` a ``Link`` (an idle one if the
server has not closed it, else a new one), ``release(link)`` once its reply was read whole (kept if there is room,
else closed), ``close()`` with the connection. A new link connects like ``outbound.GuardedBackend``: only to the
addresses ``netguard.resolve_checked`` accepted for the URL's host (never to the name again; a refused host raises
``netguard.ForbiddenAddress`` before any socket opens), TLS verifying the URL's host with ``outbound.ssl_context()``.
``read_head``/``read_body``/``body_chunks`` read one reply: its status and headers, then its body as its framing
says (``Content-Length``, chunked, or up to the end of the connection). Nothing here follows a redirect.

Not here: what is sent or how a reply is understood (``fastcall``), when the pool closes (``pool.Connection``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .. import outbound
from ..netguard import resolve_checked
from ..sockets import readable

# A reply's status line and headers together; more is not an MCP server's answer.
MAX_HEAD_BYTES = 64 * 1024
_STREAM_LIMIT = 256 * 1024


class WireError(Exception):
    """The reply broke HTTP/1.1 framing, or the connection ended inside it."""


@dataclass(eq=False)
class Link:
    """One connection: its streams, and when it was last handed back."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self) -> bool:
        """Whether nothing says the server closed it. The loop reads a FIN that came while the link was idle, but
        one that came since the loop last polled is only in the socket: an idle HTTP/1.1 link has nothing to read,
        so a readable socket is a closed one (or a server sending what nobody asked for). httpcore checks the same
        before it reuses a connection."""
        if self.reader.at_eof() or self.writer.is_closing() or self.reader.exception() is not None:
            return False
        sock = self.writer.get_extra_info("socket")
        return sock is None or not readable(sock.fileno())

    def close(self) -> None:
        transport = self.writer.transport
        if not transport.is_closing():
            transport.abort()  # no TLS goodbye: the link is dropped, not ended politely


class Links:
    """The kept-alive connections of one upstream URL (the module docstring)."""

    def __init__(self, url: str, *, max_idle: int, idle_seconds: float, connect_timeout: float) -> None:
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default_port = self.port == (443 if self.tls else 80)
        self.authority = shown if default_port else f"{shown}:{self.port}"
        self._max_idle, self._idle_seconds, self._connect_timeout = max_idle, idle_seconds, connect_timeout
        self._idle: list[Link] = []
        self.closed = False

    async def acquire(self) -> Link:
        """An idle link the server has not closed (the newest first), else a new one. Raises
        ``ForbiddenAddress``, ``OSError`` or ``TimeoutError`` (the connect timeout)."""
        now = time.monotonic()
        while self._idle:
            link = self._idle.pop()
            if link.usable() and now - link.idle_since < self._idle_seconds:
                return link
            link.close()
        return await self._connect()

    def release(self, link: Link) -> None:
        """Keep ``link`` for the next call (its reply was read whole and the server keeps it alive)."""
        if self.closed or not link.usable() or len(self._idle) >= self._max_idle:
            link.close()
            return
        link.idle_since = time.monotonic()
        self._idle.append(link)

    def close(self) -> None:
        """Close the idle links; a link in use is closed when it is released."""
        self.closed = True
        idle, self._idle = self._idle, []
        for link in idle:
            link.close()

    async def _connect(self) -> Link:
        addresses = await resolve_checked(
            self.host, self.port, outbound.allowed_networks("upstream"), outbound.resolver
        )
        failure: Exception | None = None
        for address in addresses:
            try:
                # The checked address itself, never the name again; TLS still verifies the URL's host.
                async with asyncio.timeout(self._connect_timeout):
                    reader, writer = await asyncio.open_connection(
                        str(address),
                        self.port,
                        ssl=outbound.ssl_context() if self.tls else None,
                        server_hostname=self.host if self.tls else None,
                        limit=_STREAM_LIMIT,
                    )
            except (OSError, TimeoutError) as exc:
                failure = exc
                continue
            return Link(reader, writer)
        assert failure is not None
        raise failure


# Reading one reply ------------------------------------------------------------------------------------------------


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and headers (names lowercased; repeated ones joined by ``, ``) of the next final reply
    (``1xx`` interim replies are skipped)."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            raise WireError("the connection ended before a reply") from exc
        except asyncio.LimitOverrunError as exc:
            raise WireError("the reply's headers are too large") from exc
        if len(head) > MAX_HEAD_BYTES:
            raise WireError("the reply's headers are too large")
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise WireError("not an HTTP/1.1 reply")
        status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, colon, value = line.partition(":")
            if not colon:
                raise WireError("a malformed header line")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if 100 <= status < 200 and status != 101:
            continue
        return status, headers


def keeps_alive(headers: dict[str, str]) -> bool:
    """Whether the server keeps the connection open after this reply (HTTP/1.1's default)."""
    return "close" not in headers.get("connection", "").lower()


def _length(headers: dict[str, str]) -> int | None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return None
    text = headers.get("content-length")
    if text is None:
        return -1  # to the end of the connection
    if not text.isdigit():
        raise WireError("a malformed Content-Length")
    return int(text)


async def body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    """The reply's body as it arrives, to its last byte (which leaves the link at the next reply)."""
    length = _length(headers)
    try:
        if length is None:
            while True:
                size_line = await reader.readuntil(b"\r\n")
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError as exc:
                    raise WireError("a malformed chunk size") from exc
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the blank line
                        pass
                    return
                chunk = await reader.readexactly(size + 2)
                yield chunk[:-2]
        elif length >= 0:
            while length > 0:
                chunk = await reader.read(min(length, _STREAM_LIMIT))
                if not chunk:
                    raise WireError("the connection ended inside the reply")
                length -= len(chunk)
                yield chunk
        else:
            while chunk := await reader.read(_STREAM_LIMIT):
                yield chunk
    except asyncio.IncompleteReadError as exc:
        raise WireError("the connection ended inside the reply") from exc
    except asyncio.LimitOverrunError as exc:
        raise WireError("a malformed chunk") from exc


class TooLarge(Exception):
    """The body went past the bound it was read with."""


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str], limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes (``TooLarge``; refused from ``Content-Length`` before reading)."""
    length = _length(headers)
    if length is not None and length > limit:
        raise TooLarge(f"the reply is larger than {limit} bytes")
    if length is not None and length >= 0:
        try:
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            raise WireError("the connection ended inside the reply") from exc
    parts: list[bytes] = []
    seen = 0
    async for chunk in body_chunks(reader, headers):
        seen += len(chunk)
        if seen > limit:
            raise TooLarge(f"the reply is larger than {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)
