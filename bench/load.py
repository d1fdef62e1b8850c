"""Closed-loop HTTP load generator for the MCP endpoint (and the baseline app); prints one JSON line.

``--concurrency N`` workers each keep one keep-alive connection and send the scenario's request back to back
until ``--requests`` responses have come in (all workers together) or ``--duration`` seconds have passed. Each
latency is measured from just before the request is written to the end of its response body. A response counts
as ok when it is HTTP 200 and a JSON-RPC result; any other status, a JSON-RPC error, an unreadable body, a
timeout or a connection failure counts as an error (and the worker reconnects). ``rps`` counts ok responses.

Scenarios (all call the demo ``echo`` tool with ``{"text": "hi"}``, no session, no ``initialize``):

- ``legacy``: handshake-era ``tools/call`` with ``MCP-Protocol-Version: 2025-11-25``;
- ``modern``: 2026-07-28 ``tools/call`` with the ``_meta`` envelope and ``MCP-Protocol-Version``,
  ``Mcp-Method``, ``Mcp-Name`` headers;
- ``session``: the ``legacy`` request on a session (``initialize`` + ``notifications/initialized`` first); with
  ``--session-per-worker`` (what ``bench.run`` does) each worker has a session of its own, as concurrent
  clients do, otherwise all share one;
- ``baseline``: the ``legacy`` request, posted to ``bench/baseline_app.py``.

Two client implementations (``--client``): ``raw`` (default) writes a pre-encoded HTTP/1.1 request on an
asyncio stream and parses the response by hand; ``httpx`` uses ``httpx.AsyncClient``. Measured against the
baseline app on the 2-core machine of docs/performance.md, httpx spends 3-6 ms of CPU per request, 10-30 times the
raw client and more than the daphne it measures, so the raw client is the default: where client and server share
the cores, every client cycle is taken from the server. The JSON line reports the client's own CPU per request
(``client_cpu_us_per_req``) so that this can be checked on any run.

Only loopback targets are accepted, and runs are bounded (``MAX_DURATION_S``, ``MAX_REQUESTS``).

    python -m bench.load --url 'http://127.0.0.1:8000/mcp/demo?agentId=demo-agent' --token mcp_… \
        --scenario modern --concurrency 16 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

SCENARIOS = ("legacy", "session", "modern", "baseline")
CLIENTS = ("raw", "httpx")
LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
MAX_DURATION_S = 300.0
MAX_REQUESTS = 2_000_000
MAX_CONCURRENCY = 1024
REQUEST_TIMEOUT_S = 30.0
MAX_ERROR_SAMPLES = 5

ECHO_ARGUMENTS = {"text": "hi"}


@dataclass(frozen=True)
class Target:
    """Where to send what: one fixed request, repeated."""

    host: str
    port: int
    path: str  # path and query string
    headers: tuple[tuple[str, str], ...]
    body: bytes
    progress_steps: int = 0  # > 0: a tools/call of progress_demo; its answer must carry that many progress events

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def encode(self) -> bytes:
        """The whole HTTP/1.1 request, encoded once and written as is by the raw client."""
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines += [f"Content-Length: {len(self.body)}", "", ""]
        return "\r\n".join(lines).encode("latin-1") + self.body


def loopback_parts(url: str) -> Any:
    """``urlsplit(url)``, refusing anything but a loopback http URL."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    if parts.hostname != "localhost" and not ipaddress.ip_address(parts.hostname).is_loopback:
        raise ValueError(f"benchmarks only target loopback addresses, got {parts.hostname!r}")
    return parts


def build_target(url: str, token: str | None, scenario: str, progress_steps: int = 0) -> Target:
    """The request of ``scenario`` for ``url``; refuses anything but a loopback http URL.

    ``progress_steps`` > 0 calls ``progress_demo`` with that many steps and a ``progressToken`` instead of
    ``echo`` (the SSE runs); the response must then be a stream carrying that many progress notifications.
    """
    parts = loopback_parts(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    tool = "progress_demo" if progress_steps else "echo"
    params: dict[str, Any] = {
        "name": tool,
        "arguments": {"steps": progress_steps} if progress_steps else ECHO_ARGUMENTS,
    }
    if progress_steps:
        params["_meta"] = {"progressToken": "p"}
    headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
    if token:
        headers.append(("Authorization", f"Bearer {token}"))
    if scenario in ("legacy", "baseline"):
        headers.append(("MCP-Protocol-Version", LEGACY_VERSION))
    elif scenario == "session":
        headers += [("MCP-Protocol-Version", LEGACY_VERSION), ("Mcp-Session-Id", open_session(parts, path, headers))]
    elif scenario == "modern":
        params["_meta"] = {
            **params.get("_meta", {}),
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers += [("MCP-Protocol-Version", MODERN_VERSION), ("Mcp-Method", "tools/call"), ("Mcp-Name", tool)]
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    return Target(
        host=parts.hostname,
        port=parts.port or 80,
        path=path,
        headers=tuple(headers),
        body=body,
        progress_steps=progress_steps,
    )


def open_session(parts: Any, path: str, headers: list[tuple[str, str]]) -> str:
    """``initialize`` once (handshake era), send ``notifications/initialized`` (the SDK refuses requests on a
    session before it), and return the ``Mcp-Session-Id`` every request then carries."""
    import http.client

    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        }
    )
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    try:
        connection.request("POST", path, body=body, headers=dict(headers))
        response = connection.getresponse()
        response.read()
        session_id = response.getheader("mcp-session-id")
    finally:
        connection.close()
    if response.status != 200 or not session_id:
        raise RuntimeError(f"initialize answered {response.status} without a session id")
    initialized = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    try:
        session_headers = {**dict(headers), "MCP-Protocol-Version": LEGACY_VERSION, "Mcp-Session-Id": session_id}
        connection.request("POST", path, body=initialized, headers=session_headers)
        answer = connection.getresponse()
        answer.read()
    finally:
        connection.close()
    if answer.status not in (200, 202):
        raise RuntimeError(f"notifications/initialized answered {answer.status}")
    return session_id


