"""A 2026-07-28 upstream whose every byte a test decides: for the wire behaviour of the fast path (``fastcall``).

``ScriptedUpstream()`` (a context manager) listens on a free 127.0.0.1 port and serves HTTP/1.1 with keep-alive in
a loop of its own thread. It answers ``server/discover`` (no ``listChanged``: no subscription is held open) and
``tools/list`` (``TOOLS``, no output schema) itself; a ``tools/call`` of tool ``T`` is answered by ``answers[T]``,
a function of the request's JSON-RPC message returning the raw reply bytes (``json_reply``, ``sse_reply``), or
``echo``'s result. Special answers: ``HANG`` holds the reply until the client closes the connection (recorded in
``hung_up``), ``CLOSE`` closes the connection without a reply. With ``close_after_reply`` set, each connection is
closed after its reply although the reply said nothing of it (an upstream that drops kept-alive connections).

What it saw: ``seen`` (each request's connection number, headers and JSON body, in order), ``connections`` (how
many were accepted), ``open_connections()`` and ``open_numbers()``.

Not here: a real MCP server (``tests/federation/upstream_server.py``), anything about mcp-host.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

MODERN = "2026-07-28"
PATH = "/mcp"
TOOLS = [
    {"name": name, "description": f"{name}, scripted", "inputSchema": {"type": "object"}}
    for name in ("echo", "answer", "hang", "close")
]
HANG = "hang"
CLOSE = "close"
Answer = Callable[[dict[str, Any]], bytes]


def json_reply(message: dict[str, Any], *, status: int = 200, chunked: bool = False) -> bytes:
    """An ``application/json`` reply carrying ``message``, with ``Content-Length`` or chunked in two chunks."""
    body = orjson.dumps(message)
    if not chunked:
        head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        return head.encode() + body
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]))
    head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    return head.encode() + chunks + b"0\r\n\r\n"


def sse_reply(messages: list[dict[str, Any]]) -> bytes:
    """A chunked ``text/event-stream`` reply: a comment, then one event per message (one chunk each)."""
    events = [b": keep-alive\r\n\r\n"] + [b"event: message\r\ndata: %s\r\n\r\n" % orjson.dumps(m) for m in messages]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n"


def result(message: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The response to ``message``: ``value`` as a complete result unless it says otherwise."""
    return {"jsonrpc": "2.0", "id": message["id"], "result": {"resultType": "complete", **value}}


def text_result(message: dict[str, Any], text: str) -> dict[str, Any]:
    return result(message, {"content": [{"type": "text", "text": text}], "isError": False})


@dataclass
class Seen:
    connection: int
    headers: dict[str, str]
    message: dict[str, Any]


class ScriptedUpstream:
    def __init__(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}{PATH}"
        self.answers: dict[str, Answer] = {}
        self.close_after_reply = False
        self.seen: list[Seen] = []
        self.connections = 0
        self.hung_up = threading.Event()
        self._open: dict[asyncio.StreamWriter, int] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-upstream", daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def drop_connections(self) -> None:
        """Close every open connection now, returning once their sockets are closed (blocking the caller's loop)."""
        asyncio.run_coroutine_threadsafe(self._drop(), self._loop).result(timeout=10)

    async def _drop(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def calls(self) -> list[Seen]:
        """The ``tools/call`` requests seen, in order."""
        return [seen for seen in list(self.seen) if seen.message.get("method") == "tools/call"]

    def open_connections(self) -> int:
        return len(self._open)

    def open_numbers(self) -> set[int]:
        """The numbers of the connections still open."""
        return set(self._open.values())

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        self._open[writer] = number
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                message = orjson.loads(body) if body else {}
                self.seen.append(Seen(number, headers, message))
                reply = await self._reply(message, reader)
                if reply is None:
                    return
                writer.write(reply)
                await writer.drain()
                if self.close_after_reply:
                    return
        finally:
            writer.transport.abort()
            with contextlib.suppress(OSError):
                await writer.wait_closed()  # the socket is closed (its FIN sent) before it stops counting as open
            self._open.pop(writer, None)

    async def _reply(self, message: dict[str, Any], reader: asyncio.StreamReader) -> bytes | None:
        method = message.get("method")
        if method == "server/discover":
            return json_reply(
                result(
                    message,
                    {
                        "capabilities": {"tools": {}},
                        "supportedVersions": [MODERN],
                        "resultType": "complete",
                        "ttlMs": 0,
                        "cacheScope": "private",
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "1"}},
                    },
                )
            )
        if method == "tools/list":
            listed = {"tools": TOOLS, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
            return json_reply(result(message, listed))
        if method != "tools/call":
            return json_reply({"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32601, "message": "no"}})
        name = message["params"]["name"]
        if name == HANG:
            with contextlib.suppress(ConnectionError):
                await reader.read()  # the client's end of the connection
            self.hung_up.set()
            return None
        if name == CLOSE:
            return None
        answer = self.answers.get(name)
        if answer is not None:
            return answer(message)
        return json_reply(text_result(message, str((message["params"].get("arguments") or {}).get("text", ""))))
