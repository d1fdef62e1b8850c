"""Issue 27's table in one command: every call path of mcp-host beside its floor, measured in the same run.

Needs ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL``. It starts, once, what the other bench modules start:

- ``bench.run``'s servers, each pinned to ``--server-core``: the Channels floor on daphne, the official SDK
  stateful and stateless-JSON under uvicorn, and mcp-host under daphne and under uvicorn on SQLite (in-memory
  layer) and on PostgreSQL + Redis; the load generator is this process, pinned to ``--client-core``;
- ``bench.workers``' daphne and one Celery worker (threads pool, ``--worker-concurrency``) on a queue of its own;
- ``bench.upstreams``' upstream (the official SDK's ``MCPServer``) and a daphne that proxies it as ``up_echo``.

Then, for ``--rounds`` rounds, with the order of the three parts rotated every round, it measures each row and
its floor in the same round:

1. warm ``tools/call echo`` at c=16 (stateless, session, 2026-07-28) on mcp-host under daphne, SQLite and
   PostgreSQL + Redis: the server's CPU µs per call, against the Channels ``AsyncHttpConsumer`` floor's;
2. the same under uvicorn, against the SDK's best mode (stateless JSON, 2026-07-28);
3. SSE, ``--sse-streams`` streams x ``--sse-events`` progress, mcp-host under daphne (session and 2026-07-28):
   streams/s against the SDK stateful's;
4. worker calls: dispatch overhead (median worker call - median inline call, ``countdown(steps=1)``) against
   the median of a bare Celery round trip through the same broker, queue and worker;
5. proxied upstream ``echo`` (SDK client), median, against mcp-host's own ``echo`` plus a direct POST to the
   upstream (both medians, added);
6. daphne's CPU per proxied call against its CPU per own ``echo`` call (the difference).

Rows 4-6 run with this process unpinned, as ``bench.workers`` and ``bench.upstreams`` run. Every figure is the
median over the rounds; every ratio (or difference) is the median of the per-round ones, each against the floor
of its own round. The table goes to stdout, with ``--markdown-out`` to a file; ``--json-out`` writes every raw
result, which ``--from-json`` prints again. The exit status is 1 if any load-generator request failed.

    DATABASE_URL=postgres://…/bench REDIS_URL=redis://127.0.0.1:6379/5 python -m bench.floors   # ≈ 15 min
    DATABASE_URL=… REDIS_URL=… python -m bench.floors --quick --rounds 1                       # ≈ 3 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import run, upstreams, workers

LEVEL = 16  # the concurrency
DATABASES = ("sqlite", "postgres")
DB_LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL + Redis"}
CALL_SCENARIOS = ("legacy", "session", "modern")
SSE_SCENARIOS = ("session", "modern")


# The servers of rows 1-3 ---------------------------------------------------------------------------------------


def call_specs() -> list[run.ServerSpec]:
    """``bench.run``'s servers that rows 1-3 need: the floor, both SDK modes, and mcp-host on daphne (calls and
    SSE) and uvicorn (calls) on both databases; no bare app, no levers, no idle-stream run."""
    chosen = []
    for spec in run.server_specs(DATABASES, levers=False, uvicorn_bare=False):
        if spec.kind == "bare":
            continue
        keep_sse = spec.key == "sdk-stateful" or (spec.kind == "mcp" and spec.runner == "daphne")
        chosen.append(dataclasses.replace(spec, sse=spec.sse if keep_sse else (), memory=False))
    return chosen


def mcp_key(runner: str, db: str) -> str:
    return f"mcp-{runner}-{db}"


# One round of each part ----------------------------------------------------------------------------------------


def calls_round(servers: list[run.Running], number: int, args: argparse.Namespace, raw: dict[str, Any]) -> None:
    """Rows 1-3: every server's call scenarios, then its SSE scenarios, servers in an order rotated by round."""
    run.pin(args.client_core)
    shift = (number - 1) % len(servers)
    order = servers[shift:] + servers[:shift]
    for server in order:
        for scenario in server.spec.scenarios:
            idle = run.wait_for_quiet(args.quiet_wait, args.quiet_cores)
            result = run.measure(server, scenario, LEVEL, args.duration, args.warmup)
            result.update(round=number, busy_cores_before=idle)
            raw["throughput"].append(result)
            run.say(run.brief(result))
    for server in order:
        for scenario in server.spec.sse:
            idle = run.wait_for_quiet(args.quiet_wait, args.quiet_cores)
            result = run.measure(server, scenario, args.sse_streams, args.duration, args.warmup, args.sse_events)
            result.update(round=number, busy_cores_before=idle, sse=True)
            raw["sse"].append(result)
            run.say(run.brief(result))


