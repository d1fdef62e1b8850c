"""Soak: two daphne processes and two Celery workers under mixed load with one hostile client, bounded in time.

Not in CI (minutes of wall time). Needs ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL``; everything listens on
127.0.0.1. It migrates the database, takes the demo's token (``mcp_demo --json``), lifts the demo tenant's
worker-call quotas, starts the processes (``bench.workers``' helpers) and, for ``--minutes`` (default 10):

- well-behaved clients (``--clients``, spread over both daphnes): 2026-07-28 ``countdown`` calls on the workers
  (``steps=2, interval_ms=20``, JSON) and inline ``echo`` calls, one after another;
- one hostile client: calls whose 3 MiB streamed answers it never reads (a small receive window, connections held
  open), 4 MB progress tokens, garbage bodies and TLS bytes, in a loop.

Every ``--interval`` seconds it prints one line: the well-behaved calls and errors of the window, their p50/p99,
each daphne's RSS (``/proc``) and Redis ``used_memory``. A summary table follows (markdown).

    DATABASE_URL=postgres://…/soak REDIS_URL=redis://127.0.0.1:6379/7 python -m bench.soak --minutes 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.workers import HOST, call_body, call_headers, celery_workers, environment, lift_quotas, manage, serve_daphne

BIG = 3 * 1024 * 1024


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _redis_mib(url: str) -> float:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return float(client.info("memory")["used_memory"]) / 2**20
    finally:
        client.close()


class Window:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []


async def well_behaved(urls: list[str], token: str, stop: float, window: list[Window], n: int) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        request_id = 0
        while time.monotonic() < stop:
            request_id += 1
            url = urls[(n + request_id) % len(urls)]
            if request_id % 2:
                body = call_body(request_id, {"steps": 2, "interval_ms": 20})
                headers = call_headers(token)
            else:
                body = call_body(request_id, {"text": "hello"})
                body["params"]["name"] = "echo"
                headers = {**call_headers(token), "Mcp-Name": "echo"}
            started = time.monotonic()
            try:
                reply = await http.post(url, headers=headers, json=body)
                ok = reply.status_code == 200 and "result" in reply.json() and not reply.json()["result"].get("isError")
                if not ok:
                    window[-1].errors.append(f"{reply.status_code} {reply.text[:120]}")
            except Exception as error:  # every failure of a well-behaved call is a finding
                window[-1].errors.append(repr(error)[:120])
                continue
            window[-1].latencies.append(time.monotonic() - started)


def _raw_post(url: str, token: str, body: bytes, stream: bool = True) -> bytes:
    parts = httpx.URL(url)
    head = (
        f"POST {parts.raw_path.decode()} HTTP/1.1\r\nHost: {HOST}:{parts.port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json{', text/event-stream' if stream else ''}\r\n"
        f"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def hostile(urls: list[str], token: str, stop: float, held: list[socket.socket]) -> None:
    """Blocking, in a thread: the hostile client's loop."""
    n = 0
    while time.monotonic() < stop:
        n += 1
        url = urls[n % len(urls)]
        port = httpx.URL(url).port
        assert port is not None
        big = call_body(n, {"text": "x" * BIG}, progress=True)
        big["params"]["name"] = "echo"
        token_bomb = call_body(n, {"text": "x"}, progress=True)
        token_bomb["params"]["name"] = "echo"
        token_bomb["params"]["_meta"]["progressToken"] = "t" * 4_000_000
        for payload in (orjson.dumps(big), orjson.dumps(token_bomb), b"\x16\x03\x01garbage", b"{not json"):
            with contextlib.suppress(OSError):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
                sock.settimeout(5)
                sock.connect((HOST, port))
                data = payload if payload.startswith(b"\x16") else _raw_post(url, token, payload)
                sock.sendall(data)
                held.append(sock)  # never read, never closed (until the end)
        while len(held) > 200:
            held.pop(0).close()
        time.sleep(0.2)


async def soak(args: argparse.Namespace, urls: list[str], token: str, pids: list[int], redis_url: str) -> list[dict]:
    windows: list[Window] = [Window()]
    rows: list[dict[str, Any]] = []
    stop = time.monotonic() + args.minutes * 60
    held: list[socket.socket] = []
    tasks = [asyncio.create_task(well_behaved(urls, token, stop, windows, n)) for n in range(args.clients)]
    hostile_run = asyncio.create_task(asyncio.to_thread(hostile, urls, token, stop, held))
    started = time.monotonic()
    while time.monotonic() < stop:
        await asyncio.sleep(min(args.interval, max(0.0, stop - time.monotonic())))
        window = windows[-1]
        windows.append(Window())
        ordered = sorted(window.latencies)
        row = {
            "t_s": round(time.monotonic() - started),
            "calls": len(ordered),
            "errors": len(window.errors),
            "p50_ms": round(statistics.median(ordered) * 1000, 1) if ordered else None,
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1) if ordered else None,
            "rss_mib": [round(_rss_mib(pid), 1) for pid in pids],
            "redis_mib": round(_redis_mib(redis_url), 1),
        }
        rows.append(row)
        print(json.dumps(row), *window.errors[:3], flush=True)
    await asyncio.gather(*tasks, hostile_run)
    for sock in held:
        sock.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    args = parser.parse_args()
    env = environment()
    manage(env, "migrate", "--noinput")
    access = json.loads(manage(env, "mcp_demo", "--json"))
    lift_quotas(env, access["agent_id"])
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        logs = Path(tmp)
        (logs / "a").mkdir()
        (logs / "b").mkdir()
        first, first_pid = stack.enter_context(serve_daphne(env, logs / "a"))
        second, second_pid = stack.enter_context(serve_daphne(env, logs / "b"))
        stack.enter_context(celery_workers(env, logs, 2, "threads", args.concurrency))
        urls = [f"{base}/mcp/demo-modern?agentId={access['agent_id']}" for base in (first, second)]
        rows = asyncio.run(soak(args, urls, access["token"], [first_pid, second_pid], env["REDIS_URL"]))
    print("\n| t (s) | calls | errors | p50 ms | p99 ms | daphne RSS MiB | Redis MiB |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        rss = " / ".join(str(value) for value in row["rss_mib"])
        print(
            f"| {row['t_s']} | {row['calls']} | {row['errors']} | {row['p50_ms']} | {row['p99_ms']} | {rss} | "
            f"{row['redis_mib']} |"
        )


if __name__ == "__main__":
    main()
