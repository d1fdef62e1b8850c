"""A proxied upstream call against calling the upstream directly, in the same run (issue 18): latency and CPU.

Needs ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL``. It starts, as child processes on 127.0.0.1, the federation
tests' real upstream (``tests/federation/upstream_server.py``: the official SDK's ``MCPServer`` under uvicorn,
``--mode stateful``, whose ``echo(text)`` tool returns its text) and one daphne (``mcp_host.asgi``) allowed to
reach loopback (``MCP_OUTBOUND_ALLOWED_NETWORKS=127.0.0.1``). It migrates the database, runs ``mcp_demo --json``
for a token, and registers the upstream for the demo tenant with the prefix ``up_`` (the ORM through
``manage.py shell``: ``Upstream`` saved, ``sync_upstream``, ``bind`` to ``demo-modern``), so the demo agent can
call ``up_echo``. Then it measures ``--samples`` sequential warm calls of each of:

- **direct** (the floor): ``echo`` on the upstream with the official SDK client (``mcp.Client``, 2026-07-28, the
  era mcp-host's own pooled client negotiates with this upstream), one client connected once and called again
  and again;
- **proxied**: ``up_echo`` on ``demo-modern`` through daphne with the same SDK client setup (one client);
- **local**: the demo's own ``echo`` (an inline Python tool) on the same server and daphne, SDK client: mcp-host's
  call path without federation, so proxied - local is what federating costs on top of any call;
- **proxied, bare HTTP**: the same call as one hand-written 2026-07-28 ``tools/call`` POST (``httpx``, keep-alive),
  which leaves out the SDK client's own cost on the client side;
- **direct, bare HTTP**: the same POST to the upstream, the floor without the SDK client.

The samples of the five are interleaved in blocks of ``--block`` calls (the order rotated each round), after
``--warmup`` unmeasured calls of each, so a noisy machine's drift falls on all five alike. Every answer is checked
(the text back, and the ``dev.mcp-host/upstream`` ``_meta`` on proxied answers only). For each it reports
median and p99 latency, and the CPU time per call of this process (the client: ``time.process_time``), of
daphne and of the upstream (Linux ``/proc/<pid>/stat``, utime + stime, all threads), read around every block;
then what mcp-host adds (proxied - direct, median and p99; CPU per call of all three processes), the ratio
proxied / direct, and issue 27's figures: proxied against its two hops (own ``echo`` + direct bare POST) and
daphne's CPU per proxied call over its CPU per own ``echo``. As a check of the pool (a warm proxied call must neither connect nor re-initialize), it
counts the TCP connections to the upstream's port that were closed while the proxied calls ran (sockets in
TIME_WAIT, ``/proc/net/tcp``); one connection per call would show there, and as upstream CPU per call well
above the direct calls'.

With ``--profile DIR`` it then samples daphne with py-spy (raw folded stacks, ``--profile-seconds`` each, into
``DIR/daphne-proxied.txt`` and ``DIR/daphne-local.txt``) while one SDK client makes proxied, then local, calls,
unmeasured; ``--profile-gil`` samples only the thread holding the GIL. ``bench.upstream_client`` takes the
relaying side apart layer by layer in one process. Prints a markdown table; ``--json-out`` writes the raw figures. ``DJANGO_SETTINGS_MODULE`` (default
``mcp_host.settings``) is passed on, so a settings module of one's own can measure a variant (the breakers off,
say). Every wait is bounded; children are stopped (SIGTERM, then SIGKILL) at the end.

    DATABASE_URL=postgres://…/bench REDIS_URL=redis://127.0.0.1:6379/5 nice python -m bench.upstreams
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.run import HOST, ROOT, free_port, manage, process_cpu_seconds, tail

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
CALL_TIMEOUT_S = 30.0
MODERN = "2026-07-28"
SERVER = "demo-modern"
UPSTREAM_NAME = "bench-upstream"
PREFIX = "up_"
TEXT = "hello"
UPSTREAM_META = "dev.mcp-host/upstream"  # in a proxied result's _meta (mcp_app.federation.calls.META_KEY)
VARIANTS = ("direct", "proxied", "local", "proxied_http", "direct_http")
LABELS = {
    "direct": "direct: `echo` on the upstream, SDK client (the floor)",
    "proxied": "proxied: `up_echo` through mcp-host, SDK client",
    "local": "mcp-host's own `echo` (inline Python tool), SDK client",
    "proxied_http": "proxied: `up_echo` through mcp-host, bare HTTP POST",
    "direct_http": "direct: `echo` on the upstream, bare HTTP POST",
}


def environment() -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "mcp_host.settings"),
        "PYTHONUNBUFFERED": "1",
        # The upstream listens on loopback, which the SSRF guard refuses unless allow-listed.
        "MCP_OUTBOUND_ALLOWED_NETWORKS": HOST,
        # One agent drives every call: the default rates (200/s per agent) would measure the limiter's 429s.
        "MCP_RATE_LIMIT_PER_TENANT": "0",
        "MCP_RATE_LIMIT_PER_AGENT": "0",
    }
    env.setdefault("MCP_CHANNEL_PREFIX", "bench-upstreams")
    if not env.get("DATABASE_URL") or not env.get("REDIS_URL"):
        sys.exit("bench.upstreams needs DATABASE_URL (PostgreSQL) and REDIS_URL")
    return env


def _register(env: dict[str, str], url: str) -> dict[str, Any]:
    """Register (or re-point) the demo tenant's upstream at ``url``, sync it, bind it whole to ``demo-modern``."""
    code = (
        "import json\n"
        "from mcp_app.federation.sync import bind, sync_upstream\n"
        "from mcp_app.models import McpServer, Tenant, Upstream\n"
        "tenant = Tenant.objects.get(slug='demo')\n"
        f"server = McpServer.objects.get(server_id={SERVER!r})\n"
        f"upstream = Upstream.objects.filter(tenant=tenant, name={UPSTREAM_NAME!r}).first()\n"
        f"upstream = upstream or Upstream(tenant=tenant, name={UPSTREAM_NAME!r})\n"
        f"upstream.url, upstream.prefix = {url!r}, {PREFIX!r}\n"
        "upstream.save()\n"
        "report = sync_upstream(upstream)\n"
        "skipped = bind(upstream, server) if report.ok else []\n"
        "print(json.dumps({**report.as_dict(), 'bind_skipped': skipped}))\n"
    )
    out = json.loads(manage(env, "shell", "-c", code).strip().splitlines()[-1])
    if not out["ok"]:
        sys.exit(f"the upstream's sync failed: {out['error']}")
    return dict(out)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def _child(name: str, argv: list[str], env: dict[str, str], port: int, logs: Path) -> Iterator[int]:
    """``argv`` running in a session of its own until it listens on ``port`` (bounded); its pid. Stopped on exit."""
    log_path = logs / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                sys.exit(f"{name} did not start:\n{tail(log_path)}")
            time.sleep(0.05)
        yield process.pid
    finally:
        _stop(process)


