"""The side-by-side benchmark (``make bench``): every server on one core, the load generator on another.

One run starts, on free loopback ports and each pinned to ``--server-core`` (``taskset``), the servers of
``server_specs``: the bare ASGI app on daphne (the ceiling of our server) and on uvicorn, a minimal Channels
consumer on daphne (the floor of our stack, ``bench/channels_floor.py``), the official SDK (``mcp`` package,
``bench/sdk_server.py``) stateful and stateless-JSON under uvicorn, and mcp-host (``mcp_host.asgi:application``)
under daphne and under uvicorn, on SQLite with the in-memory layer and, when ``DATABASE_URL`` and ``REDIS_URL``
are set, on PostgreSQL + Redis as well. With ``--levers`` (the default) the bare app, the floor and mcp-host on
daphne also run with the daphne/Twisted levers of ``mcp_app/transport/twisted_compat.py``.

The load generator (``bench.load``, this process, pinned to ``--client-core``) then runs, for each round, each
concurrency and each server (in an order rotated every round), the server's scenarios: ``tools/call`` of
``echo`` stateless (2025-11-25 headers), on a session and in the 2026-07-28 envelope; ``--warmup`` s
unmeasured on the same connections, then ``--duration`` s measured, with the server's CPU time read from
``/proc/<pid>/stat`` around the measured phase. Then the SSE runs (``--sse-streams`` concurrent ``tools/call``
of ``progress_demo`` with ``--sse-events`` progress notifications each, as streams per second), and, once after
the last round, the memory run: ``--idle-streams`` sessions each holding an idle GET stream, the server's RSS
(and Redis's ``used_memory``) before and after.

Every figure is the median over the rounds (``--rounds``); the "vs bare" ratio is the median of the per-round
ratios against the bare app on daphne at the same concurrency, measured in the same round. Before each
measured run the runner waits (at most ``--quiet-wait`` s) for the machine to be idle. Results go to stdout as
markdown tables (plus a table of issue 8's targets, met or not), and to ``--markdown-out``/``--json-out``.

    python -m bench.run                     # one full round (≈ 8 min with PostgreSQL + Redis on 2 cores)
    python -m bench.run --rounds 3 --markdown-out /tmp/bench.md --json-out /tmp/bench.json
    python -m bench.run --quick             # c=16 only, short runs, no levers: a 2-minute smoke run
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
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.load import IdleStreams, RawConnection, build_target, response_error
from bench.load import run as run_load

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
SETUP_TIMEOUT_S = 300.0
MODERN_SERVER = "demo-modern"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
SCENARIO_LABELS = {
    "baseline": "tools/call (fixed answer)",
    "legacy": "stateless",
    "session": "session",
    "modern": "2026-07-28",
}


# The servers ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """One server process of the run and what is measured against it."""

    key: str
    label: str
    kind: str  # "bare" | "floor" | "sdk" | "mcp"
    runner: str  # "daphne" | "uvicorn"
    app: str
    db: str = "sqlite"  # the environment it runs in: "sqlite" or "postgres"
    levers: bool = False
    scenarios: tuple[str, ...] = ()
    sse: tuple[str, ...] = ()  # scenarios of the SSE run
    memory: bool = False  # in the idle-stream memory run
    lifespan: bool = True  # uvicorn only: Channels' router has no lifespan


def server_specs(databases: Sequence[str], levers: bool, uvicorn_bare: bool = True) -> list[ServerSpec]:
    names = {"sqlite": "SQLite", "postgres": "PostgreSQL + Redis"}
    specs = [
        ServerSpec("bare-daphne", "bare ASGI app / daphne", "bare", "daphne", "bench.baseline_app:application"),
        ServerSpec("floor-daphne", "Channels floor / daphne", "floor", "daphne", "bench.channels_floor:application"),
        ServerSpec("sdk-stateful", "SDK stateful / uvicorn", "sdk", "uvicorn", "bench.sdk_server:stateful"),
        ServerSpec("sdk-stateless", "SDK stateless JSON / uvicorn", "sdk", "uvicorn", "bench.sdk_server:stateless"),
    ]
    if uvicorn_bare:
        specs.insert(1, ServerSpec("bare-uvicorn", "bare ASGI app / uvicorn", "bare", "uvicorn", specs[0].app))
    if levers:
        specs.insert(1, ServerSpec("bare-daphne-levers", "bare ASGI app / daphne + levers", "bare", "daphne",
                                   "bench.tuned:baseline", levers=True))  # fmt: skip
        specs.insert(4, ServerSpec("floor-daphne-levers", "Channels floor / daphne + levers", "floor", "daphne",
                                   "bench.tuned:channels_floor", levers=True))  # fmt: skip
    specs = [
        ServerSpec(
            spec.key,
            spec.label,
            spec.kind,
            spec.runner,
            spec.app,
            levers=spec.levers,
            scenarios={"sdk-stateful": ("session",), "sdk-stateless": ("modern",)}.get(spec.key, ("baseline",)),
            sse={"sdk-stateful": ("session",), "floor-daphne": ("baseline",)}.get(spec.key, ()),
            memory=spec.key == "sdk-stateful",
            lifespan=True,
        )
        for spec in specs
    ]
    for db in databases:
        for runner, with_levers in (("daphne", False), ("daphne", True), ("uvicorn", False)):
            if with_levers and not levers:
                continue
            suffix = " + levers" if with_levers else ""
            specs.append(
                ServerSpec(
                    f"mcp-{runner}{'-levers' if with_levers else ''}-{db}",
                    f"mcp-host / {runner}{suffix}, {names[db]}",
                    "mcp",
                    runner,
                    "mcp_host.asgi:application",
                    db=db,
                    levers=with_levers,
                    scenarios=("legacy", "session", "modern"),
                    sse=("session", "modern"),
                    memory=not with_levers,
                    lifespan=False,
                )
            )
    return specs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def base_env(tmp: Path, db: str) -> dict[str, str]:
    """The environment of the ``db`` configuration: SQLite in ``tmp`` with the in-memory layer, or the
    ``DATABASE_URL``/``REDIS_URL`` of this process (PostgreSQL + Redis)."""
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # One agent drives every request: the default rates (200/s per agent) would measure the limiter's 429s.
    env["MCP_RATE_LIMIT_PER_TENANT"] = env["MCP_RATE_LIMIT_PER_AGENT"] = "0"
    if db == "sqlite":
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        sqlite = tmp / "bench.sqlite3"
        env["DATABASE_URL"] = f"sqlite:///{sqlite}"  # sqlite:////tmp/…: absolute path
        env["MCP_SQLITE_PATH"] = str(sqlite)
    return env


def describe(env: dict[str, str]) -> str:
    database = urlsplit(env["DATABASE_URL"])
    redis = urlsplit(env["REDIS_URL"]) if env.get("REDIS_URL") else None
    where = (
        "SQLite (temporary file)"
        if database.scheme.startswith("sqlite")
        else f"{database.scheme}://{database.hostname}:{database.port or ''}{database.path}"
    )
    layer = f"Redis {redis.hostname}:{redis.port or 6379}{redis.path}" if redis else "in-memory layer"
    return f"{where}, {layer}"


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


def command(spec: ServerSpec, port: int, core: int | None) -> list[str]:
    bindir = Path(sys.executable).parent
    if spec.runner == "daphne":
        script = bindir / "daphne"
        launcher = [str(script)] if script.exists() else [sys.executable, "-m", "daphne"]
        # -v 0: no daphne access log (uvicorn runs with --no-access-log); mcp-host's own access log stays on.
        argv = [*launcher, "-v", "0", "-b", HOST, "-p", str(port), spec.app]
    else:
        argv = [sys.executable, "-m", "uvicorn", spec.app, "--host", HOST, "--port", str(port)]
        argv += ["--no-access-log", "--log-level", "warning", "--lifespan", "on" if spec.lifespan else "off"]
    if core is not None and shutil.which("taskset"):
        return ["taskset", "-c", str(core), *argv]
    return argv


@dataclass
class Running:
    """A started server: its process, URLs and token."""

    spec: ServerSpec
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    token: str | None = None
    urls: dict[str, str] = field(default_factory=dict)  # scenario -> URL
    sse_urls: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.contextmanager
def serving(
    specs: Sequence[ServerSpec], tmp: Path, envs: dict[str, dict[str, str]], core: int | None
) -> Iterator[list[Running]]:
    """Every server of ``specs``, started at once; all terminated (then killed) on the way out."""
    running: list[Running] = []
    try:
        for spec in specs:
            port = free_port()
            env = dict(envs[spec.db])
            env["MCP_PUBLIC_URL"] = f"http://{HOST}:{port}"
            if spec.levers:
                env["MCP_DAPHNE_TUNING"] = "1"
            log = tmp / f"{spec.key}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command(spec, port, core), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            running.append(Running(spec, process, port, log))
        yield running
    finally:
        for server in running:
            if server.process.poll() is None:
                server.process.terminate()
        for server in running:
            try:
                server.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(timeout=STOP_TIMEOUT_S)


async def probe(url: str, token: str | None, scenario: str, progress_steps: int = 0) -> str | None:
    """One request of ``scenario``; ``None`` when it succeeds, else why not."""
    try:
        target = build_target(url, token, scenario, progress_steps)
    except (OSError, RuntimeError) as exc:  # the session scenario's initialize
        return f"{type(exc).__name__}: {exc}"
    connection = RawConnection(target)
    try:
        status, body = await asyncio.wait_for(connection.exchange(), 10.0)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await connection.close()
    return response_error(status, body, progress_steps)


def wait_ready(server: Running, scenario: str) -> None:
    """Poll with one request every 200 ms until it succeeds, the process dies, or READY_TIMEOUT_S passes."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem: str | None = "not polled"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.spec.key} exited with {server.process.returncode}:\n{tail(server.log)}")
        problem = asyncio.run(probe(server.urls[scenario], server.token, scenario))
        if problem is None:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{server.spec.key} not ready after {READY_TIMEOUT_S:g} s: {problem}\n{tail(server.log)}")


def tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-4000:]
    except OSError:
        return ""


# Measuring -------------------------------------------------------------------------------------------------------


def system_busy_seconds() -> float | None:
    """CPU time all cores spent on anything but idle and I/O wait since boot, from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in first[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (all its threads), fields 14 and 15 of proc_pid_stat(5)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_rss_bytes(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


class CpuMeter:
    """The server's CPU time and the machine's busy time around the measured phase."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._server: float | None = None
        self._system: float | None = None

    def start(self) -> None:
        self._server, self._system = process_cpu_seconds(self._pid), system_busy_seconds()

    def stop(self) -> dict[str, Any]:
        server, system = process_cpu_seconds(self._pid), system_busy_seconds()
        fields: dict[str, Any] = {}
        if server is not None and self._server is not None:
            fields["server_cpu_s"] = round(server - self._server, 3)
        if system is not None and self._system is not None:
            fields["system_busy_s"] = round(system - self._system, 3)
        return fields


def wait_for_quiet(max_wait: float, threshold: float) -> float | None:
    """Wait (at most ``max_wait`` s) for a 0.5 s window in which fewer than ``threshold`` cores are busy; the
    busy cores of the last window (``None`` without /proc). Called while this benchmark's processes idle."""
    deadline = time.monotonic() + max_wait
    while True:
        before = system_busy_seconds()
        time.sleep(0.5)
        after = system_busy_seconds()
        if before is None or after is None:
            return None
        busy = (after - before) / 0.5
        if busy <= threshold or time.monotonic() >= deadline:
            return round(busy, 2)