def sse_messages(body: bytes) -> list[Any]:
    """The JSON ``data:`` payloads of an SSE body (events of one data line each, as MCP servers send them)."""
    messages = []
    for line in body.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload:
                messages.append(orjson.loads(payload))
    return messages


def response_error(status: int, body: bytes, progress_steps: int = 0) -> str | None:
    """Why a response is not a success, or ``None`` when it is HTTP 200 carrying a JSON-RPC result.

    The body is either one JSON object or an SSE stream (``event:``/``data:`` lines) whose last message is the
    result; with ``progress_steps`` it must be a stream with at least that many ``notifications/progress``.
    """
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    try:
        messages = [orjson.loads(body)] if body[:1] in (b"{", b"[") else sse_messages(body)
    except orjson.JSONDecodeError:
        return f"unreadable body: {body[:200]!r}"
    if not messages:
        return f"no message in the body: {body[:200]!r}"
    message = messages[-1]
    if not isinstance(message, dict) or "error" in message or "result" not in message:
        return f"JSON-RPC error: {body[-300:]!r}"
    if progress_steps:
        progress = sum(
            1 for item in messages if isinstance(item, dict) and item.get("method") == "notifications/progress"
        )
        if progress < progress_steps:
            return f"{progress} progress notifications instead of {progress_steps}: {body[:200]!r}"
    return None


# Clients -----------------------------------------------------------------------------------------------------

Exchange = Callable[[], Awaitable[tuple[int, bytes]]]


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and the (lower-cased) headers of an HTTP/1.1 response."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


