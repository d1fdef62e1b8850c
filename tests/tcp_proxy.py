"""A TCP proxy a test controls, in front of a real service (PostgreSQL), to make it fail the ways networks do.

``TcpProxy(target_host, target_port)`` listens on a free 127.0.0.1 port (``port``) and runs its own asyncio loop
in a thread. Its modes:

- ``forward()``: bytes flow both ways (the start);
- ``refuse()``: the listening socket is closed and every open connection is reset: new connections are refused,
  as by a server that is down;
- ``stall()``: a partition: new connections are accepted and never answered, open ones stop carrying bytes
  (what arrives is held, nothing is sent on). ``forward()`` lets held bytes go on and listens again.

Not owned here: what the service behind it does, and the assertions of the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

CHUNK = 65536


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    # Control, from the test's thread ------------------------------------------------------------------------

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self.forward()
        return self

    def __exit__(self, *exc: object) -> None:
        self.refuse()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    def forward(self) -> None:
        self._run(self._forward())

    def refuse(self) -> None:
        self._run(self._refuse())

    def stall(self) -> None:
        self._run(self._stall())

    # In the proxy's loop -----------------------------------------------------------------------------------

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)

    async def _forward(self) -> None:
        await self._listen()
        self._flowing.set()

    async def _stall(self) -> None:
        await self._listen()
        self._flowing.clear()

    async def _refuse(self) -> None:
        self._flowing.clear()
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            transport = writer.transport
            with contextlib.suppress(Exception):
                sock = transport.get_extra_info("socket")
                if sock is not None:  # SO_LINGER 0: a reset, not a polite close
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            transport.abort()
        self._writers.clear()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._writers.add(client_writer)
        await self._flowing.wait()  # a partition: accepted, never answered
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.add(upstream_writer)
        await asyncio.gather(
            self._pump(client_reader, upstream_writer),
            self._pump(upstream_reader, client_writer),
            return_exceptions=True,
        )
        for writer in (client_writer, upstream_writer):
            self._writers.discard(writer)
            writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(CHUNK):
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
        writer.transport.abort()