def measure(
    server: Running, scenario: str, concurrency: int, duration: float, warmup: float, progress_steps: int = 0
) -> dict[str, Any]:
    """One run of the load generator in this process: warm-up on the same connections, then measurement."""
    url = server.sse_urls.get(scenario, server.urls[scenario]) if progress_steps else server.urls[scenario]
    target = build_target(url, server.token, scenario, progress_steps)
    # Concurrent clients each have their own session (the SDK loses answers when 16 requests share one).
    workers = (
        [target] + [build_target(url, server.token, scenario, progress_steps) for _ in range(concurrency - 1)]
        if scenario == "session"
        else None
    )
    result = asyncio.run(
        run_load(
            target,
            scenario=scenario,
            client="raw",
            concurrency=concurrency,
            requests=None,
            duration=duration,
            warmup=warmup,
            meters=[CpuMeter(server.pid)],
            worker_targets=workers,
        )
    )
    result["server"] = server.spec.key
    if "server_cpu_s" in result and result["ok"]:
        result["server_cpu_us_per_req"] = round(result["server_cpu_s"] / result["ok"] * 1e6, 1)
        if "system_busy_s" in result:
            # Everything else that ran meanwhile: the database server, kernel networking, other people's work.
            other = result["system_busy_s"] - result["server_cpu_s"] - result["client_cpu_s"]
            result["other_cpu_cores"] = round(max(other, 0.0) / result["elapsed_s"], 2)
    return result


def redis_used_memory(url: str | None) -> int | None:
    if not url:
        return None
    try:
        import redis
    except ImportError:
        return None
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        return int(client.info("memory")["used_memory"])
    except Exception:  # Redis unreachable: the figure is left out
        return None
    finally:
        client.close()


