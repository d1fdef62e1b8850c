"""Worker calls measured against real processes: dispatch overhead, progress relay, throughput (docs/workers.md).

Needs ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` (the broker): it migrates that database, runs
``mcp_demo --json`` for a token, purges the worker queue, starts one daphne (``mcp_host.asgi``) and Celery workers
(``celery -A mcp_host worker``) as child processes on 127.0.0.1, and measures with 2026-07-28 calls of the demo's
``countdown`` tool on ``demo-modern``:

1. dispatch overhead: ``--samples`` sequential calls of ``countdown(steps=1, interval_ms=0)`` with the binding
   inline, then on a worker (the binding's execution switched through the ORM, which bumps the catalog), after
   ``--concurrency`` overlapping warm-up calls (every thread of the pool warm); median and p99 latency of each
   and of their difference, and the CPU time per call of daphne, of the workers and of PostgreSQL + Redis
   (Linux /proc; on a small machine the processes share the cores, so CPU is latency);
2. progress relay: ``countdown(steps=20, interval_ms=0)`` streamed (SSE) ``--progress-runs`` times, inline and on a
   worker: time from sending to the first progress notification, and the mean gap between consecutive ones (the
   cost of relaying one notification worker -> Redis -> daphne -> client, as the inline gap is the tool's own);
3. throughput: ``--calls`` concurrent ``countdown(steps=10, interval_ms=100)`` (a 1 s call each) with 1 worker
   and with 2 workers (``--pool``, ``--concurrency`` each): wall time, calls per second, all answered once;
4. the floor the worker path stands on, in the same run and against the same worker: ``--samples`` bare Celery
   round trips (Celery's built-in no-op ``celery.accumulate`` through the same broker and queue, ``apply_async``
   to its result from the result backend), their median latency and CPU per round trip (this process, the
   worker, PostgreSQL + Redis), and the two ratios issue 16 sets targets for: dispatch overhead median / round
   trip median (target <= 2) and CPU per worker call, all processes / CPU per round trip (target <= 3);
5. what the worker call's durable record adds to that floor, in the same run: the median of ``--samples``
   one-row PostgreSQL commits flushed to disk (``synchronous_commit = on``; a worker call commits twice, the take
   and the outcome) and not flushed.

Prints a markdown table; ``--json-out`` also writes the raw figures; ``--profile DIR`` samples daphne and the
worker with py-spy (on-CPU stacks, folded, ``DIR/daphne.folded`` and ``DIR/worker.folded``; with ``--gil`` only
the thread holding the GIL) while the worker calls' latency is measured. Every wait is bounded; children are stopped (SIGTERM, then SIGKILL) at the end.

    DATABASE_URL=postgres://…/bench REDIS_URL=redis://127.0.0.1:6379/5 python -m bench.workers
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
MODERN = "2026-07-28"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


QUEUE = "bench-workers"  # a queue (and channel prefix) of its own: nothing else on this Redis takes its calls


def environment() -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_host.settings",
        "PYTHONUNBUFFERED": "1",
        "MCP_WORKER_QUEUE": QUEUE,
        "MCP_CHANNEL_PREFIX": QUEUE,
        # One agent drives every call: the default rates (200/s per agent) would measure the limiter's 429s.
        "MCP_RATE_LIMIT_PER_TENANT": "0",
        "MCP_RATE_LIMIT_PER_AGENT": "0",
    }
    if not env.get("DATABASE_URL") or not env.get("REDIS_URL"):
        sys.exit("bench.workers needs DATABASE_URL (PostgreSQL) and REDIS_URL (the Celery broker)")
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def set_execution(env: dict[str, str], execution: str) -> None:
    code = (
        "from mcp_app.models import ServerTool\n"
        "for b in ServerTool.objects.filter(server__server_id__in=['demo', 'demo-modern'], tool__name='countdown'):\n"
        f"    b.execution = {execution!r}\n"
        "    b.save()\n"
    )
    manage(env, "shell", "-c", code)


def lift_quotas(env: dict[str, str], agent_id: str) -> None:
    """No concurrency limit for the demo tenant and the bench's agent (0: unlimited): the throughput part runs
    ``--calls`` calls of one agent at once, which the default quotas (WORKER_CALLS_PER_AGENT) would refuse."""
    code = (
        "from mcp_app.models import Agent\n"
        f"for a in Agent.objects.filter(agent_id={agent_id!r}):\n"
        "    a.max_worker_calls = 0\n"
        "    a.save()\n"
        "    a.tenant.max_worker_calls = 0\n"
        "    a.tenant.save()\n"
    )
    manage(env, "shell", "-c", code)


def stop(process: subprocess.Popen[bytes]) -> None:
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


def purge(env: dict[str, str], queue: str = QUEUE) -> None:
    """Drop whatever an earlier run left on the bench's queue (``queue``)."""
    subprocess.run(
        [sys.executable, "-m", "celery", "-A", "mcp_host", "purge", "-f", "-Q", queue],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


@contextlib.contextmanager
def serve_daphne(env: dict[str, str], logs: Path) -> Iterator[tuple[str, int]]:
    port = _free_port()
    daphne = Path(sys.executable).with_name("daphne")
    with (logs / "daphne.log").open("wb") as log:
        process = subprocess.Popen(
            [str(daphne), "-b", HOST, "-p", str(port), "mcp_host.asgi:application"],
            cwd=ROOT,
            env={**env, "MCP_ACCESS_LOG": "0", "MCP_LOG_LEVEL": "WARNING"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                sys.exit(f"daphne did not start:\n{(logs / 'daphne.log').read_text()}")
            time.sleep(0.05)
        yield f"http://{HOST}:{port}", process.pid
    finally:
        stop(process)


@contextlib.contextmanager
def celery_workers(env: dict[str, str], logs: Path, count: int, pool: str, concurrency: int) -> Iterator[list[int]]:
    processes = []
    try:
        for n in range(count):
            log_path = logs / f"worker-{count}-{n}.log"
            command = [
                *(sys.executable, "-m", "celery", "-A", "mcp_host", "worker", "--loglevel", "INFO"),
                *("--pool", pool, "--concurrency", str(concurrency), "--without-gossip", "--without-mingle"),
                *("--hostname", f"bench-{os.getpid()}-{count}-{n}@%h", "-Q", QUEUE),
            ]
            with log_path.open("wb") as log:
                process = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            processes.append((process, log_path))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for process, log_path in processes:
            while " ready." not in log_path.read_text(errors="replace"):
                if time.monotonic() > deadline or process.poll() is not None:
                    sys.exit(f"a worker did not start:\n{log_path.read_text()}")
                time.sleep(0.05)
        yield [process.pid for process, _log in processes]
    finally:
        for process, _log in processes:
            stop(process)


SERVICES = ("postgres", "redis-server")


def _cpu_seconds(groups: dict[str, list[int]]) -> dict[str, float]:
    """CPU time (user + system, seconds) so far of the live processes of each named set of process groups (daphne,
    the workers: each started in a session of its own, so a prefork pool's children count too), and of PostgreSQL
    and Redis together ("services", by command name); read from Linux's /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys([*groups, "services"], 0.0)
    owner = {pgid: label for label, pgids in groups.items() for pgid in pgids}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        used = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if int(fields[2]) in owner:
            totals[owner[int(fields[2])]] += used
        elif name.startswith(SERVICES):
            totals["services"] += used
    return totals


def _per_call(groups: dict[str, list[int]], calls: int, run: Any) -> tuple[Any, dict[str, float]]:
    """``run()``'s outcome, and the CPU milliseconds per call (of ``calls``) that each set of ``groups`` and the
    services used meanwhile."""
    before = _cpu_seconds(groups)
    outcome = run()
    after = _cpu_seconds(groups)
    return outcome, {f"{key}_cpu_ms": (after[key] - before[key]) / calls * 1000 for key in before}


NOOP_TASK = "celery.accumulate"  # registered on every Celery app; returns its arguments: a no-op


def celery_app(env: dict[str, str]) -> Any:
    """The project's Celery app (``mcp_host.celery``) configured from the same settings and environment as the
    children: the same broker, transport, serializer and result backend the worker calls use."""
    os.environ.update(env)
    import django

    django.setup()
    from mcp_host.celery import app

    return app


def round_trips(app: Any, samples: int) -> list[float]:
    """``samples`` sequential no-op tasks on the bench's queue, each timed from ``apply_async`` to its result
    (after ten unmeasured ones that open the connections)."""
    out = []
    for n in range(samples + 10):
        started = time.perf_counter()
        result = app.send_task(NOOP_TASK, args=(n,), queue=QUEUE)
        value = result.get(timeout=30)
        elapsed = time.perf_counter() - started
        result.forget()
        if list(value) != [n]:
            sys.exit(f"the no-op task answered {value!r}")
        if n >= 10:
            out.append(elapsed)
    return out


@contextlib.contextmanager
def _profiled(pids: dict[str, int], out: Path | None, *, gil: bool = False) -> Iterator[None]:
    """Sample each of ``pids`` with py-spy (on-CPU stacks, folded; ``gil``: only the thread holding the GIL, i.e.
    the process's Python CPU) into ``out/<name>.folded`` meanwhile."""
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    samplers = [
        subprocess.Popen(
            [
                *(str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--nonblocking"),
                *(("--gil",) if gil else ()),
                *("--output", str(out / f"{name}.folded")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]
    try:
        yield
    finally:
        for sampler in samplers:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            sampler.wait(timeout=STOP_TIMEOUT_S)


def call_body(request_id: int, arguments: dict[str, Any], progress: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench.workers", "version": "1"},
    }
    if progress:
        meta["progressToken"] = request_id
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "countdown", "arguments": arguments, "_meta": meta},
    }


def call_headers(token: str, *, stream: bool = False) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream" if stream else "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "countdown",
    }


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "n": len(ordered),
    }


async def warm(url: str, token: str, concurrency: int) -> None:
    """As many overlapping 0.1 s calls as the worker has threads: each thread of a thread pool makes its event
    loop, channel layer and database connection once (kept from call to call) before anything is measured."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:

        async def one(n: int) -> None:
            reply = await http.post(
                url, headers=call_headers(token), json=call_body(n, {"steps": 2, "interval_ms": 50})
            )
            if reply.status_code != 200 or "result" not in reply.json():
                sys.exit(f"warm-up call failed: {reply.status_code} {reply.text[:300]}")

        await asyncio.gather(*(one(n) for n in range(concurrency)))


async def latencies(url: str, token: str, samples: int) -> list[float]:
    out = []
    async with httpx.AsyncClient(timeout=30) as http:
        for n in range(samples + 10):
            started = time.perf_counter()
            reply = await http.post(url, headers=call_headers(token), json=call_body(n, {"steps": 1, "interval_ms": 0}))
            elapsed = time.perf_counter() - started
            if reply.status_code != 200 or "result" not in reply.json():
                sys.exit(f"call failed: {reply.status_code} {reply.text[:300]}")
            if n >= 10:  # the first ten warm the connections and caches up
                out.append(elapsed)
    return out


async def _progress(url: str, token: str, runs: int, steps: int = 20) -> dict[str, float]:
    firsts, gaps = [], []
    async with httpx.AsyncClient(timeout=30) as http:
        for n in range(runs + 2):
            started = time.perf_counter()
            arrivals = []
            body = call_body(n, {"steps": steps, "interval_ms": 0}, progress=True)
            async with http.stream("POST", url, headers=call_headers(token, stream=True), json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and b"notifications/progress" in line.encode():
                        arrivals.append(time.perf_counter())
            if len(arrivals) != steps:
                sys.exit(f"expected {steps} progress notifications, got {len(arrivals)}")
            if n >= 2:
                firsts.append(arrivals[0] - started)
                gaps.append((arrivals[-1] - arrivals[0]) / (steps - 1))
    return {
        "first_progress_median_ms": statistics.median(firsts) * 1000,
        "gap_median_ms": statistics.median(gaps) * 1000,
        "runs": runs,
    }


async def _throughput(url: str, token: str, calls: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=calls, max_keepalive_connections=calls)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def one(n: int) -> int:
            reply = await http.post(
                url, headers=call_headers(token), json=call_body(n, {"steps": 10, "interval_ms": 100})
            )
            data = orjson.loads(reply.content)
            if data.get("id") != n or data["result"]["structuredContent"] != {"result": 10}:
                raise RuntimeError(f"call {n}: {reply.text[:200]}")
            return n

        started = time.perf_counter()
        done = await asyncio.gather(*(one(n) for n in range(calls)))
        wall = time.perf_counter() - started
    assert sorted(done) == list(range(calls))
    return {"calls": calls, "wall_s": wall, "calls_per_s": calls / wall}


def durable_commits(samples: int) -> dict[str, float]:
    """The median of ``samples`` one-row ``INSERT``s, each its own transaction, in PostgreSQL (the bench's
    database, a table of its own, dropped after: a temporary table writes no WAL) as committed durably (``synchronous_commit = on``: the WAL flushed to disk, as
    every worker call's two commits are) and not (``off``): what a worker call's durable record costs beyond a
    bare round trip, which writes nothing durable. After ten unmeasured ones of each."""
    from django.db import connection

    medians: dict[str, float] = {}
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_commits (id serial PRIMARY KEY, at timestamptz)")
        for setting in ("on", "off"):
            cursor.execute(f"SET synchronous_commit = {setting}")
            timed = []
            for n in range(samples + 10):
                started = time.perf_counter()
                cursor.execute("INSERT INTO bench_commits (at) VALUES (now())")
                if n >= 10:
                    timed.append(time.perf_counter() - started)
            medians[f"synchronous_{setting}_median_ms"] = statistics.median(timed) * 1000
        cursor.execute("DROP TABLE bench_commits")
        cursor.execute("RESET synchronous_commit")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--progress-runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--json-out")
    parser.add_argument("--profile", type=Path, help="write py-spy profiles of daphne and the worker here")
    parser.add_argument("--gil", action="store_true", help="with --profile: sample only the thread holding the GIL")
    args = parser.parse_args()
    env = environment()
    manage(env, "migrate", "--noinput")
    access = json.loads(manage(env, "mcp_demo", "--json"))
    token = access["token"]
    lift_quotas(env, access["agent_id"])
    purge(env)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, serve_daphne(env, Path(tmp)) as (base, daphne):
        url = f"{base}/mcp/demo-modern?agentId={access['agent_id']}"
        calls = args.samples + 10  # _latencies makes ten warm-up calls first
        set_execution(env, "inline")
        samples, cpu = _per_call({"daphne": [daphne]}, calls, lambda: asyncio.run(latencies(url, token, args.samples)))
        results["inline"] = {**_quantiles(samples), **cpu}
        results["inline_progress"] = asyncio.run(_progress(url, token, args.progress_runs))
        set_execution(env, "")  # the tool's default: worker
        with celery_workers(env, Path(tmp), 1, args.pool, args.concurrency) as workers:
            asyncio.run(warm(url, token, args.concurrency))
            with _profiled({"daphne": daphne, "worker": workers[0]}, args.profile, gil=args.gil):
                samples, cpu = _per_call(
                    {"daphne": [daphne], "worker": workers},
                    calls,
                    lambda: asyncio.run(latencies(url, token, args.samples)),
                )
            results["worker"] = {**_quantiles(samples), **cpu}
            results["worker_progress"] = asyncio.run(_progress(url, token, args.progress_runs))
            app = celery_app(env)
            own = time.process_time()
            samples, cpu = _per_call({"worker": workers}, calls, lambda: round_trips(app, args.samples))
            cpu["bench_cpu_ms"] = (time.process_time() - own) / calls * 1000
            results["celery_round_trip"] = {**_quantiles(samples), **cpu}
            results["durable_commit"] = durable_commits(args.samples)
            results["throughput_1"] = asyncio.run(_throughput(url, token, args.calls))
        with celery_workers(env, Path(tmp), 2, args.pool, args.concurrency):
            results["throughput_2"] = asyncio.run(_throughput(url, token, args.calls))
    inline, worker = results["inline"], results["worker"]
    print(f"| measure | inline | worker ({args.pool}, concurrency {args.concurrency}) |")
    print("|---|---|---|")
    print(f"| call latency, median | {inline['median_ms']:.2f} ms | {worker['median_ms']:.2f} ms |")
    print(f"| call latency, p99 | {inline['p99_ms']:.2f} ms | {worker['p99_ms']:.2f} ms |")
    print(
        f"| dispatch overhead (worker - inline) | | median {worker['median_ms'] - inline['median_ms']:.2f} ms, "
        f"p99 {worker['p99_ms'] - inline['p99_ms']:.2f} ms |"
    )
    print(
        f"| CPU per call: daphne, worker, PostgreSQL + Redis | {inline['daphne_cpu_ms']:.2f} ms, -, "
        f"{inline['services_cpu_ms']:.2f} ms | {worker['daphne_cpu_ms']:.2f} ms, {worker['worker_cpu_ms']:.2f} ms, "
        f"{worker['services_cpu_ms']:.2f} ms |"
    )
    ip, wp = results["inline_progress"], results["worker_progress"]
    print(
        f"| first progress after sending, median | {ip['first_progress_median_ms']:.2f} ms | "
        f"{wp['first_progress_median_ms']:.2f} ms |"
    )
    print(
        f"| gap between progress notifications, median | {ip['gap_median_ms']:.3f} ms | {wp['gap_median_ms']:.3f} ms |"
    )
    for count in (1, 2):
        t = results[f"throughput_{count}"]
        print(
            f"| {t['calls']} concurrent 1 s calls, {count} worker(s) | | {t['wall_s']:.2f} s wall, "
            f"{t['calls_per_s']:.1f} calls/s |"
        )
    floor = results["celery_round_trip"]
    overhead = worker["median_ms"] - inline["median_ms"]
    worker_cpu = worker["daphne_cpu_ms"] + worker["worker_cpu_ms"] + worker["services_cpu_ms"]
    floor_cpu = floor["bench_cpu_ms"] + floor["worker_cpu_ms"] + floor["services_cpu_ms"]
    results["ratios"] = {
        "dispatch_overhead_per_round_trip": overhead / floor["median_ms"],
        "worker_call_cpu_per_round_trip_cpu": worker_cpu / floor_cpu,
    }
    print(
        f"| bare Celery round trip (no-op task, apply_async to result), median / p99 | | "
        f"{floor['median_ms']:.2f} ms / {floor['p99_ms']:.2f} ms |"
    )
    print(
        f"| CPU per round trip: caller, worker, PostgreSQL + Redis | | {floor['bench_cpu_ms']:.2f} ms, "
        f"{floor['worker_cpu_ms']:.2f} ms, {floor['services_cpu_ms']:.2f} ms (all: {floor_cpu:.2f} ms) |"
    )
    commit = results["durable_commit"]
    print(
        f"| one-row PostgreSQL commit, median: durable (synchronous_commit on; a worker call makes two) / not | | "
        f"{commit['synchronous_on_median_ms']:.2f} ms / {commit['synchronous_off_median_ms']:.2f} ms |"
    )
    print(
        f"| dispatch overhead median / round trip median (target <= 2) | | "
        f"{overhead:.2f} / {floor['median_ms']:.2f} = {results['ratios']['dispatch_overhead_per_round_trip']:.2f} |"
    )
    print(
        f"| CPU per worker call, all processes / per round trip (target <= 3) | | {worker_cpu:.2f} / "
        f"{floor_cpu:.2f} = {results['ratios']['worker_call_cpu_per_round_trip_cpu']:.2f} |"
    )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