@dataclass(frozen=True)
class WorkerSide:
    """Row 4's daphne (its URL for the demo agent on ``demo-modern``), token, environment and Celery app."""

    url: str
    token: str
    env: dict[str, str]
    app: Any  # celery.Celery: untyped


def worker_round(side: WorkerSide, number: int, args: argparse.Namespace, raw: dict[str, Any]) -> None:
    """Row 4: sequential ``countdown(steps=1)`` calls bound inline, then on the worker, then bare round trips."""
    unpin()
    workers.set_execution(side.env, "inline")
    inline = asyncio.run(workers.latencies(side.url, side.token, args.worker_samples))
    workers.set_execution(side.env, "")  # the tool's default: worker
    worker = asyncio.run(workers.latencies(side.url, side.token, args.worker_samples))
    trips = workers.round_trips(side.app, args.worker_samples)
    result = {
        "round": number,
        "inline_ms": statistics.median(inline) * 1000,
        "worker_ms": statistics.median(worker) * 1000,
        "round_trip_ms": statistics.median(trips) * 1000,
        "samples": args.worker_samples,
    }
    result["overhead_ms"] = result["worker_ms"] - result["inline_ms"]
    raw["workers"].append(result)
    run.say(f"workers round {number}: " + ", ".join(f"{k}={v:.2f}" for k, v in result.items() if k.endswith("ms")))


def upstream_round(
    target: upstreams.Proxy, token: str, number: int, args: argparse.Namespace, raw: dict[str, Any]
) -> None:
    """Rows 5-6: ``bench.upstreams``' five kinds of call, interleaved in blocks."""
    unpin()
    calls = asyncio.run(
        upstreams.measure_calls(target, token, args.upstream_samples, args.upstream_block, args.upstream_warmup)
    )
    raw["upstreams"].append({"round": number, **calls})
    run.say(
        f"upstreams round {number}: "
        + ", ".join(
            f"{name} {calls[name]['median_ms']:.2f} ms / daphne {calls[name]['daphne_cpu_ms']:.2f}" for name in calls
        )
    )


def unpin() -> None:
    """This process on every core again (rows 4-6 are measured the way their own modules run)."""
    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, range(os.cpu_count() or 1))


# The run -------------------------------------------------------------------------------------------------------


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=run.ROOT, capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.strip()