def measure_memory(server: Running, count: int, redis_url: str | None) -> dict[str, Any]:
    """``count`` sessions with an idle GET stream each: RSS (and Redis) before, with all open, after closing.

    They open in two halves: ``kib_per_stream`` is the growth over all of them, which also holds what the process
    grows once (its thread pool, caches, heap arenas); ``kib_per_stream_marginal``, the growth from the first half
    to all of them over the second half, is what one more stream costs."""

    async def scenario() -> dict[str, Any]:
        halves = [IdleStreams(server.urls["session"], server.token, part) for part in (count // 2, count - count // 2)]
        rss_before = process_rss_bytes(server.pid)
        redis_before = redis_used_memory(redis_url)
        started = time.perf_counter()
        rss_half = None
        try:
            for half in halves:
                await half.open()
                await asyncio.sleep(1.0)  # let the last streams settle (their first keep-alive timers, buffers)
                rss_half = process_rss_bytes(server.pid) if rss_half is None else rss_half
            opened_s = time.perf_counter() - started
            rss_open = process_rss_bytes(server.pid)
            redis_open = redis_used_memory(redis_url)
            still_open = sum(half.still_open() for half in halves)
        finally:
            for half in halves:
                await half.close()
        opened = sum(half.opened for half in halves)
        result: dict[str, Any] = {
            "server": server.spec.key,
            "requested": count,
            "opened": opened,
            "with_head": sum(half.with_head for half in halves),
            "still_open": still_open,
            "open_s": round(opened_s, 2),
            "failures": [failure for half in halves for failure in half.failures],
        }
        if rss_before is not None and rss_open is not None and opened:
            result["rss_delta_bytes"] = rss_open - rss_before
            result["kib_per_stream"] = round((rss_open - rss_before) / opened / 1024, 1)
        if rss_half is not None and rss_open is not None and halves[1].opened:
            result["kib_per_stream_marginal"] = round((rss_open - rss_half) / halves[1].opened / 1024, 1)
        if redis_before is not None and redis_open is not None and opened:
            result["redis_delta_bytes"] = redis_open - redis_before
            result["redis_kib_per_stream"] = round((redis_open - redis_before) / opened / 1024, 1)
        return result

    return asyncio.run(scenario())


# Reporting -------------------------------------------------------------------------------------------------------


def median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def ratio(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


@dataclass
class Report:
    """All results of a run, with the medians the tables and targets are made of."""

    specs: list[ServerSpec]
    levels: list[int]
    throughput: list[dict[str, Any]]
    sse: list[dict[str, Any]]
    memory: list[dict[str, Any]]
    setup: dict[str, Any]

    def cell(self, key: str, scenario: str, concurrency: int) -> list[dict[str, Any]]:
        return [
            result
            for result in self.throughput
            if result["server"] == key and result["scenario"] == scenario and result["concurrency"] == concurrency
        ]

    def value(self, key: str, scenario: str, concurrency: int, name: str) -> float | None:
        return median([result.get(name) for result in self.cell(key, scenario, concurrency)])

    def versus(self, key: str, scenario: str, concurrency: int, ref_key: str, ref_scenario: str) -> float | None:
        """Median over rounds of this cell's req/s over the reference's in the same round."""
        refs = {result["round"]: result["rps"] for result in self.cell(ref_key, ref_scenario, concurrency)}
        ratios = [
            result["rps"] / refs[result["round"]]
            for result in self.cell(key, scenario, concurrency)
            if refs.get(result["round"])
        ]
        return median(ratios)

    def cpu_versus(self, key: str, scenario: str, level: int, ref_key: str = "bare-daphne") -> float | None:
        """The bare app's CPU per request over this cell's: the throughput ratio on a core of its own, which
        other processes' work on the machine does not move (req/s ratios do, by tens of percent)."""
        mine = self.value(key, scenario, level, "server_cpu_us_per_req")
        ref = self.value(ref_key, "baseline", level, "server_cpu_us_per_req")
        return ref / mine if mine and ref else None

    def sse_value(self, key: str, scenario: str, name: str) -> float | None:
        return median([r.get(name) for r in self.sse if r["server"] == key and r["scenario"] == scenario])

    def throughput_table(self) -> str:
        head = "| server (one core) | scenario |"
        rule = "|---|---|"
        for level in self.levels:
            head += f" req/s c={level} | vs bare daphne | p50 ms | p99 ms | server CPU µs/req | CPU vs bare |"
            rule += "---:|---:|---:|---:|---:|---:|"
        lines = [head + " errors |", rule + "---:|"]
        for spec in self.specs:
            for scenario in spec.scenarios:
                if not any(self.cell(spec.key, scenario, level) for level in self.levels):
                    continue
                row = f"| {spec.label} | {SCENARIO_LABELS[scenario]} |"
                for level in self.levels:
                    row += (
                        f" {fmt(self.value(spec.key, scenario, level, 'rps'))}"
                        f" | {ratio(self.versus(spec.key, scenario, level, 'bare-daphne', 'baseline'))}"
                        f" | {fmt(self.value(spec.key, scenario, level, 'p50_ms'), 1)}"
                        f" | {fmt(self.value(spec.key, scenario, level, 'p99_ms'), 1)}"
                        f" | {fmt(self.value(spec.key, scenario, level, 'server_cpu_us_per_req'))}"
                        f" | {ratio(self.cpu_versus(spec.key, scenario, level))} |"
                    )
                errors = sum(r["errors"] for level in self.levels for r in self.cell(spec.key, scenario, level))
                lines.append(f"{row} {errors} |")
        return "\n".join(lines)

    def sse_table(self, streams: int, events: int) -> str:
        lines = [
            f"| server (one core), {streams} streams x {events} progress events | scenario | streams/s "
            "| vs SDK | p50 ms | p99 ms | server CPU µs/stream | errors |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        sdk = [r for r in self.sse if r["server"] == "sdk-stateful"]
        for spec in self.specs:
            for scenario in spec.sse:
                if not any(r["server"] == spec.key and r["scenario"] == scenario for r in self.sse):
                    continue
                mine = {r["round"]: r["rps"] for r in self.sse if r["server"] == spec.key and r["scenario"] == scenario}
                versus = median([mine[r["round"]] / r["rps"] for r in sdk if r["rps"] and r["round"] in mine])
                lines.append(
                    f"| {spec.label} | {SCENARIO_LABELS[scenario]} | {fmt(self.sse_value(spec.key, scenario, 'rps'))} "
                    f"| {ratio(versus)} | {fmt(self.sse_value(spec.key, scenario, 'p50_ms'), 1)} "
                    f"| {fmt(self.sse_value(spec.key, scenario, 'p99_ms'), 1)} "
                    f"| {fmt(self.sse_value(spec.key, scenario, 'server_cpu_us_per_req'))} "
                    f"| {sum(r['errors'] for r in self.sse if r['server'] == spec.key and r['scenario'] == scenario)} |"
                )
        return "\n".join(lines)

    def memory_table(self) -> str:
        labels = {spec.key: spec.label for spec in self.specs}
        lines = [
            "| server | streams open (of) | with response head | RSS delta MiB | KiB per stream | KiB per stream "
            "more | Redis KiB per stream |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for result in self.memory:
            delta = result.get("rss_delta_bytes")
            lines.append(
                f"| {labels.get(result['server'], result['server'])} | {result['opened']} ({result['requested']}) "
                f"| {result['with_head']} | {fmt(delta / 2**20 if delta is not None else None, 1)} "
                f"| {fmt(result.get('kib_per_stream'), 1)} | {fmt(result.get('kib_per_stream_marginal'), 1)} "
                f"| {fmt(result.get('redis_kib_per_stream'), 1)} |"
            )
        return "\n".join(lines)

    def targets_table(self) -> str:
        """Issue 8's targets, each checked against this run's medians."""
        lines = ["| target (issue 8) | measured | met |", "|---|---|---|"]

        def row(target: str, measured: str, ok: bool | None) -> None:
            lines.append(f"| {target} | {measured} | {'n/a' if ok is None else ('yes' if ok else '**no**')} |")

        mcp = [spec for spec in self.specs if spec.kind == "mcp"]
        for spec in mcp:
            if spec.runner != "daphne":
                continue
            # Like for like: mcp-host with the levers against the bare app with the levers.
            bare = "bare-daphne-levers" if spec.levers else "bare-daphne"
            ratios = {
                (scenario, level): self.versus(spec.key, scenario, level, bare, "baseline")
                for scenario in ("legacy", "session")
                for level in self.levels
            }
            shown = ", ".join(
                f"{SCENARIO_LABELS[s]} c={c} {ratio(v)} (CPU {ratio(self.cpu_versus(spec.key, s, c, bare))})"
                for (s, c), v in ratios.items()
            )
            if spec.levers:
                plain = [v for s, c in ratios if (v := self.versus(spec.key, s, c, "bare-daphne", "baseline"))]
                shown += f" (against plain bare daphne: {ratio(min(plain) if plain else None)} and up)"
            values = [v for v in ratios.values() if v is not None]
            target = "bare ASGI on daphne + levers" if spec.levers else "bare ASGI on daphne"
            row(f"{spec.label}: ≥ 0.7x {target}", shown, min(values) >= 0.7 if values else None)
        for spec in mcp:
            if spec.runner != "uvicorn":
                continue
            parts, oks = [], []
            for level in self.levels:
                sdk = self.value("sdk-stateless", "modern", level, "rps")
                for scenario in spec.scenarios:
                    mine = self.value(spec.key, scenario, level, "rps")
                    sdk_cpu = self.value("sdk-stateless", "modern", level, "server_cpu_us_per_req")
                    mine_cpu = self.value(spec.key, scenario, level, "server_cpu_us_per_req")
                    cpu = f" (CPU {sdk_cpu / mine_cpu:.2f})" if sdk_cpu and mine_cpu else ""
                    if sdk and mine is not None:
                        parts.append(f"{SCENARIO_LABELS[scenario]} c={level} {mine / sdk:.2f}{cpu}")
                        oks.append(mine / sdk >= 1.5)
            row(
                f"{spec.label}: ≥ 1.5x the SDK's best mode (stateless JSON)",
                ", ".join(parts),
                all(oks) if oks else None,
            )
        if 16 in self.levels:
            for spec in mcp:
                if spec.levers:
                    continue
                bare = "bare-daphne" if spec.runner == "daphne" else "bare-uvicorn"
                ref = self.value(bare, "baseline", 16, "p99_ms")
                parts, oks = [], []
                for scenario in spec.scenarios:
                    mine = self.value(spec.key, scenario, 16, "p99_ms")
                    if ref and mine is not None:
                        parts.append(f"{SCENARIO_LABELS[scenario]} {mine:.1f} ms = {mine / ref:.1f}x")
                        oks.append(mine <= 2 * ref)
                measured = f"bare {fmt(ref, 1)} ms; " + ", ".join(parts)
                row(f"{spec.label}: p99 at c=16 ≤ 2x bare ASGI's on {spec.runner}", measured, all(oks) if oks else None)
        sdk_sse = self.sse_value("sdk-stateful", "session", "rps")
        for spec in mcp:
            if spec.levers:
                continue
            parts, oks = [], []
            for scenario in spec.sse:
                mine = self.sse_value(spec.key, scenario, "rps")
                if sdk_sse and mine is not None:
                    parts.append(f"{SCENARIO_LABELS[scenario]} {mine:.0f}/s = {mine / sdk_sse:.2f}x")
                    oks.append(mine >= 2 * sdk_sse)
            if parts:
                row(f"{spec.label}: SSE ≥ 2x the SDK's streams/s ({sdk_sse:.0f}/s)", ", ".join(parts), all(oks))
        for result in self.memory:
            spec = next(spec for spec in self.specs if spec.key == result["server"])
            if spec.kind != "mcp" or result.get("kib_per_stream") is None:
                continue
            total = result["kib_per_stream"] + (result.get("redis_kib_per_stream") or 0.0)
            measured = f"{result['kib_per_stream']:.1f} KiB RSS" + (
                f" + {result['redis_kib_per_stream']:.1f} KiB Redis" if "redis_kib_per_stream" in result else ""
            )
            ok = total <= 30 and result["opened"] == result["requested"]
            count = f"{result['requested']:,}"
            row(f"{spec.label}: {count} idle GET streams with sessions ≤ 30 KiB each", measured, ok)
        return "\n".join(lines)

    def markdown(self, args: argparse.Namespace) -> str:
        setup = self.setup
        others: list[float] = [r["other_cpu_cores"] for r in self.throughput if r.get("other_cpu_cores") is not None]
        return "\n".join(
            [
                f"Machine: {setup['machine']}. Servers on core {setup['server_core']}, load generator on core "
                f"{setup['client_core']}; {setup['databases']}. {args.duration:g} s per run after {args.warmup:g} s "
                f"warm-up; median of {args.rounds} round(s); other CPU during the runs (database, Redis, kernel, "
                f"anyone else): median {fmt(median(others), 2)} cores, max {fmt(max(others) if others else None, 2)}.",
                "",
                "tools/call `echo` (auth and catalog on for mcp-host):",
                "",
                self.throughput_table(),
                "",
                self.sse_table(args.sse_streams, args.sse_events),
                "",
                f"{args.idle_streams} idle GET streams, each with its session:",
                "",
                self.memory_table(),
                "",
                self.targets_table(),
                "",
            ]
        )


# The run ---------------------------------------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def prepare(server: Running, demos: dict[str, dict[str, Any]]) -> None:
    """The URLs and token of each scenario of ``server``."""
    base = f"http://{HOST}:{server.port}"
    if server.spec.kind in ("bare", "floor"):
        server.urls = {"baseline": f"{base}/"}
        server.sse_urls = {"baseline": f"{base}/sse?steps=10"}
    elif server.spec.kind == "sdk":
        server.urls = {scenario: f"{base}/mcp" for scenario in ("session", "modern")}
    else:
        demo = demos[server.spec.db]
        path = urlsplit(demo["url"])
        legacy = f"{base}{path.path}?{path.query}"
        modern = legacy.replace(f"/mcp/{demo['server_id']}", f"/mcp/{MODERN_SERVER}", 1)
        server.urls = {"legacy": legacy, "session": legacy, "modern": modern}
        server.token = demo["token"]


def benchmark(args: argparse.Namespace, tmp: Path) -> Report:
    envs = {db: base_env(tmp, db) for db in args.databases}
    demos: dict[str, dict[str, Any]] = {}
    for db, env in envs.items():
        say(f"setting up {db}: {describe(env)}")
        manage(env, "migrate", "--noinput")
        demos[db] = json.loads(manage(env, "mcp_demo", "--json", "--base-url", f"http://{HOST}:8000"))
    specs = server_specs(args.databases, args.levers, uvicorn_bare=True)
    throughput: list[dict[str, Any]] = []
    sse: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    with serving(specs, tmp, envs, args.server_core) as running:
        for server in running:
            prepare(server, demos)
        for server in running:
            wait_ready(server, server.spec.scenarios[0])
        say(f"{len(running)} servers ready")
        for server in running:  # first touch of every code path
            for scenario in server.spec.scenarios:
                measure(server, scenario, max(args.levels), 0.5, 0.0)
            for scenario in server.spec.sse:
                measure(server, scenario, args.sse_streams, 0.5, 0.0, args.sse_events)
        for round_number in range(1, args.rounds + 1):
            shift = (round_number - 1) % len(running)
            order = running[shift:] + running[:shift]
            started = time.monotonic()
            for level in args.levels:
                for server in order:
                    for scenario in server.spec.scenarios:
                        idle = wait_for_quiet(args.quiet_wait, args.quiet_cores)
                        result = measure(server, scenario, level, args.duration, args.warmup)
                        result.update(round=round_number, busy_cores_before=idle)
                        throughput.append(result)
                        say(brief(result))
            for server in order:
                for scenario in server.spec.sse:
                    idle = wait_for_quiet(args.quiet_wait, args.quiet_cores)
                    result = measure(server, scenario, args.sse_streams, args.duration, args.warmup, args.sse_events)
                    result.update(round=round_number, busy_cores_before=idle, sse=True)
                    sse.append(result)
                    say(brief(result))
            say(f"round {round_number} took {time.monotonic() - started:.0f} s")
        for server in running:
            if server.process.poll() is not None:
                raise RuntimeError(f"{server.spec.key} died during the run:\n{tail(server.log)}")
    if args.idle_streams:
        # Fresh processes, one at a time: the heap of one that served the load runs has room to spare.
        for spec in specs:
            if not spec.memory:
                continue
            with serving([spec], tmp, envs, args.server_core) as (server,):
                prepare(server, demos)
                wait_ready(server, "session")
                measure_memory(server, 20, None)  # warm: the code paths of a session and its stream
                result = measure_memory(server, args.idle_streams, envs[spec.db].get("REDIS_URL"))
                memory.append(result)
                say(json.dumps(result))
    setup = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "server_core": args.server_core,
        "client_core": args.client_core,
        "databases": "; ".join(f"{db}: {describe(env)}" for db, env in envs.items()),
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "rounds": args.rounds,
    }
    return Report(specs, args.levels, throughput, sse, memory, setup)


def brief(result: dict[str, Any]) -> str:
    keys = ("server", "scenario", "concurrency", "rps", "p50_ms", "p99_ms", "server_cpu_us_per_req", "errors")
    text = " ".join(f"{key}={result.get(key)}" for key in keys)
    if result.get("errors"):
        text += f" samples={result.get('error_samples')}"
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per run (default 3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each run (default 1)")
    parser.add_argument("--concurrency", default="16,64", help="comma-separated levels (default 16,64)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; every figure is the median (default 1)")
    parser.add_argument("--repeat", type=int, dest="rounds", help=argparse.SUPPRESS)  # the old name
    parser.add_argument(
        "--databases",
        default=None,
        help="sqlite and/or postgres (default: sqlite, plus postgres when DATABASE_URL and REDIS_URL are set)",
    )
    parser.add_argument("--no-levers", dest="levers", action="store_false", help="leave out the daphne levers rows")
    parser.add_argument("--sse-streams", type=int, default=64, help="concurrent SSE streams (default 64)")
    parser.add_argument("--sse-events", type=int, default=10, help="progress events per stream (default 10)")
    parser.add_argument("--idle-streams", type=int, default=1000, help="idle GET streams, 0 to skip (default 1000)")
    parser.add_argument("--server-core", type=int, default=0, help="the core of every server (default 0)")
    parser.add_argument("--client-core", type=int, default=1, help="the load generator's core (default 1)")
    parser.add_argument("--quiet-wait", type=float, default=2.0, help="longest wait for an idle machine (default 2)")
    parser.add_argument("--quiet-cores", type=float, default=0.3, help="busy cores that count as idle (0.3)")
    parser.add_argument("--quick", action="store_true", help="c=16 only, 2 s runs, no levers, 200 idle streams")
    parser.add_argument("--markdown-out", type=Path, help="also write the markdown tables to this file")
    parser.add_argument("--json-out", type=Path, help="also write every raw result to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (database, logs)")
    parser.add_argument("--from-json", type=Path, help="print the tables of an earlier --json-out file, run nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.concurrency, args.duration, args.warmup, args.levers = "16", 2.0, 0.5, False
        args.idle_streams = min(args.idle_streams, 200)
    args.levels = [int(level) for level in args.concurrency.split(",") if level.strip()]
    if args.databases is None:
        services = os.environ.get("DATABASE_URL", "").startswith("postgres") and os.environ.get("REDIS_URL")
        args.databases = "sqlite,postgres" if services else "sqlite"
    args.databases = [db.strip() for db in args.databases.split(",") if db.strip()]
    if unknown := set(args.databases) - {"sqlite", "postgres"}:
        parser.error(f"unknown databases: {', '.join(sorted(unknown))}")
    if "postgres" in args.databases and not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        parser.error("postgres needs DATABASE_URL and REDIS_URL")
    if not 0 < args.duration <= 60 or not 0 <= args.warmup <= 30 or not 1 <= args.rounds <= 10:
        parser.error("bounds: 0 < --duration <= 60, 0 <= --warmup <= 30, 1 <= --rounds <= 10")
    if not 0 <= args.quiet_wait <= 600:
        parser.error("bounds: 0 <= --quiet-wait <= 600")
    if not args.levels or any(not 1 <= level <= 256 for level in args.levels):
        parser.error("--concurrency levels must be between 1 and 256")
    if not 1 <= args.sse_streams <= 256 or not 1 <= args.sse_events <= 100 or not 0 <= args.idle_streams <= 5000:
        parser.error("bounds: 1 <= --sse-streams <= 256, 1 <= --sse-events <= 100, 0 <= --idle-streams <= 5000")
    return args


def pin(core: int | None) -> None:
    """Run this process (the load generator) on ``core``, when the machine has it."""
    if core is None or not hasattr(os, "sched_setaffinity"):
        return
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {core})


def main(argv: Sequence[str] | None = None, printer: Callable[[str], None] = print) -> int:
    args = parse_args(argv)
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        saved = raw["args"]
        for name in ("duration", "warmup", "rounds", "sse_streams", "sse_events", "idle_streams"):
            setattr(args, name, saved[name])
        specs = server_specs(saved["databases"], saved["levers"])
        report = Report(specs, saved["levels"], raw["throughput"], raw["sse"], raw["memory"], raw["setup"])
        text = report.markdown(args)
        printer(text)
        if args.markdown_out:
            args.markdown_out.write_text(text)
        return 0
    cores = os.cpu_count() or 1
    if cores < 2 or args.server_core >= cores or args.client_core >= cores:
        say(f"{cores} CPU(s): no pinning")
        args.server_core = args.client_core = None
    pin(args.client_core)
    # A SIGTERM (from `timeout`, CI, make being interrupted) unwinds like an exception: servers stopped, files removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tmp = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    say(f"work dir {tmp}")
    started = time.monotonic()
    try:
        report = benchmark(args, tmp)
    finally:
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    say(f"done in {time.monotonic() - started:.0f} s")
    text = report.markdown(args)
    printer("\n" + text)
    if args.markdown_out:
        args.markdown_out.write_text(text)
    if args.json_out:
        saved = {name: getattr(args, name) for name in ("duration", "warmup", "rounds", "sse_streams", "sse_events")}
        saved.update(idle_streams=args.idle_streams, databases=args.databases, levers=args.levers, levels=args.levels)
        raw = {
            "args": saved,
            "setup": report.setup,
            "throughput": report.throughput,
            "sse": report.sse,
            "memory": report.memory,
        }
        args.json_out.write_text(json.dumps(raw, indent=2) + "\n")
    errors = sum(result["errors"] for result in [*report.throughput, *report.sse])
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