class RawConnection:
    """One keep-alive HTTP/1.1 connection that writes a pre-encoded request and parses the response by hand."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._request = target.encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def exchange(self) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._target.host, self._target.port)
        assert self._reader is not None
        try:
            self._writer.write(self._request)
            status, body, keep_alive = await self._read_response(self._reader)
        except BaseException:
            await self.close()
            raise
        if not keep_alive:
            await self.close()
        return status, body

    @staticmethod
    async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
        status, headers = await read_head(reader)
        keep_alive = headers.get("connection", "").lower() != "close"
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                        pass
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            return status, b"".join(chunks), keep_alive
        if "content-length" in headers:
            return status, await reader.readexactly(int(headers["content-length"])), keep_alive
        return status, await reader.read(), False  # delimited by the end of the connection

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class HttpxPool:
    """``httpx.AsyncClient`` with one keep-alive connection per worker."""

    def __init__(self, target: Target, concurrency: int) -> None:
        import httpx

        self._target = target
        self._headers = dict(target.headers)
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            timeout=REQUEST_TIMEOUT_S,
        )

    async def exchange(self) -> tuple[int, bytes]:
        response = await self._client.post(self._target.url, content=self._target.body, headers=self._headers)
        return response.status_code, response.content

    async def close(self) -> None:
        await self._client.aclose()


# Idle GET streams (the memory measurement) ---------------------------------------------------------------


class IdleStreams:
    """``count`` sessions, each with its standalone GET stream held open and idle.

    Each session is one ``initialize`` plus ``notifications/initialized`` on a keep-alive connection (closed
    afterwards), then a GET on a connection of its own with ``Accept: text/event-stream`` and the session id.
    A stream counts as open once its response head is HTTP 200, or, for a server that sends its head only with
    a first event (the SDK), when the connection is still open ``HEAD_WAIT_S`` after the GET was written.
    ``open()`` runs ``parallel`` at a time; ``close()`` closes every connection.
    """

    HEAD_WAIT_S = 2.0

    def __init__(self, url: str, token: str | None, count: int, parallel: int = 32) -> None:
        self._parts = loopback_parts(url)
        self._path = (self._parts.path or "/") + (f"?{self._parts.query}" if self._parts.query else "")
        self._token = token
        self._count = count
        self._parallel = parallel
        self._writers: list[asyncio.StreamWriter] = []
        self.opened = 0
        self.with_head = 0
        self.failures: list[str] = []

    def _headers(self, session_id: str | None) -> list[str]:
        lines = [f"Host: {self._parts.hostname}:{self._parts.port}", f"MCP-Protocol-Version: {LEGACY_VERSION}"]
        if self._token:
            lines.append(f"Authorization: Bearer {self._token}")
        if session_id:
            lines.append(f"Mcp-Session-Id: {session_id}")
        return lines

    def _post(self, message: dict[str, Any], session_id: str | None) -> bytes:
        body = orjson.dumps(message)
        lines = [f"POST {self._path} HTTP/1.1", *self._headers(session_id)]
        lines += ["Content-Type: application/json", "Accept: application/json, text/event-stream"]
        lines += [f"Content-Length: {len(body)}", "", ""]
        return "\r\n".join(lines).encode("latin-1") + body

    async def _one(self) -> None:
        host, port = self._parts.hostname, self._parts.port or 80
        reader, writer = await asyncio.open_connection(host, port)
        try:
            initialize = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            }
            writer.write(self._post(initialize, None))
            status, headers, _body = await _read_whole(reader)
            session_id = headers.get("mcp-session-id")
            if status != 200 or not session_id:
                raise RuntimeError(f"initialize answered {status} without a session id")
            writer.write(self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id))
            status, _headers, _body = await _read_whole(reader)
            if status not in (200, 202):
                raise RuntimeError(f"notifications/initialized answered {status}")
        finally:
            writer.close()
        reader, writer = await asyncio.open_connection(host, port)
        self._writers.append(writer)
        lines = [f"GET {self._path} HTTP/1.1", *self._headers(session_id), "Accept: text/event-stream", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1"))
        try:
            status, _headers = await asyncio.wait_for(read_head(reader), self.HEAD_WAIT_S)
        except TimeoutError:
            if reader.at_eof():
                raise RuntimeError("the GET stream was closed without an answer") from None
            self.opened += 1  # no head yet, connection open: the stream waits for its first event
            return
        if status != 200:
            raise RuntimeError(f"GET answered {status}")
        self.with_head += 1
        self.opened += 1

    async def open(self) -> None:
        gate = asyncio.Semaphore(self._parallel)

        async def guarded() -> None:
            async with gate:
                try:
                    await asyncio.wait_for(self._one(), REQUEST_TIMEOUT_S)
                except Exception as exc:  # a refused session or stream counts, and is reported
                    if len(self.failures) < MAX_ERROR_SAMPLES:
                        self.failures.append(f"{type(exc).__name__}: {exc}")

        await asyncio.gather(*(guarded() for _ in range(self._count)))

    def still_open(self) -> int:
        """How many of the stream connections the server has not closed."""
        return sum(1 for writer in self._writers if not writer.is_closing() and not writer.transport.is_closing())

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        for writer in self._writers:
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        self._writers.clear()


async def _read_whole(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One whole response (``Content-Length``, chunked, or, for a 202 without either, no body)."""
    status, headers = await read_head(reader)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        return status, headers, b"".join(chunks)
    return status, headers, await reader.readexactly(int(headers.get("content-length", "0")))


# The run -----------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the workers observed during the measured phase."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def error(self, reason: str) -> None:
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(reason)


class Budget:
    """Hands out permission to start a request until the count or the deadline is reached."""

    def __init__(self, requests: int | None, deadline: float | None) -> None:
        self._left = requests
        self._deadline = deadline

    def take(self) -> bool:
        if self._deadline is not None and time.perf_counter() >= self._deadline:
            return False
        if self._left is not None:
            if self._left <= 0:
                return False
            self._left -= 1
        return True