def benchmark(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    started = time.monotonic()
    envs = {db: run.base_env(tmp, db) for db in DATABASES}
    worker_env, upstream_env = workers.environment(), upstreams.environment()
    demos: dict[str, dict[str, Any]] = {}
    for db, env in envs.items():
        run.say(f"setting up {db}: {run.describe(env)}")
        run.manage(env, "migrate", "--noinput")
        # Once per database: mcp_demo revokes the demo tokens it issued before.
        demos[db] = json.loads(run.manage(env, "mcp_demo", "--json", "--base-url", f"http://{run.HOST}:8000"))
    access = demos["postgres"]
    workers.lift_quotas(worker_env, access["agent_id"])
    workers.purge(worker_env)
    raw: dict[str, Any] = {"throughput": [], "sse": [], "workers": [], "upstreams": []}
    dirty = " (with uncommitted changes)" if git("status", "--porcelain") else ""
    raw["setup"] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "commit": git("rev-parse", "--short", "HEAD") + dirty,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "databases": "; ".join(f"{db}: {run.describe(env)}" for db, env in envs.items()),
    }
    for directory in ("workers", "upstreams"):
        (tmp / directory).mkdir()
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(run.serving(call_specs(), tmp, envs, args.server_core))
        base, _daphne = stack.enter_context(workers.serve_daphne(worker_env, tmp / "workers"))
        stack.enter_context(workers.celery_workers(worker_env, tmp / "workers", 1, "threads", args.worker_concurrency))
        target = stack.enter_context(upstreams.proxy(upstream_env, tmp / "upstreams", access["agent_id"]))
        for server in servers:
            run.prepare(server, demos)
        for server in servers:
            run.wait_ready(server, server.spec.scenarios[0])
        for server in servers:  # first touch of every code path
            for scenario in server.spec.scenarios:
                run.measure(server, scenario, LEVEL, 0.5, 0.0)
            for scenario in server.spec.sse:
                run.measure(server, scenario, args.sse_streams, 0.5, 0.0, args.sse_events)
        side = WorkerSide(
            url=f"{base}/mcp/demo-modern?agentId={access['agent_id']}",
            token=access["token"],
            env=worker_env,
            app=workers.celery_app(worker_env),  # after the children start: it changes this process's environment
        )
        asyncio.run(workers.warm(side.url, side.token, args.worker_concurrency))
        run.say(f"{len(servers)} servers, a worker and an upstream ready after {time.monotonic() - started:.0f} s")
        parts: list[Callable[[int], None]] = [
            lambda number: calls_round(servers, number, args, raw),
            lambda number: worker_round(side, number, args, raw),
            lambda number: upstream_round(target, access["token"], number, args, raw),
        ]
        for number in range(1, args.rounds + 1):
            begun = time.monotonic()
            shift = (number - 1) % len(parts)
            for part in parts[shift:] + parts[:shift]:
                part(number)
            run.say(f"round {number} took {time.monotonic() - begun:.0f} s")
        for server in servers:
            if server.process.poll() is not None:
                raise RuntimeError(f"{server.spec.key} died during the run:\n{run.tail(server.log)}")
    raw["setup"]["seconds"] = round(time.monotonic() - started)
    return raw


# The table -----------------------------------------------------------------------------------------------------


def per_round(rows: list[dict[str, Any]], **match: Any) -> dict[int, dict[str, Any]]:
    """The results of ``rows`` whose fields equal ``match``, by round."""
    return {r["round"]: r for r in rows if all(r.get(key) == value for key, value in match.items())}


def span(values: Sequence[float | None], digits: int = 0, unit: str = "") -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    low, high = run.fmt(min(present), digits), run.fmt(max(present), digits)
    return (low if low == high else f"{low}-{high}") + unit


@dataclass
class Row:
    """One row of the issue's table, and its ratio (or difference) in each round, for the spread."""

    path: str
    mine: str
    floor: str
    ratio: str
    target: str
    met: bool | None
    rounds: dict[int, float]  # the row's worst ratio (or difference) in each round


def cells_versus(
    results: list[dict[str, Any]],
    keys: Sequence[str],
    scenarios: Sequence[str],
    floor: tuple[str, str],
    name: str,
    worst: Callable[[Sequence[float]], float],
) -> tuple[dict[tuple[str, str], float | None], dict[tuple[str, str], float | None], float | None, dict[int, float]]:
    """For each (server, scenario): the median of ``name`` over rounds and the median of its per-round ratio to
    the floor's; the floor's median; and the worst ratio of each round."""
    floors = {n: r.get(name) for n, r in per_round(results, server=floor[0], scenario=floor[1]).items()}
    values: dict[tuple[str, str], float | None] = {}
    ratios: dict[tuple[str, str], float | None] = {}
    by_round: dict[int, list[float]] = {}
    for key in keys:
        for scenario in scenarios:
            mine = per_round(results, server=key, scenario=scenario)
            values[key, scenario] = run.median([r.get(name) for r in mine.values()])
            each = {n: r[name] / floors[n] for n, r in mine.items() if r.get(name) and floors.get(n)}
            ratios[key, scenario] = run.median(list(each.values()))
            for n, value in each.items():
                by_round.setdefault(n, []).append(value)
    return values, ratios, run.median(list(floors.values())), {n: worst(v) for n, v in sorted(by_round.items())}


