"""Worker calls under random worker SIGKILLs: is any call lost, or answered twice? (docs/reliability.md)

Needs ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` (the broker), like ``bench.workers``, whose helpers it uses:
it migrates that database, runs ``mcp_demo --json`` for a token, lifts the demo agent's worker quotas, purges a
queue of its own, and starts one daphne and ``--workers`` Celery workers (``--pool``, ``--concurrency``) on
127.0.0.1 as child processes. Then it sends ``--calls`` 2026-07-28 calls of the demo's ``countdown`` tool
(``steps=4, interval_ms=50``: a 0.2 s worker call), ``--clients`` at a time, while a killer SIGKILLs a whole
random worker (its main process and its pool processes at once, so that nothing but the heartbeat notices) every
``--kill-min``..``--kill-max`` seconds and starts a new one ``--restart-after`` seconds later, as a process
supervisor would.

Counted at the end:

- lost: a request that got no JSON-RPC response within ``--call-timeout`` (or a transport error);
- answered twice: a response whose id is not its request's, more completed answers than completed records, or
  more records than calls; also reported: runs whose outcome was refused because their call had been
  re-queued meanwhile (a worker's log line ``outcome=superseded``: the guard that keeps a call from being
  answered twice, at work);
- how each call ended: completed (first run, or re-run after its worker was killed: ``attempts``), failed with
  the lost-worker error (killed on every run it had: ``WORKER_CALL_MAX_ATTEMPTS``), other errors.

Bounded: the whole run stops after ``--max-seconds`` (calls not sent by then are reported as not sent), every
wait is bounded, children are stopped (SIGTERM, then SIGKILL) at the end. Loopback only.

    DATABASE_URL=postgres://…/bench REDIS_URL=redis://127.0.0.1:6379/5 python -m bench.worker_loss --calls 10000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.workers import (
    READY_TIMEOUT_S,
    ROOT,
    call_body,
    call_headers,
    environment,
    lift_quotas,
    manage,
    purge,
    serve_daphne,
    stop,
)

QUEUE = "bench-loss"


class Workers:
    """``count`` Celery workers on ``QUEUE``; ``kill(n)`` SIGKILLs worker n's whole process group, ``start(n)``
    replaces it."""

    def __init__(self, env: dict[str, str], logs: Path, count: int, pool: str, concurrency: int) -> None:
        self.env, self.logs, self.pool, self.concurrency = env, logs, pool, concurrency
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self.generation = 0

    def start(self, n: int, *, wait: bool = True) -> None:
        self.generation += 1
        log_path = self.logs / f"worker-{n}-{self.generation}.log"
        command = [
            *(sys.executable, "-m", "celery", "-A", "mcp_host", "worker", "--loglevel", "INFO"),
            *("--pool", self.pool, "--concurrency", str(self.concurrency), "--without-gossip", "--without-mingle"),
            *("--hostname", f"loss-{os.getpid()}-{n}-{self.generation}@%h", "-Q", QUEUE),
        ]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes[n] = process
        if wait:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while " ready." not in log_path.read_text(errors="replace"):
                if time.monotonic() > deadline or process.poll() is not None:
                    sys.exit(f"a worker did not start:\n{log_path.read_text()}")
                time.sleep(0.05)

    def kill(self, n: int) -> None:
        process = self.processes[n]
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes:
            if process is not None:
                stop(process)

    def log_lines(self, needle: str) -> int:
        return sum(path.read_text(errors="replace").count(needle) for path in self.logs.glob("worker-*.log"))


async def _killer(workers: Workers, stop: asyncio.Event, args: argparse.Namespace, kills: list[float]) -> None:
    rng = random.Random(args.seed)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(args.kill_min, args.kill_max))
        if stop.is_set():
            return
        n = rng.randrange(len(workers.processes))
        await asyncio.to_thread(workers.kill, n)
        kills.append(time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.restart_after)
        await asyncio.to_thread(workers.start, n, wait=False)


async def _calls(url: str, token: str, args: argparse.Namespace, started: float) -> dict[str, Any]:
    outcomes: Counter[str] = Counter()
    wrong_id = 0
    durations: list[float] = []
    next_id = iter(range(1, args.calls + 1))
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(timeout=args.call_timeout, limits=limits) as http:

        async def client() -> None:
            nonlocal wrong_id
            for request_id in next_id:
                if time.monotonic() - started > args.max_seconds:
                    outcomes["not sent (time bound)"] += 1
                    continue
                begun = time.monotonic()
                try:
                    reply = await http.post(
                        url, headers=call_headers(token), json=call_body(request_id, {"steps": 4, "interval_ms": 50})
                    )
                    answer = reply.json()
                except (httpx.HTTPError, ValueError) as failure:
                    outcomes[f"lost ({type(failure).__name__})"] += 1
                    continue
                durations.append(time.monotonic() - begun)
                if not isinstance(answer, dict) or answer.get("id") != request_id:
                    wrong_id += 1
                    continue
                if "result" in answer:
                    outcomes["completed" if not answer["result"].get("isError") else "tool error"] += 1
                else:
                    error = answer.get("error") or {}
                    outcomes[f"error {error.get('code')}: {str(error.get('message'))[:60]}"] += 1

        await asyncio.gather(*(client() for _ in range(args.clients)))
    durations.sort()
    return {
        "outcomes": dict(outcomes),
        "wrong_id": wrong_id,
        "p50_s": durations[len(durations) // 2] if durations else None,
        "p99_s": durations[int(len(durations) * 0.99)] if durations else None,
        "max_s": durations[-1] if durations else None,
    }


RECORDS = """
import json
from django.db.models import Count
from mcp_app.models import ToolTask
rows = ToolTask.objects.filter(tool_name="countdown", execution="worker", created_at__gte="{since}")
print(json.dumps({{
    "records": rows.count(),
    "by_status_attempts": sorted(
        [r["status"], r["attempts"], r["n"]] for r in rows.values("status", "attempts").annotate(n=Count("pk"))
    ),
}}))
"""


async def _run(url: str, token: str, workers: Workers, args: argparse.Namespace) -> dict[str, Any]:
    stop = asyncio.Event()
    kills: list[float] = []
    started = time.monotonic()
    killer = asyncio.ensure_future(_killer(workers, stop, args, kills))
    try:
        calls = await _calls(url, token, args, started)
    finally:
        stop.set()
        await killer
    return {**calls, "kills": len(kills), "seconds": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--kill-min", type=float, default=3.0)
    parser.add_argument("--kill-max", type=float, default=8.0)
    parser.add_argument("--restart-after", type=float, default=1.0)
    parser.add_argument("--policy", choices=("requeue", "fail"), default="requeue")
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--call-timeout", type=float, default=120.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    env = {
        **environment(),
        "MCP_WORKER_QUEUE": QUEUE,
        "MCP_CHANNEL_PREFIX": QUEUE,
        "MCP_WORKER_LOST_CALLS": args.policy,
        "MCP_WORKER_CALL_MAX_ATTEMPTS": str(args.max_attempts),
    }
    manage(env, "migrate", "--noinput")
    access = json.loads(manage(env, "mcp_demo", "--json"))
    token = access["token"]
    lift_quotas(env, access["agent_id"])
    purge(env, QUEUE)
    since = manage(env, "shell", "-c", "from django.utils import timezone; print(timezone.now().isoformat())")
    since = since.strip().splitlines()[-1]  # shell may print a banner first
    with tempfile.TemporaryDirectory() as tmp, serve_daphne(env, Path(tmp)) as (base, _daphne_pid):
        url = f"{base}/mcp/demo-modern?agentId={access['agent_id']}"
        workers = Workers(env, Path(tmp), args.workers, args.pool, args.concurrency)
        try:
            for n in range(args.workers):
                workers.start(n)
            results = asyncio.run(_run(url, token, workers, args))
            # Every record settled? (a lost call would stay queued or working)
            deadline = time.monotonic() + 60
            while True:
                records = json.loads(manage(env, "shell", "-c", RECORDS.format(since=since)).strip().splitlines()[-1])
                unsettled = sum(n for status, _a, n in records["by_status_attempts"] if status in ("queued", "working"))
                if not unsettled or time.monotonic() > deadline:
                    break
                time.sleep(1)
            results["records"] = records
            results["superseded_runs"] = workers.log_lines("outcome=superseded")
            results["logged_runs"] = workers.log_lines("worker call ")
        finally:
            workers.stop_all()
    results["settings"] = {key: value for key, value in vars(args).items() if key != "json_out"}
    lost = sum(n for key, n in results["outcomes"].items() if key.startswith("lost"))
    completed_records = sum(n for status, _a, n in results["records"]["by_status_attempts"] if status == "completed")
    print(json.dumps(results, indent=2))
    print(
        f"\ncalls sent: {args.calls - results['outcomes'].get('not sent (time bound)', 0)}, kills: {results['kills']}, "
        f"lost: {lost}, wrong or duplicate answers: {results['wrong_id']}, "
        f"completed answers / records: {results['outcomes'].get('completed', 0)} / {completed_records}, "
        f"refused late runs: {results['superseded_runs']}, in {results['seconds']:.0f} s"
    )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