def _closed_connections(port: int) -> int:
    """Sockets in TIME_WAIT (state 06) with ``port`` at either end: connections to it closed in the last minute."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                ports = {int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)}
                if fields[3] == "06" and port in ports:
                    count += 1
    return count


# The four callers: each an async callable making one call and checking its answer -------------------------------


@contextlib.asynccontextmanager
async def _sdk(url: str, headers: dict[str, str], tool: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """One official SDK client, connected once in the 2026-07-28 era; yields a caller of ``tool``."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_S) as http,
        Client(streamable_http_client(url, http_client=http), mode=MODERN, read_timeout_seconds=CALL_TIMEOUT_S) as c,
    ):
        if c.protocol_version != MODERN:
            sys.exit(f"the SDK client negotiated {c.protocol_version} with {url}, not {MODERN}")

        async def call() -> None:
            result = await c.call_tool(tool, {"text": TEXT})
            text = getattr(result.content[0], "text", None) if result.content else None
            proxied = UPSTREAM_META in (result.meta or {})
            if result.is_error or text != TEXT or proxied != tool.startswith(PREFIX):
                sys.exit(f"{tool} answered {result!r}")

        yield call


@contextlib.asynccontextmanager
async def _bare(url: str, headers: dict[str, str], tool: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """One keep-alive HTTP client POSTing a hand-written 2026-07-28 ``tools/call`` of ``tool``."""
    headers = {
        **headers,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench.upstreams", "version": "1"},
    }
    counter = iter(range(1, 1 << 30))
    async with httpx.AsyncClient(timeout=CALL_TIMEOUT_S) as http:

        async def call() -> None:
            request_id = next(counter)
            body = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": TEXT}, "_meta": meta},
            }
            reply = await http.post(url, headers=headers, json=body)
            answer = reply.text.replace(" ", "")
            proxied = f'"{UPSTREAM_META}"' in answer
            if reply.status_code != 200 or f'"text":"{TEXT}"' not in answer or proxied != tool.startswith(PREFIX):
                sys.exit(f"{tool} over HTTP answered {reply.status_code}: {reply.text[:300]}")

        yield call


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "n": len(ordered),
    }