def call_row(raw: dict[str, Any], runner: str, floor: tuple[str, str], path: str, floor_label: str, target: str) -> Row:
    """Rows 1 and 2: the server's CPU µs per warm call, each database's range over the three scenarios."""
    keys = [mcp_key(runner, db) for db in DATABASES]
    values, ratios, floor_value, rounds = cells_versus(
        raw["throughput"], keys, CALL_SCENARIOS, floor, "server_cpu_us_per_req", max
    )
    mine = " / ".join(span([values[key, s] for s in CALL_SCENARIOS]) for key in keys) + " µs"
    present = [r for r in ratios.values() if r is not None]
    return Row(
        path,
        mine,
        f"{floor_label}, {run.fmt(floor_value)} µs",
        span(present, 2, "x"),
        f"≤ {target}x",
        max(present) <= float(target) if present else None,
        rounds,
    )


def sse_row(raw: dict[str, Any], args: argparse.Namespace) -> Row:
    keys = [mcp_key("daphne", db) for db in DATABASES]
    values, ratios, floor_value, rounds = cells_versus(
        raw["sse"], keys, SSE_SCENARIOS, ("sdk-stateful", "session"), "rps", min
    )
    present = [r for r in ratios.values() if r is not None]
    return Row(
        f"SSE, {args.sse_streams} streams x {args.sse_events} progress, daphne, SQLite / PG + Redis "
        "(session, 2026-07-28)",
        " / ".join(span([values[key, s] for s in SSE_SCENARIOS]) for key in keys) + " streams/s",
        f"the SDK stateful, {run.fmt(floor_value)} streams/s",
        " / ".join(span([ratios[key, s] for s in SSE_SCENARIOS], 2, "x") for key in keys),
        "≥ 3x both",
        min(present) >= 3 if present else None,
        rounds,
    )


def worker_row(raw: dict[str, Any]) -> Row:
    rounds = {r["round"]: r["overhead_ms"] / r["round_trip_ms"] for r in raw["workers"] if r["round_trip_ms"]}
    ratio = run.median(list(rounds.values()))
    return Row(
        "worker call: dispatch overhead (worker - inline), median",
        f"{run.fmt(run.median([r['overhead_ms'] for r in raw['workers']]), 2)} ms",
        f"bare Celery round trip, {run.fmt(run.median([r['round_trip_ms'] for r in raw['workers']]), 2)} ms",
        f"{run.fmt(ratio, 2)}x",
        "≤ 2x",
        ratio <= 2 if ratio is not None else None,
        rounds,
    )


def proxied_row(raw: dict[str, Any]) -> Row:
    runs = raw["upstreams"]
    rounds = {
        r["round"]: r["proxied"]["median_ms"] / (r["local"]["median_ms"] + r["direct_http"]["median_ms"]) for r in runs
    }
    ratio = run.median(list(rounds.values()))
    local = run.median([r["local"]["median_ms"] for r in runs])
    direct = run.median([r["direct_http"]["median_ms"] for r in runs])
    both = local + direct if local is not None and direct is not None else None
    return Row(
        "proxied upstream `echo`, SDK client, median",
        f"{run.fmt(run.median([r['proxied']['median_ms'] for r in runs]), 2)} ms",
        f"own `echo` {run.fmt(local, 2)} ms + direct upstream POST {run.fmt(direct, 2)} ms = {run.fmt(both, 2)} ms",
        f"{run.fmt(ratio, 2)}x",
        "≤ 1.0x",
        ratio <= 1.0 if ratio is not None else None,
        rounds,
    )


