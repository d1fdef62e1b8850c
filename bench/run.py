"""Run the benchmark matrix against real daphne processes and print a markdown table (``make bench``).

1. Makes a temporary directory. Unless ``DATABASE_URL`` is set, the database is a fresh SQLite file in it; a set
   ``DATABASE_URL`` (PostgreSQL, say) and ``REDIS_URL`` are passed through to every child process unchanged.
2. Migrates, runs ``mcp_demo --json`` for a token, and starts two daphne processes on free loopback ports: mcp-host
   (``mcp_host.asgi:application``) and the floor (``bench.baseline_app:application``), and polls each (bounded)
   until it answers its scenario's request.
3. Warms every scenario up once, then for each concurrency runs the scenarios side by side (baseline, legacy,
   modern) with the ``bench.load`` generator in this process: ``--warmup`` seconds unmeasured on the same
   connections, then ``--duration`` seconds measured. Around the measured phase it reads, from ``/proc``, the
   server process's CPU time and the whole machine's busy time; what neither the server nor the load generator
   used is reported as "other" (database server, kernel networking, anyone else's work on the machine).
4. Before each run it waits (at most ``--quiet-wait`` s) for the machine to be idle, since on a shared machine a
   test suite running next door halves the throughput. ``--repeat N`` runs the whole matrix N times and keeps,
   per cell, the round with the highest throughput (interference only ever slows a run down), showing the range.
5. Stops the servers (terminate, then kill after a grace period), removes the directory unless ``--keep``, and
   prints the table; ``--json-out`` also writes every raw result. Exits 1 if any request failed.

The modern scenario targets the ``demo-modern`` server (2026-07-28 only) when the demo has one that answers the
token, otherwise ``demo``, which speaks both eras. Everything stays on 127.0.0.1 and every step is bounded.

    python -m bench.run --duration 5 --concurrency 1,16,64 --repeat 3 --json-out /tmp/bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.load import SCENARIOS, RawConnection, build_target, response_error
from bench.load import run as run_load

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
SETUP_TIMEOUT_S = 300.0
MODERN_SERVER = "demo-modern"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Endpoints:
    """What the load generator is pointed at."""

    legacy_url: str
    modern_url: str
    baseline_url: str
    token: str

    def url(self, scenario: str) -> str:
        urls = {"legacy": self.legacy_url, "session": self.legacy_url, "modern": self.modern_url}
        return urls.get(scenario, self.baseline_url)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def child_env(tmp: Path, port: int) -> dict[str, str]:
    """The environment of every child: a fresh SQLite file unless DATABASE_URL is set; REDIS_URL as given."""
    env = dict(os.environ)
    if not env.get("DATABASE_URL"):
        sqlite = tmp / "bench.sqlite3"
        env["DATABASE_URL"] = f"sqlite:///{sqlite}"  # sqlite:////tmp/…: absolute path
        env["MCP_SQLITE_PATH"] = str(sqlite)
    env.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
    env["MCP_PUBLIC_URL"] = f"http://{HOST}:{port}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def describe_services(env: dict[str, str]) -> dict[str, str]:
    """Database and channel layer in use, without credentials."""
    database = urlsplit(env["DATABASE_URL"])
    redis = urlsplit(env["REDIS_URL"]) if env.get("REDIS_URL") else None
    return {
        "settings": env["DJANGO_SETTINGS_MODULE"],
        "database": "SQLite (temporary file)"
        if database.scheme.startswith("sqlite")
        else f"{database.scheme}://{database.hostname}:{database.port or ''}{database.path}",
        "channel_layer": f"Redis {redis.hostname}:{redis.port or 6379}{redis.path}"
        if redis
        else "in-memory (no REDIS_URL)",
    }


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def daphne_command(application: str, port: int) -> list[str]:
    script = Path(sys.executable).with_name("daphne")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "daphne"]
    return [*launcher, "-b", HOST, "-p", str(port), application]


@contextlib.contextmanager
def serving(application: str, port: int, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A daphne process for the duration of the block; terminated (then killed) on the way out."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            daphne_command(application, port), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)


async def probe(url: str, token: str | None, scenario: str) -> str | None:
    """One request of ``scenario``; ``None`` when it succeeds, else why not."""
    connection = RawConnection(build_target(url, token, scenario))
    try:
        status, body = await asyncio.wait_for(connection.exchange(), 5.0)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await connection.close()
    return response_error(status, body)


def wait_ready(process: subprocess.Popen[bytes], url: str, token: str | None, scenario: str, log: Path) -> None:
    """Poll with one request every 100 ms until it succeeds, the process dies, or READY_TIMEOUT_S passes."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem: str | None = "not polled"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        problem = asyncio.run(probe(url, token, scenario))
        if problem is None:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {READY_TIMEOUT_S:g} s: {problem}\n{log.read_text()[-4000:]}")


