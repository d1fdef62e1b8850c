"""The proxied call's client side, layer by layer, in one process (issue 27): CPU per call of each layer.

``bench.upstreams`` measures daphne as a whole; this takes apart what a proxied call costs the process that
relays it. It starts the federation tests' real upstream (``tests/federation/upstream_server.py``, ``--mode
stateful``) and, in this process (Django set up from ``DJANGO_SETTINGS_MODULE``, default ``mcp_host.settings``,
loopback allowed by ``MCP_OUTBOUND_ALLOWED_NETWORKS``), makes sequential warm calls of the upstream's ``echo``
through each layer, from everything mcp-host does down to the bare socket:

- **federation**: ``mcp_app.federation.calls.call_tool``, what the runner calls (breaker, pool, turn, relay,
  the SDK call, the result's dump and stamp), for a 2026-07-28 client;
- **sdk**: ``session.call_tool`` on the same pooled connection (the official SDK client over mcp-host's guarded
  ``httpx2`` client), as ``calls`` makes it;
- **sdk, plain httpx2**: the same SDK call over a plain ``httpx2.AsyncClient`` (no SSRF guard, no hooks);
- **httpx2 POST, guarded** / **plain**: one hand-written 2026-07-28 ``tools/call`` POST, no MCP client;
- **raw socket**: the same request as one write on a kept-alive asyncio stream, the answer read by its
  ``Content-Length`` and parsed with ``orjson`` (what a relay costs without an HTTP library: the floor); and
  again in two writes, headers then body, as httpcore2 sends a request (what the split costs both ends).

Each of ``--rounds`` rounds runs ``--samples`` calls of each layer (after ``--warmup``), the order rotated every
round; it reports the median over rounds of the CPU time per call of this process (``time.process_time``) and
of the upstream (``/proc/<pid>/stat``), and the wall time. ``--profile FILE`` then runs the federation layer
under cProfile with a CPU clock and prints its CPU by package. Every wait is bounded; the upstream is stopped.

    env -u DATABASE_URL -u REDIS_URL nice python -m bench.upstream_client --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import os
import pstats
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.run import HOST, ROOT, free_port, process_cpu_seconds
from bench.upstreams import READY_TIMEOUT_S, STOP_TIMEOUT_S, TEXT

MODERN = "2026-07-28"
Call = Callable[[], Awaitable[None]]


def _request(url: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": TEXT},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "bench.upstream_client", "version": "1"},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    return body, headers


def _check(text: Any) -> None:
    if text != TEXT:
        sys.exit(f"echo answered {text!r}")


async def _layers(url: str, stack: contextlib.AsyncExitStack) -> dict[str, Call]:
    import httpx2
    import orjson
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcp_app.definitions.upstreams import UpstreamEndpoint, UpstreamToolTarget
    from mcp_app.federation import calls
    from mcp_app.federation.pool import pool
    from mcp_app.outbound import upstream_http_client

    endpoint = UpstreamEndpoint(pk=1, tenant_id=1, name="bench-upstream", url=url, revision="bench")
    target = UpstreamToolTarget(endpoint=endpoint, remote_name="echo")
    session = (await pool().connection(endpoint)).client.session
    # What ``calls`` reads of a call: a 2026-07-28 client that declares nothing and asked for no logs.
    request = SimpleNamespace(era=MODERN, principal=None, log_level=None, client_declares=lambda capability: False)
    call: Any = SimpleNamespace(request=request, input_responses=None, progress=None, log=None)
    body, headers = _request(url)
    guarded = await stack.enter_async_context(upstream_http_client(headers={}, timeout=30, connect_timeout=5))
    plain = await stack.enter_async_context(httpx2.AsyncClient(timeout=30))
    sdk_plain = await stack.enter_async_context(
        Client(streamable_http_client(url, http_client=plain), mode=MODERN, read_timeout_seconds=30)
    )
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    stream: list[Any] = list(await asyncio.open_connection(host, int(port)))  # reopened when the upstream
    stack.callback(lambda: stream[1].close())  # closed it (idle between rounds past uvicorn's keep-alive)
    payload = orjson.dumps(body)
    head = "".join(f"{name}: {value}\r\n" for name, value in {**headers, "Host": f"{host}:{port}"}.items())
    raw_head = f"POST /mcp HTTP/1.1\r\n{head}Content-Length: {len(payload)}\r\n\r\n".encode()

    async def federation() -> None:
        answer = await calls.call_tool(target, "up_echo", {"text": TEXT}, call, deadline_seconds=None, state=None)
        _check(answer["content"][0]["text"])  # type: ignore[index]

    async def sdk() -> None:
        result: Any = await session.call_tool("echo", {"text": TEXT}, allow_input_required=True)
        _check(result.content[0].text)

    async def sdk_plain_httpx2() -> None:
        result: Any = await sdk_plain.session.call_tool("echo", {"text": TEXT}, allow_input_required=True)
        _check(result.content[0].text)

    def post(client: Any) -> Call:
        async def one() -> None:
            reply = await client.post(url, json=body, headers=headers)
            _check(reply.json()["result"]["content"][0]["text"])

        return one

    def raw(writes: tuple[bytes, ...]) -> Call:
        async def one() -> None:
            if stream[0].at_eof():
                stream[1].close()
                stream[:] = await asyncio.open_connection(host, int(port))
            reader, writer = stream
            for data in writes:  # an empty socket buffer: each write is one send(2) at once
                writer.write(data)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            _check(orjson.loads(await reader.readexactly(length))["result"]["content"][0]["text"])

        return one

    return {
        "federation: calls.call_tool": federation,
        "sdk: session.call_tool, pooled": sdk,
        "sdk: session.call_tool, plain httpx2": sdk_plain_httpx2,
        "httpx2 POST, guarded": post(guarded),
        "httpx2 POST, plain": post(plain),
        "raw socket POST + orjson": raw((raw_head + payload,)),
        "raw socket POST + orjson, headers and body in two writes (as httpcore2)": raw((raw_head, payload)),
    }


async def _measure(layers: dict[str, Call], upstream: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    for call in layers.values():
        for _ in range(args.warmup):
            await call()
    per_round: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    names = list(layers)
    for number in range(args.rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            own, wall, other = time.process_time(), time.perf_counter(), process_cpu_seconds(upstream) or 0.0
            for _ in range(args.samples):
                await layers[name]()
            per_round[name].append(
                (
                    (time.process_time() - own) / args.samples * 1000,
                    ((process_cpu_seconds(upstream) or 0.0) - other) / args.samples * 1000,
                    (time.perf_counter() - wall) / args.samples * 1000,
                )
            )
    return {
        name: {
            key: statistics.median(row[index] for row in rows)
            for index, key in enumerate(("cpu_ms", "upstream_cpu_ms", "wall_ms"))
        }
        for name, rows in per_round.items()
    }


def _package(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if "mcp_app/" in filename:
        return "mcp_app/" + filename.split("mcp_app/", 1)[1].split("/", 1)[0]
    if "/lib/python3." in filename:
        return "stdlib " + filename.split("/lib/python3.", 1)[1].split("/")[1].removesuffix(".py")
    return "builtins (C)" if filename == "~" else filename


async def _profile(layers: dict[str, Call], samples: int, out: Path) -> None:
    federation = layers["federation: calls.call_tool"]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for _ in range(samples):
        await federation()
    profiler.disable()
    profiler.dump_stats(out)
    stats = pstats.Stats(str(out))
    by_package: collections.Counter[str] = collections.Counter()
    for (filename, _line, _name), row in stats.stats.items():  # type: ignore[attr-defined]
        by_package[_package(filename)] += row[2]
    total = sum(by_package.values())
    print(f"\ncProfile (CPU clock) of {samples} federation calls, self time by package:")
    for package, seconds in by_package.most_common(14):
        print(f"  {seconds / total * 100:5.1f} %  {package}")


async def _run(url: str, upstream: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from mcp_app.federation.pool import close

    async with contextlib.AsyncExitStack() as stack:
        layers = await _layers(url, stack)
        try:
            results = await _measure(layers, upstream, args)
            if args.profile:
                await _profile(layers, args.samples, args.profile)
        finally:
            await close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300, help="calls of each layer per round (default 300)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--profile", type=Path, metavar="FILE", help="then cProfile the federation layer into FILE")
    args = parser.parse_args()
    if not 1 <= args.samples <= 100_000 or not 1 <= args.rounds <= 100 or not 0 <= args.warmup <= 10_000:
        parser.error("bounds: 1 <= --samples <= 100000, 1 <= --rounds <= 100, 0 <= --warmup <= 10000")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
    os.environ["MCP_OUTBOUND_ALLOWED_NETWORKS"] = HOST
    import django

    django.setup()
    port = free_port()
    argv = [sys.executable, "-m", "tests.federation.upstream_server", "--port", str(port), "--mode", "stateful"]
    upstream = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
                break
            if time.monotonic() > deadline or upstream.poll() is not None:
                sys.exit("the upstream did not start")
            time.sleep(0.05)
        results = asyncio.run(_run(f"http://{HOST}:{port}/mcp", upstream.pid, args))
    finally:
        upstream.terminate()
        try:
            upstream.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            upstream.kill()
            upstream.wait(timeout=STOP_TIMEOUT_S)
    print(f"\n| layer ({args.rounds} rounds x {args.samples} calls, medians) | CPU per call | upstream CPU | wall |")
    print("|---|---:|---:|---:|")
    for name, row in results.items():
        print(f"| {name} | {row['cpu_ms']:.3f} ms | {row['upstream_cpu_ms']:.3f} ms | {row['wall_ms']:.3f} ms |")


if __name__ == "__main__":
    main()