def daphne_cpu_row(raw: dict[str, Any]) -> Row:
    runs = raw["upstreams"]
    rounds = {r["round"]: r["proxied"]["daphne_cpu_ms"] - r["local"]["daphne_cpu_ms"] for r in runs}
    added = run.median(list(rounds.values()))
    return Row(
        "daphne CPU per proxied call",
        f"{run.fmt(run.median([r['proxied']['daphne_cpu_ms'] for r in runs]), 2)} ms",
        f"daphne CPU per own `echo` call, {run.fmt(run.median([r['local']['daphne_cpu_ms'] for r in runs]), 2)} ms",
        "n/a" if added is None else f"{added:+.2f} ms",
        "≤ +1 ms",
        added <= 1.0 if added is not None else None,
        rounds,
    )


def rows(raw: dict[str, Any], args: argparse.Namespace) -> list[Row]:
    return [
        call_row(
            raw,
            "daphne",
            ("floor-daphne", "baseline"),
            "warm `tools/call echo`, daphne, SQLite / PostgreSQL + Redis (server CPU per call)",
            "Channels `AsyncHttpConsumer`",
            "1.3",
        ),
        call_row(
            raw,
            "uvicorn",
            ("sdk-stateless", "modern"),
            "the same under uvicorn[standard]",
            "the SDK's best mode (stateless JSON, 2026-07-28)",
            "1.0",
        ),
        sse_row(raw, args),
        worker_row(raw),
        proxied_row(raw),
        daphne_cpu_row(raw),
    ]