def system_busy_seconds() -> float | None:
    """CPU time all cores spent on anything but idle and I/O wait since boot, from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in first[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def process_table() -> dict[int, tuple[str, float]]:
    """CPU time of every process now, by pid, with its command name (``comm``)."""
    table: dict[int, tuple[str, float]] = {}
    if not Path("/proc/self/stat").exists():
        return table
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        # utime and stime, fields 14 and 15 of proc_pid_stat(5), counted after the ")" that ends the name
        table[int(entry.name)] = (name, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return table


class CpuMeter:
    """Reads CPU time around the measured phase: the server's, the machine's, and every other process's by name.

    The by-name figures tell the database server (``postgres``) from other people's work (``pytest``); a process
    that starts and ends inside the window is not seen there, only in the machine's total.
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._system: float | None = None
        self._processes: dict[int, tuple[str, float]] = {}

    def start(self) -> None:
        self._processes, self._system = process_table(), system_busy_seconds()

    def stop(self) -> dict[str, Any]:
        system, processes = system_busy_seconds(), process_table()
        fields: dict[str, Any] = {}
        if system is not None and self._system is not None:
            fields["system_busy_s"] = round(system - self._system, 3)
        if self._pid in processes and self._pid in self._processes:
            fields["server_cpu_s"] = round(processes[self._pid][1] - self._processes[self._pid][1], 3)
        others: dict[str, float] = {}
        for pid, (name, cpu) in processes.items():
            if pid in (self._pid, os.getpid()):
                continue
            used = cpu - self._processes.get(pid, (name, 0.0))[1]  # a process born meanwhile: all of its time
            if used > 0:
                others[name] = others.get(name, 0.0) + used
        top = sorted(others.items(), key=lambda item: item[1], reverse=True)[:3]
        fields["other_cpu_s_by_name"] = {name: round(used, 2) for name, used in top if used >= 0.05}
        return fields


def wait_for_quiet(max_wait: float, threshold: float) -> float | None:
    """Wait (at most ``max_wait`` s) for a 1 s window in which fewer than ``threshold`` cores are busy.

    Called between runs, when this benchmark's own processes are idle, so that whatever is busy belongs to
    someone else. Returns the busy cores of the last window (``None`` without /proc).
    """
    deadline = time.monotonic() + max_wait
    while True:
        before = system_busy_seconds()
        time.sleep(1.0)
        after = system_busy_seconds()
        if before is None or after is None:
            return None
        busy = after - before
        if busy <= threshold or time.monotonic() >= deadline:
            return round(busy, 2)


def measure(
    endpoints: Endpoints, pid: int, scenario: str, concurrency: int, duration: float, warmup: float
) -> dict[str, Any]:
    """One run of the load generator in this process: warm-up on the same connections, then measurement."""
    target = build_target(endpoints.url(scenario), endpoints.token if scenario != "baseline" else None, scenario)
    result = asyncio.run(
        run_load(
            target,
            scenario=scenario,
            client="raw",
            concurrency=concurrency,
            requests=None,
            duration=duration,
            warmup=warmup,
            meters=[CpuMeter(pid)],
        )
    )
    if "server_cpu_s" in result and result["requests"]:
        result["server_cpu_ms_per_req"] = round(result["server_cpu_s"] / result["requests"] * 1000, 3)
        result["server_cpu_pct"] = round(result["server_cpu_s"] / result["elapsed_s"] * 100, 1)
        if "system_busy_s" in result:
            # Everything else that ran meanwhile: the database server, kernel networking, other people's work.
            other = result["system_busy_s"] - result["server_cpu_s"] - result["client_cpu_s"]
            result["other_cpu_cores"] = round(max(other, 0.0) / result["elapsed_s"], 2)
    return result