async def worker(exchange: Exchange, budget: Budget, tally: Tally | None, progress_steps: int = 0) -> None:
    """Send requests back to back while the budget allows; record into ``tally`` (``None`` while warming up)."""
    perf_counter = time.perf_counter
    while budget.take():
        started = perf_counter()
        try:
            status, body = await asyncio.wait_for(exchange(), REQUEST_TIMEOUT_S)
        except Exception as exc:  # timeouts, connection errors, malformed responses, httpx's own errors
            if tally is not None:
                tally.error(f"{type(exc).__name__}: {exc}")
            continue
        elapsed = perf_counter() - started
        if tally is None:
            continue
        problem = response_error(status, body, progress_steps)
        if problem is None:
            tally.latencies.append(elapsed)
        else:
            tally.error(problem)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence (``nan`` when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def _ms(seconds: float) -> float | None:
    """Milliseconds for the JSON line (``null`` instead of NaN, which JSON does not have)."""
    return None if math.isnan(seconds) else round(seconds * 1000, 3)


class Meter(Protocol):
    """Something read just before and just after the measured phase (e.g. a server's CPU time)."""

    def start(self) -> None: ...

    def stop(self) -> dict[str, Any]:
        """Fields to add to the summary."""
        ...


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(
    target: Target,
    *,
    scenario: str,
    client: str,
    concurrency: int,
    requests: int | None,
    duration: float | None,
    warmup: float,
    meters: Sequence[Meter] = (),
    worker_targets: Sequence[Target] | None = None,
) -> dict[str, Any]:
    """Warm up for ``warmup`` seconds on the same connections, then measure; return the summary.

    ``meters`` are started right before the first measured request and stopped right after the last response.
    ``worker_targets`` (raw client only) gives each worker its own request (e.g. its own session).
    """
    if client == "raw":
        targets = list(worker_targets) if worker_targets else [target] * concurrency
        connections = [RawConnection(worker_target) for worker_target in targets]
        exchanges: list[Exchange] = [connection.exchange for connection in connections]
        closers = [connection.close for connection in connections]
    else:
        pool = HttpxPool(target, concurrency)
        exchanges = [pool.exchange] * concurrency
        closers = [pool.close]
    try:
        if warmup > 0:
            warm = Budget(None, time.perf_counter() + warmup)
            await asyncio.gather(*(worker(exchange, warm, None, target.progress_steps) for exchange in exchanges))
        tally = Tally()
        for meter in meters:
            meter.start()
        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        budget = Budget(requests, started + duration if duration is not None else None)
        await asyncio.gather(*(worker(exchange, budget, tally, target.progress_steps) for exchange in exchanges))
        elapsed = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu_before
        metered = {key: value for meter in meters for key, value in meter.stop().items()}
    finally:
        for close in closers:
            await close()
    latencies = sorted(tally.latencies)
    completed = len(latencies) + tally.errors
    return {
        "scenario": scenario,
        "client": client,
        "concurrency": concurrency,
        "elapsed_s": round(elapsed, 3),
        "requests": completed,
        "ok": len(latencies),
        "errors": tally.errors,
        "rps": round(len(latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": _ms(percentile(latencies, 0.50)),
        "p90_ms": _ms(percentile(latencies, 0.90)),
        "p99_ms": _ms(percentile(latencies, 0.99)),
        "max_ms": _ms(latencies[-1] if latencies else math.nan),
        "client_cpu_us_per_req": round(cpu / completed * 1e6, 1) if completed else None,
        "client_cpu_pct": round(cpu / elapsed * 100, 1) if elapsed > 0 else 0.0,
        "client_cpu_s": round(cpu, 4),
        "error_samples": tally.error_samples,
        **metered,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", required=True, help="endpoint URL, e.g. http://127.0.0.1:8000/mcp/demo?agentId=…")
    parser.add_argument("--token", default=None, help="agent token (sent as Authorization: Bearer)")
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--client", choices=CLIENTS, default="raw", help="HTTP client implementation (default raw)")
    parser.add_argument("--concurrency", type=int, default=1, help="workers, one connection each (default 1)")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--requests", type=int, help="stop after this many responses in all")
    amount.add_argument("--duration", type=float, help="stop starting requests after this many seconds")
    parser.add_argument("--warmup", type=float, default=0.0, help="unmeasured seconds first (default 0)")
    parser.add_argument("--session-per-worker", action="store_true", help="session scenario: one session per worker")
    args = parser.parse_args(argv)
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        parser.error(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
    if args.requests is not None and not 1 <= args.requests <= MAX_REQUESTS:
        parser.error(f"--requests must be between 1 and {MAX_REQUESTS}")
    if args.duration is not None and not 0 < args.duration <= MAX_DURATION_S:
        parser.error(f"--duration must be in (0, {MAX_DURATION_S:g}]")
    if not 0 <= args.warmup <= MAX_DURATION_S:
        parser.error(f"--warmup must be in [0, {MAX_DURATION_S:g}]")
    if args.scenario != "baseline" and not args.token:
        parser.error(f"--token is required for the {args.scenario} scenario")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = build_target(args.url, args.token, args.scenario)
    except ValueError as exc:
        print(f"load: {exc}", file=sys.stderr)
        return 2
    summary = asyncio.run(
        run(
            target,
            scenario=args.scenario,
            client=args.client,
            concurrency=args.concurrency,
            requests=args.requests,
            duration=args.duration,
            warmup=args.warmup,
            worker_targets=[build_target(args.url, args.token, args.scenario) for _ in range(args.concurrency)]
            if args.session_per_worker and args.scenario == "session"
            else None,
        )
    )
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