def markdown(raw: dict[str, Any], args: argparse.Namespace) -> str:
    setup, table = raw["setup"], rows(raw, args)
    others = [r["other_cpu_cores"] for r in raw["throughput"] if r.get("other_cpu_cores") is not None]
    numbers = sorted({n for row in table for n in row.rounds})
    lines = [
        f"`python -m bench.floors` at `{setup['commit']}`, {setup['date']}: {setup['machine']}; {setup['databases']}. "
        f"Median of {args.rounds} interleaved round(s); c={LEVEL}, {args.duration:g} s per load run after "
        f"{args.warmup:g} s warm-up; {args.worker_samples} worker and inline calls and round trips, "
        f"{args.upstream_samples} calls of each upstream kind per round. Other CPU during the load runs "
        f"(database, Redis, kernel, anyone else): median {run.fmt(run.median(others), 2)} cores. "
        f"{setup['seconds']} s in all.",
        "",
        "| path | mcp-host | its floor, same run | ratio | target | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in table:
        met = "n/a" if row.met is None else ("yes" if row.met else "**no**")
        lines.append(f"| {row.path} | {row.mine} | {row.floor} | {row.ratio} | {row.target} | {met} |")
    lines += [
        "",
        "Each round's worst ratio (row 6: difference), for the spread:",
        "",
        "| row | " + " | ".join(f"round {n}" for n in numbers) + " |",
        "|---|" + "---:|" * len(numbers),
    ]
    for index, row in enumerate(table, 1):
        unit = " ms" if index == 6 else "x"
        cells = [
            f"{row.rounds[n]:+.2f}{unit}" if index == 6 else f"{row.rounds[n]:.2f}{unit}"
            for n in numbers
            if n in row.rounds
        ]
        lines.append(f"| {index} | " + " | ".join(cells) + " |")
    errors = sum(r["errors"] for r in [*raw["throughput"], *raw["sse"]])
    if errors:
        lines += ["", f"**{errors} load-generator requests failed** (see the JSON)."]
    return "\n".join(lines) + "\n"


# The command ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.floors", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are medians (default 3)")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per load run (default 3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each (default 1)")
    parser.add_argument("--sse-streams", type=int, default=64, help="concurrent SSE streams (default 64)")
    parser.add_argument("--sse-events", type=int, default=10, help="progress events per stream (default 10)")
    parser.add_argument("--worker-samples", type=int, default=200, help="row 4's calls of each kind (default 200)")
    parser.add_argument("--worker-concurrency", type=int, default=8, help="the worker's threads (default 8)")
    parser.add_argument("--upstream-samples", type=int, default=200, help="rows 5-6's calls of each (default 200)")
    parser.add_argument("--upstream-block", type=int, default=50, help="calls of one kind in a row (default 50)")
    parser.add_argument("--upstream-warmup", type=int, default=20, help="unmeasured calls of each (default 20)")
    parser.add_argument("--server-core", type=int, default=0, help="the core of rows 1-3's servers (default 0)")
    parser.add_argument("--client-core", type=int, default=1, help="the load generator's core (default 1)")
    parser.add_argument("--quiet-wait", type=float, default=2.0, help="longest wait for an idle machine (default 2)")
    parser.add_argument("--quiet-cores", type=float, default=0.3, help="busy cores that count as idle (0.3)")
    parser.add_argument("--quick", action="store_true", help="1.5 s load runs, 50 samples: a smoke run")
    parser.add_argument("--markdown-out", type=Path, help="also write the table to this file")
    parser.add_argument("--json-out", type=Path, help="also write every raw result to this file")
    parser.add_argument("--from-json", type=Path, help="print the table of an earlier --json-out file, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (database, logs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.quiet_wait = 1.5, 0.5, 0.5
        args.worker_samples, args.upstream_samples, args.upstream_block, args.upstream_warmup = 50, 50, 25, 10
    if not 1 <= args.rounds <= 10 or not 0 < args.duration <= 60 or not 0 <= args.warmup <= 30:
        parser.error("bounds: 1 <= --rounds <= 10, 0 < --duration <= 60, 0 <= --warmup <= 30")
    if not 1 <= args.sse_streams <= 256 or not 1 <= args.sse_events <= 100:
        parser.error("bounds: 1 <= --sse-streams <= 256, 1 <= --sse-events <= 100")
    if not 1 <= args.worker_samples <= 10_000 or not 1 <= args.upstream_samples <= 10_000:
        parser.error("bounds: 1 <= --worker-samples, --upstream-samples <= 10000")
    if not 1 <= args.worker_concurrency <= 64 or args.upstream_block < 1 or not 0 <= args.upstream_warmup <= 1000:
        parser.error("bounds: 1 <= --worker-concurrency <= 64, 1 <= --upstream-block, 0 <= --upstream-warmup <= 1000")
    if not args.from_json and not (
        os.environ.get("DATABASE_URL", "").startswith("postgres") and os.environ.get("REDIS_URL")
    ):
        parser.error("needs DATABASE_URL (PostgreSQL) and REDIS_URL: rows 1-3 run on both, rows 4-6 need them")
    return args


SAVED = (
    "rounds",
    "duration",
    "warmup",
    "sse_streams",
    "sse_events",
    "worker_samples",
    "worker_concurrency",
    "upstream_samples",
)


def main(argv: Sequence[str] | None = None, printer: Callable[[str], None] = print) -> int:
    args = parse_args(argv)
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        for name in SAVED:
            setattr(args, name, raw["args"][name])
    else:
        cores = os.cpu_count() or 1
        if cores < 2 or args.server_core >= cores or args.client_core >= cores:
            run.say(f"{cores} CPU(s): no pinning")
            args.server_core = args.client_core = None
        # A SIGTERM (from `timeout`, make being interrupted) unwinds like an exception: every child is stopped.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        tmp = Path(tempfile.mkdtemp(prefix="mcp-floors-"))
        run.say(f"work dir {tmp}")
        try:
            raw = benchmark(args, tmp)
        finally:
            if args.keep:
                run.say(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        raw["args"] = {name: getattr(args, name) for name in SAVED}
        run.say(f"done in {raw['setup']['seconds']} s")
    text = markdown(raw, args)
    printer("\n" + text)
    if args.markdown_out:
        args.markdown_out.write_text(text)
    if args.json_out and not args.from_json:
        args.json_out.write_text(json.dumps(raw, indent=2) + "\n")
    return 1 if sum(r["errors"] for r in [*raw["throughput"], *raw["sse"]]) else 0


if __name__ == "__main__":
    sys.exit(main())