def best(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The round with the highest throughput: interference only ever slows a run down."""
    return max(results, key=lambda result: result["rps"]) if results else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def table(cells: dict[tuple[str, int], list[dict[str, Any]]], scenarios: Sequence[str], levels: Sequence[int]) -> str:
    """One markdown row per (scenario, concurrency), from the best round; the req/s range over all rounds."""
    labels = {
        "baseline": "baseline (bare ASGI)",
        "legacy": "legacy stateless",
        "session": "legacy on a session",
        "modern": "modern stateless",
    }
    lines = [
        "| scenario | conc. | req/s | req/s range | vs baseline | p50 ms | p99 ms | errors "
        "| server CPU ms/req | client CPU ms/req | other CPU (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for concurrency in levels:
        floor = best(cells.get(("baseline", concurrency), []))
        for scenario in scenarios:
            results = cells.get((scenario, concurrency), [])
            top = best(results)
            if top is None:
                continue
            rates = [result["rps"] for result in results]
            ratio = f"{top['rps'] / floor['rps']:.1%}" if floor and floor["rps"] else "n/a"
            client = top.get("client_cpu_us_per_req")
            lines.append(
                f"| {labels[scenario]} | {concurrency} | {fmt(top['rps'])} | {fmt(min(rates), 0)}-{fmt(max(rates), 0)} "
                f"| {ratio} | {fmt(top['p50_ms'], 2)} | {fmt(top['p99_ms'], 2)} "
                f"| {sum(result['errors'] for result in results)} | {fmt(top.get('server_cpu_ms_per_req'), 2)} "
                f"| {fmt(client / 1000 if client is not None else None, 2)} | {fmt(top.get('other_cpu_cores'), 2)} |"
            )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per run (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each run (default 1)")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated levels (default 1,16,64)")
    parser.add_argument(
        "--scenarios", default="baseline,legacy,session,modern", help="comma-separated, run in this order"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole matrix; best kept (default 1)")
    parser.add_argument(
        "--quiet-wait", type=float, default=20.0, help="longest wait for an idle machine before each run (default 20)"
    )
    parser.add_argument(
        "--quiet-cores", type=float, default=0.3, help="busy cores below which the machine counts as idle (0.3)"
    )
    parser.add_argument("--json-out", type=Path, help="also write all raw results and the setup to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (database, logs)")
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.concurrency.split(",") if level.strip()]
    args.scenario_list = [scenario.strip() for scenario in args.scenarios.split(",") if scenario.strip()]
    if unknown := set(args.scenario_list) - set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if not 0 < args.duration <= 60 or not 0 <= args.warmup <= 30 or not 1 <= args.repeat <= 10:
        parser.error("bounds: 0 < --duration <= 60, 0 <= --warmup <= 30, 1 <= --repeat <= 10")
    if not 0 <= args.quiet_wait <= 600:
        parser.error("bounds: 0 <= --quiet-wait <= 600")
    if not args.levels or any(not 1 <= level <= 256 for level in args.levels):
        parser.error("--concurrency levels must be between 1 and 256")
    return args


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def benchmark(args: argparse.Namespace, tmp: Path, services: dict[str, str]) -> dict[str, Any]:
    """Set up, serve, run the matrix; return the setup and every result."""
    mcp_port, baseline_port = free_port(), free_port()
    env = child_env(tmp, mcp_port)
    manage(env, "migrate", "--noinput")
    demo = json.loads(manage(env, "mcp_demo", "--json", "--base-url", f"http://{HOST}:{mcp_port}"))
    legacy_url = demo["url"]
    endpoints = Endpoints(legacy_url, legacy_url, f"http://{HOST}:{baseline_port}/", demo["token"])
    results: list[dict[str, Any]] = []
    with (
        serving("mcp_host.asgi:application", mcp_port, env, tmp / "mcp-daphne.log") as mcp,
        serving("bench.baseline_app:application", baseline_port, env, tmp / "baseline-daphne.log") as floor,
    ):
        wait_ready(mcp, legacy_url, endpoints.token, "legacy", tmp / "mcp-daphne.log")
        wait_ready(floor, endpoints.baseline_url, None, "baseline", tmp / "baseline-daphne.log")
        modern_url = legacy_url.replace(f"/mcp/{demo['server_id']}", f"/mcp/{MODERN_SERVER}", 1)
        if asyncio.run(probe(modern_url, endpoints.token, "modern")) is None:
            endpoints = Endpoints(legacy_url, modern_url, endpoints.baseline_url, endpoints.token)
        say(f"ready: mcp-host :{mcp_port} (modern on {urlsplit(endpoints.modern_url).path}), baseline :{baseline_port}")
        pids = {scenario: floor.pid if scenario == "baseline" else mcp.pid for scenario in SCENARIOS}
        for scenario in args.scenario_list:  # first touch of every code path, at the highest concurrency
            measure(endpoints, pids[scenario], scenario, max(args.levels), max(args.warmup, 1.0), 0.0)
        for round_number in range(1, args.repeat + 1):
            for concurrency in args.levels:
                for scenario in args.scenario_list:
                    idle = wait_for_quiet(args.quiet_wait, args.quiet_cores)
                    result = measure(endpoints, pids[scenario], scenario, concurrency, args.duration, args.warmup)
                    result.update(round=round_number, busy_cores_before=idle)
                    results.append(result)
                    say(json.dumps(result))
    setup = {
        **services,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "repeat": args.repeat,
        "modern_server": urlsplit(endpoints.modern_url).path,
    }
    return {"setup": setup, "results": results}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # A SIGTERM (from `timeout`, CI, make being interrupted) unwinds like an exception: servers stopped, files removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tmp = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    services = describe_services(child_env(tmp, 0))
    say(
        f"work dir {tmp}; settings {services['settings']}; database {services['database']}; "
        f"channel layer {services['channel_layer']}"
    )
    try:
        outcome = benchmark(args, tmp, services)
    finally:
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for result in outcome["results"]:
        cells.setdefault((result["scenario"], result["concurrency"]), []).append(result)
    setup = outcome["setup"]
    print(
        f"\n{setup['settings']}; {setup['database']}; channel layer {setup['channel_layer']}; {setup['machine']}; "
        f"{args.duration:g} s per run after {args.warmup:g} s warm-up; best of {args.repeat} round(s)\n"
    )
    print(table(cells, args.scenario_list, args.levels))
    if args.json_out:
        args.json_out.write_text(json.dumps(outcome, indent=2) + "\n")
    return 1 if any(result["errors"] for result in outcome["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
