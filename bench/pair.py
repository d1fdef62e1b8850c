"""Paired runs of two checkouts of mcp-host beside their floors, for a before/after on a shared machine.

``bench.run`` measures its servers one after the other, so a machine whose load changes from minute to minute
moves a ratio between runs as much as a change does. Here the before and after servers (daphne and uvicorn each),
the Channels floor and the SDK's stateless app all start at once on one core; then every round loads each of them
in turn for a few seconds (c=16, stateless ``echo``, rate limits off as in ``bench.run``) and the ratios are taken
per round: mcp-host on daphne over the floor, on uvicorn over the SDK (server CPU per call). Both checkouts share
one database (SQLite in a temporary directory, or ``DATABASE_URL`` with ``REDIS_URL``): their schemas must match.

    python -m bench.pair --before /tmp/before --after . --rounds 6 [--database postgres] [--sse | --idle-streams N]

With ``--sse`` the servers are the before and after checkouts on daphne and the SDK's stateful app, and each round
runs ``bench.run``'s SSE session scenario on each (``--sse-streams`` streams of ``progress_demo`` with
``--sse-events`` progress events): the ratios are the SDK's CPU per stream over mcp-host's, and mcp-host's
streams/s over the SDK's.

With ``--idle-streams N`` it measures memory instead: each round starts, one at a time and in a rotated order, a
fresh daphne of each checkout and the SDK's stateful app (the reference), opens ``N`` sessions each holding an
idle GET stream (``bench.run.measure_memory``, after 20 to warm the code paths), and reports the server's RSS per
stream (and Redis's, on PostgreSQL + Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.load import build_target
from bench.load import run as run_load
from bench.run import HOST, CpuMeter, Running, ServerSpec, free_port, measure_memory, wait_ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="checkout of the version before")
    parser.add_argument("--after", required=True, help="checkout of the version after")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per server and round")
    parser.add_argument("--core", default="0", help="the core of every server")
    parser.add_argument("--idle-streams", type=int, default=0, help="measure RSS per idle GET stream instead")
    parser.add_argument("--sse", action="store_true", help="SSE session streams against the SDK stateful")
    parser.add_argument("--sse-streams", type=int, default=64)
    parser.add_argument("--sse-events", type=int, default=10)
    args = parser.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    work = Path(tempfile.mkdtemp(prefix="mcp-pair-"))
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="mcp_host.settings")
    env["MCP_RATE_LIMIT_PER_TENANT"] = env["MCP_RATE_LIMIT_PER_AGENT"] = "0"
    if args.database == "sqlite":
        env.pop("REDIS_URL", None)
        env["DATABASE_URL"] = f"sqlite:///{work}/pair.sqlite3"
        env["MCP_SQLITE_PATH"] = f"{work}/pair.sqlite3"
    elif not (env.get("DATABASE_URL") and env.get("REDIS_URL")):
        parser.error("postgres needs DATABASE_URL and REDIS_URL")
    python = sys.executable
    processes: dict[str, subprocess.Popen[bytes]] = {}
    targets: dict[str, tuple[str, str | None, str]] = {}

    def start(key: str, tree: str, argv: list[str], port: int) -> None:
        server_env = dict(env, PYTHONPATH=tree, MCP_PUBLIC_URL=f"http://{HOST}:{port}")
        with (work / f"{key}.log").open("wb") as log:
            processes[key] = subprocess.Popen(
                ["taskset", "-c", args.core, *argv], cwd=tree, env=server_env, stdout=log, stderr=subprocess.STDOUT
            )

    def manage(tree: str, *command: str) -> str:
        done = subprocess.run(
            [python, "manage.py", *command], cwd=tree, env=dict(env, PYTHONPATH=tree), capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(done.stderr)
        return done.stdout

    steps = args.sse_events if args.sse else 0
    concurrency = args.sse_streams if args.sse else 16
    rates: dict[str, list[float]] = {}

    def measure(key: str, duration: float) -> float | None:
        url, token, scenario = targets[key]
        meter = CpuMeter(processes[key].pid)
        # A session per client in the SSE run, as bench.run does (the SDK loses answers when they share one).
        workers = [build_target(url, token, scenario, steps) for _ in range(concurrency)] if args.sse else None
        result: dict[str, Any] = asyncio.run(
            run_load(
                build_target(url, token, scenario, steps),
                scenario=scenario,
                client="raw",
                concurrency=concurrency,
                requests=None,
                duration=duration,
                warmup=0.5,
                meters=[meter],
                worker_targets=workers,
            )
        )
        if result.get("errors"):
            print(f"{key}: {result['errors']} errors", file=sys.stderr, flush=True)
        rates.setdefault(key, []).append(float(result.get("rps") or 0.0))
        return result["server_cpu_s"] / result["ok"] * 1e6 if result.get("ok") and "server_cpu_s" in result else None

    try:
        manage(trees["after"], "migrate", "--noinput")  # one database, one demo token for both
        demo = json.loads(manage(trees["after"], "mcp_demo", "--json", "--base-url", f"http://{HOST}:8000"))
        path = demo["url"].split("8000", 1)[1]
        if args.idle_streams:
            idle_rounds(args, trees, demo, path, start, processes, work, env.get("REDIS_URL"), manage)
            return
        for tag, tree in trees.items():
            for runner in ("daphne",) if args.sse else ("daphne", "uvicorn"):
                port = free_port()
                app = "mcp_host.asgi:application"
                quiet = ["--no-access-log", "--log-level", "warning", "--lifespan", "off"]
                argv = (
                    [python, "-m", "daphne", "-v", "0", "-b", HOST, "-p", str(port), app]
                    if runner == "daphne"
                    else [python, "-m", "uvicorn", app, "--host", HOST, "--port", str(port), *quiet]
                )
                start(f"{tag}-{runner}", tree, argv, port)
                scenario = "session" if args.sse else "legacy"
                targets[f"{tag}-{runner}"] = (f"http://{HOST}:{port}{path}", demo["token"], scenario)
        if args.sse:
            port = free_port()
            start("sdk", trees["after"], [python, "-m", "uvicorn", "bench.sdk_server:stateful", "--host", HOST,
                                          "--port", str(port), "--no-access-log", "--log-level", "warning"], port)  # fmt: skip
            targets["sdk"] = (f"http://{HOST}:{port}/mcp", None, "session")
        else:
            port = free_port()
            floor = [python, "-m", "daphne", "-v", "0", "-b", HOST, "-p", str(port), "bench.channels_floor:application"]
            start("floor", trees["after"], floor, port)
            targets["floor"] = (f"http://{HOST}:{port}/", None, "baseline")
            port = free_port()
            start("sdk", trees["after"], [python, "-m", "uvicorn", "bench.sdk_server:stateless", "--host", HOST,
                                          "--port", str(port), "--no-access-log", "--log-level", "warning"], port)  # fmt: skip
            targets["sdk"] = (f"http://{HOST}:{port}/mcp", None, "modern")
        for key in targets:  # ready: a short load that succeeds
            deadline = time.monotonic() + 90
            while True:
                try:
                    if measure(key, 0.5) is not None:
                        break
                except (OSError, RuntimeError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{key} not ready; see {work}/{key}.log")
                time.sleep(1)
        rates.clear()
        cpu: dict[str, list[float]] = {key: [] for key in targets}
        unit = "stream" if args.sse else "call"
        for round_ in range(args.rounds):
            for key in targets:
                value = measure(key, args.duration)
                cpu[key].append(value if value is not None else float("nan"))
                line = f"round {round_ + 1} {key:15s} {cpu[key][-1]:7.1f} µs/{unit} {rates[key][-1]:8.1f}/s"
                print(line, file=sys.stderr, flush=True)
        if args.sse:
            for tag in trees:
                by_cpu = [ref / mine for mine, ref in zip(cpu[f"{tag}-daphne"], cpu["sdk"], strict=True)]
                by_rate = [mine / ref for mine, ref in zip(rates[f"{tag}-daphne"], rates["sdk"], strict=True)]
                for name, ratios in (("SDK CPU / mcp-host CPU per stream", by_cpu), ("streams/s ratio", by_rate)):
                    rounds = ", ".join(f"{ratio:.2f}" for ratio in ratios)
                    print(f"{tag} {name}: median {statistics.median(ratios):.2f} (rounds: {rounds})")
        else:
            for tag in trees:
                for runner, floor_key in (("daphne", "floor"), ("uvicorn", "sdk")):
                    ratios = [mine / ref for mine, ref in zip(cpu[f"{tag}-{runner}"], cpu[floor_key], strict=True)]
                    rounds = ", ".join(f"{ratio:.2f}" for ratio in ratios)
                    print(f"{tag} {runner}/{floor_key}: median {statistics.median(ratios):.2f} (rounds: {rounds})")
        for key, values in cpu.items():
            print(f"{key}: median {statistics.median(values):.0f} µs of server CPU per {unit}, "
                  f"{statistics.median(rates[key]):.1f}/s")  # fmt: skip
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


PURGE_SESSIONS = "from mcp_app.models import McpSession; McpSession.objects.all().delete()"


def idle_rounds(
    args: argparse.Namespace,
    trees: dict[str, str],
    demo: dict[str, Any],
    path: str,
    start: Any,
    processes: dict[str, subprocess.Popen[bytes]],
    work: Path,
    redis_url: str | None,
    manage: Any,
) -> None:
    """RSS per idle GET stream of each checkout's daphne and of the SDK, fresh processes, interleaved rounds."""
    python = sys.executable
    keys = [*trees, "sdk"]
    per_stream: dict[str, list[float]] = {key: [] for key in keys}
    marginal: dict[str, list[float]] = {key: [] for key in keys}
    redis: dict[str, list[float]] = {key: [] for key in keys}
    for round_ in range(args.rounds):
        shift = round_ % len(keys)
        for key in keys[shift:] + keys[:shift]:
            port = free_port()
            if key == "sdk":
                app, tree = "bench.sdk_server:stateful", trees["after"]
                argv = [python, "-m", "uvicorn", app, "--host", HOST, "--port", str(port), "--no-access-log"]
                argv += ["--log-level", "warning"]
                url, token = f"http://{HOST}:{port}/mcp", None
            else:
                tree = trees[key]
                argv = [python, "-m", "daphne", "-v", "0", "-b", HOST, "-p", str(port), "mcp_host.asgi:application"]
                url, token = f"http://{HOST}:{port}{path}", demo["token"]
            start(key, tree, argv, port)
            spec = ServerSpec(key, key, "sdk" if key == "sdk" else "mcp", "daphne", "")
            server = Running(spec, processes[key], port, work / f"{key}.log", token, {"session": url})
            try:
                wait_ready(server, "session")
                measure_memory(server, 20, None)  # warm: the code paths of a session and its stream
                result = measure_memory(
                    server, args.idle_streams, os.environ.get("REDIS_URL") if key != "sdk" else None
                )
            finally:
                processes.pop(key).terminate()
                server.process.wait(10)
                if key != "sdk":  # the next server's sessions start from none (SESSIONS_PER_AGENT)
                    manage(trees["after"], "shell", "-c", PURGE_SESSIONS)
            per_stream[key].append(result.get("kib_per_stream", float("nan")))
            marginal[key].append(result.get("kib_per_stream_marginal", float("nan")))
            redis[key].append(result.get("redis_kib_per_stream", float("nan")))
            print(f"round {round_ + 1} {key:7s} {json.dumps(result)}", file=sys.stderr, flush=True)
    for key in keys:
        rounds = ", ".join(f"{value:.1f}" for value in per_stream[key])
        line = f"{key}: median {statistics.median(per_stream[key]):.1f} KiB RSS per idle stream (rounds: {rounds})"
        rounds = ", ".join(f"{value:.1f}" for value in marginal[key])
        line += f"; one more stream: median {statistics.median(marginal[key]):.1f} KiB (rounds: {rounds})"
        if key != "sdk" and redis_url:
            line += f", Redis median {statistics.median(redis[key]):.1f} KiB"
        print(line)


if __name__ == "__main__":
    main()