async def _measure(
    callers: dict[str, Callable[[], Awaitable[None]]],
    pids: dict[str, int],
    upstream_port: int,
    samples: int,
    block: int,
    warmup: int,
) -> dict[str, dict[str, float]]:
    for call in callers.values():
        for _ in range(warmup):
            await call()
    latencies: dict[str, list[float]] = {name: [] for name in callers}
    cpu = {name: dict.fromkeys([*pids, "client"], 0.0) for name in callers}
    closed = dict.fromkeys(callers, 0)
    names = list(callers)
    for round_number in range((samples + block - 1) // block):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            count = min(block, samples - len(latencies[name]))
            before = {key: process_cpu_seconds(pid) or 0.0 for key, pid in pids.items()}
            own, waits = time.process_time(), _closed_connections(upstream_port)
            for _ in range(count):
                started = time.perf_counter()
                await callers[name]()
                latencies[name].append(time.perf_counter() - started)
            cpu[name]["client"] += time.process_time() - own
            for key, pid in pids.items():
                cpu[name][key] += (process_cpu_seconds(pid) or 0.0) - before[key]
            closed[name] += max(_closed_connections(upstream_port) - waits, 0)
    return {
        name: {
            **_quantiles(latencies[name]),
            **{f"{key}_cpu_ms": seconds / len(latencies[name]) * 1000 for key, seconds in cpu[name].items()},
            "upstream_connections_closed": closed[name],
        }
        for name in callers
    }


@dataclass(frozen=True)
class Proxy:
    """The running upstream and the daphne that proxies it: their URLs and pids."""

    daphne_url: str  # demo-modern, for the demo agent
    upstream_url: str
    upstream_port: int
    pids: dict[str, int]  # "daphne", "upstream"
    registered: dict[str, Any]  # sync_upstream's report


@contextlib.contextmanager
def proxy(env: dict[str, str], logs: Path, agent_id: str) -> Iterator[Proxy]:
    """The upstream and a daphne (its access log off), the upstream registered and bound; stopped on exit."""
    upstream_port, daphne_port = free_port(), free_port()
    upstream_argv = [sys.executable, "-m", "tests.federation.upstream_server", "--port", str(upstream_port)]
    daphne_argv = [str(Path(sys.executable).with_name("daphne")), "-b", HOST, "-p", str(daphne_port)]
    daphne_env = {**env, "MCP_ACCESS_LOG": "0", "MCP_LOG_LEVEL": "WARNING"}
    with (
        _child("upstream", [*upstream_argv, "--mode", "stateful"], env, upstream_port, logs) as upstream,
        _child("daphne", [*daphne_argv, "mcp_host.asgi:application"], daphne_env, daphne_port, logs) as daphne,
    ):
        upstream_url = f"http://{HOST}:{upstream_port}/mcp"
        yield Proxy(
            daphne_url=f"http://{HOST}:{daphne_port}/mcp/{SERVER}?agentId={agent_id}",
            upstream_url=upstream_url,
            upstream_port=upstream_port,
            pids={"daphne": daphne, "upstream": upstream},
            registered=_register(env, upstream_url),
        )


async def measure_calls(
    target: Proxy, token: str, samples: int, block: int, warmup: int
) -> dict[str, dict[str, float]]:
    """The five kinds of call (``VARIANTS``), ``samples`` each, interleaved in blocks: latency and CPU per call."""
    bearer = {"Authorization": f"Bearer {token}"}
    async with (
        _sdk(target.upstream_url, {}, "echo") as direct,
        _sdk(target.daphne_url, bearer, f"{PREFIX}echo") as proxied,
        _sdk(target.daphne_url, bearer, "echo") as local,
        _bare(target.daphne_url, bearer, f"{PREFIX}echo") as proxied_http,
        _bare(target.upstream_url, {}, "echo") as direct_http,
    ):
        callers = dict(zip(VARIANTS, (direct, proxied, local, proxied_http, direct_http), strict=True))
        return await _measure(callers, target.pids, target.upstream_port, samples, block, warmup)


async def _profile_load(daphne_url: str, token: str, tool: str, seconds: float) -> int:
    calls = 0
    async with _sdk(daphne_url, {"Authorization": f"Bearer {token}"}, tool) as call:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await call()
            calls += 1
    return calls


def _profile(out: Path, pid: int, seconds: float, daphne_url: str, token: str, tool: str, gil: bool = False) -> int:
    """py-spy on daphne (raw folded stacks into ``out``) while SDK calls of ``tool`` run for ``seconds``; ``gil``:
    only the thread holding the GIL, which leaves out a thread waiting in a socket call (descheduled for the
    process it woke, not using the CPU)."""
    spy = Path(sys.executable).with_name("py-spy")
    sampler = subprocess.Popen(
        [
            *(str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--nonblocking"),
            *("--duration", str(int(seconds) + 2), "--output", str(out)),
            *(["--gil"] if gil else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # py-spy attaches
        calls = asyncio.run(_profile_load(daphne_url, token, tool, seconds))
        sampler.wait(timeout=seconds + STOP_TIMEOUT_S)
    finally:
        if sampler.poll() is None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            sampler.wait(timeout=STOP_TIMEOUT_S)
    return calls


def _table(results: dict[str, dict[str, float]]) -> str:
    rows = [
        "| calls | median | p99 | CPU per call: client / daphne / upstream (all) |",
        "|---|---|---|---|",
    ]
    for name in VARIANTS:
        r = results[name]
        total = r["client_cpu_ms"] + r["daphne_cpu_ms"] + r["upstream_cpu_ms"]
        rows.append(
            f"| {LABELS[name]} | {r['median_ms']:.2f} ms | {r['p99_ms']:.2f} ms | {r['client_cpu_ms']:.2f} / "
            f"{r['daphne_cpu_ms']:.2f} / {r['upstream_cpu_ms']:.2f} ms ({total:.2f}) |"
        )
    d = results["added"]
    rows.append(
        f"| **what mcp-host adds** (proxied - direct, SDK client) | **{d['median_ms']:.2f} ms** | "
        f"{d['p99_ms']:.2f} ms | daphne {d['daphne_cpu_ms']:.2f} ms; all processes {d['all_cpu_ms']:.2f} ms |"
    )
    rows.append(
        f"| proxied / direct (SDK client) | {d['median_ratio']:.2f}x | {d['p99_ratio']:.2f}x | "
        f"all processes {d['cpu_ratio']:.2f}x |"
    )
    rows.append(
        f"| what federating adds to a call of mcp-host's own (proxied - own `echo`) | "
        f"{d['federation_median_ms']:.2f} ms | | "
        f"daphne {d['federation_daphne_cpu_ms']:.2f} ms |"
    )
    rows.append(
        f"| issue 27: proxied / its two hops (own `echo` + direct bare POST, {d['hops_median_ms']:.2f} ms; "
        f"target <= 1.0x) | {d['hops_ratio']:.2f}x | | daphne +{d['federation_daphne_cpu_ms']:.2f} ms over own "
        "`echo` (target <= +1 ms) |"
    )
    rows.append(
        f"| upstream connections closed during the calls (pool check: 0 expected) | "
        f"proxied {results['proxied']['upstream_connections_closed']}, "
        f"bare HTTP {results['proxied_http']['upstream_connections_closed']} | | |"
    )
    return "\n".join(rows)


def _added(results: dict[str, dict[str, float]]) -> dict[str, float]:
    proxied, direct, local = results["proxied"], results["direct"], results["local"]

    def total(r: dict[str, float]) -> float:
        return r["client_cpu_ms"] + r["daphne_cpu_ms"] + r["upstream_cpu_ms"]

    return {
        "median_ms": proxied["median_ms"] - direct["median_ms"],
        "p99_ms": proxied["p99_ms"] - direct["p99_ms"],
        "daphne_cpu_ms": proxied["daphne_cpu_ms"],
        "all_cpu_ms": total(proxied) - total(direct),
        "median_ratio": proxied["median_ms"] / direct["median_ms"],
        "p99_ratio": proxied["p99_ms"] / direct["p99_ms"],
        "cpu_ratio": total(proxied) / total(direct),
        "federation_median_ms": proxied["median_ms"] - local["median_ms"],
        "federation_daphne_cpu_ms": proxied["daphne_cpu_ms"] - local["daphne_cpu_ms"],
        # Issue 27's floor of a proxied call: its two hops, mcp-host's own call and a bare POST to the upstream.
        "hops_median_ms": local["median_ms"] + results["direct_http"]["median_ms"],
        "hops_ratio": proxied["median_ms"] / (local["median_ms"] + results["direct_http"]["median_ms"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300, help="measured calls of each kind (default 300)")
    parser.add_argument("--block", type=int, default=50, help="calls of one kind in a row (default 50)")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured calls of each kind first (default 20)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="then sample daphne with py-spy (raw, folded) into DIR/daphne-proxied.txt and DIR/daphne-local.txt",
    )
    parser.add_argument("--profile-seconds", type=float, default=10.0)
    parser.add_argument("--profile-gil", action="store_true", help="py-spy --gil: the GIL holder only (CPU-like)")
    args = parser.parse_args()
    if not 1 <= args.samples <= 100_000 or args.block < 1 or not 0 <= args.warmup <= 10_000:
        parser.error("bounds: 1 <= --samples <= 100000, 1 <= --block, 0 <= --warmup <= 10000")
    env = environment()
    # A SIGTERM (from `timeout`, say) unwinds like an exception: the children are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    manage(env, "migrate", "--noinput")
    access = json.loads(manage(env, "mcp_demo", "--json"))
    with tempfile.TemporaryDirectory() as tmp, proxy(env, Path(tmp), access["agent_id"]) as target:
        registered = target.registered
        results = asyncio.run(measure_calls(target, access["token"], args.samples, args.block, args.warmup))
        results["added"] = _added(results)
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for name, tool in (("proxied", f"{PREFIX}echo"), ("local", "echo")):
                out = args.profile / f"daphne-{name}.txt"
                daphne = target.pids["daphne"]
                calls = _profile(
                    out, daphne, args.profile_seconds, target.daphne_url, access["token"], tool, args.profile_gil
                )
                print(f"profiled daphne over {calls} {name} calls: {out}", file=sys.stderr)
    print(f"upstream synced: {registered['added'] or registered['updated'] or 'unchanged'}", file=sys.stderr)
    print(_table(results))
    if args.json_out:
        args.json_out.write_text(json.dumps({"args": vars(args) | {"json_out": None, "profile": None}, **results}))


if __name__ == "__main__":
    main()
