"""The warm ``tools/call`` with budgets on, beside the same call without them and the Channels floor, in one run.

Needs ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL``: the budget counters then live in Redis and their check rides
in the rate limiter's Lua round trip (``RedisBudgets``), which is what a deployment runs. It starts, with
``bench.run``'s machinery, the Channels floor (``AsyncHttpConsumer``) and mcp-host under daphne on PostgreSQL +
Redis, both pinned to ``--server-core``, and drives them from this process (``--client-core``) at c=16.

Each round measures, in an order rotated every round: the floor; mcp-host with no budget; mcp-host with four
budgets on (``manage.py mcp_budget set``: a calls and a tool-seconds budget per day on the demo tenant and on its
agent, limits far out of reach), for each of ``--scenarios`` (stateless 2025-11-25 and 2026-07-28 by default). The
budgets are cleared again after their run. The server's CPU µs per call comes from ``/proc``; every figure is the
median over the rounds, each ratio the median of the per-round ones against the floor of its own round. That the
budgets were on is checked in Redis: the calls counters of the tenant and the agent grow by at least the calls
served. The exit status is 1 if a request failed or the counters did not grow.

``bench.run`` switches the rate limits off (0) so as not to measure 429s; then the budgets' Lua script is a Redis
round trip of its own. With ``--rates`` both states run with per-tenant and per-agent rate limits far out of reach
(a million per second), as a deployment has them: the budgets' counters then ride in the rate buckets' round trip
and the difference is what the budgets add to it.

    DATABASE_URL=postgres://…/bench REDIS_URL=redis://127.0.0.1:6379/5 python -m bench.budgets   # ≈ 3 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import run

LEVEL = 16
TENANT = "demo"  # mcp_demo's tenant
FAR = {"--calls-per-day": "1000000000000", "--tool-seconds-per-day": "1000000000"}
STATES = ("floor", "off", "on")


def counted(redis_url: str) -> float:
    """The sum of every calls counter of the budgets in Redis (tenant's and agent's)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter("mcp:budget:*:calls:*", count=1000))
        return sum(float(value or 0) for value in client.mget(keys)) if keys else 0.0
    finally:
        client.close()


def set_budgets(env: dict[str, str], agent_id: str, on: bool) -> None:
    for scope in ([], ["--agent", agent_id]):
        if on:
            run.manage(env, "mcp_budget", "set", "--tenant", TENANT, *scope, *[x for pair in FAR.items() for x in pair])
        else:
            run.manage(env, "mcp_budget", "clear", "--tenant", TENANT, *scope)


def benchmark(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    env = run.base_env(tmp, "postgres")
    if args.rates:
        env["MCP_RATE_LIMIT_PER_TENANT"] = env["MCP_RATE_LIMIT_PER_AGENT"] = "1000000"
    run.manage(env, "migrate", "--noinput")
    demo = json.loads(run.manage(env, "mcp_demo", "--json", "--base-url", f"http://{run.HOST}:8000"))
    set_budgets(env, demo["agent_id"], on=False)
    specs = [
        spec
        for spec in run.server_specs(["postgres"], levers=False, uvicorn_bare=False)
        if spec.key in ("floor-daphne", "mcp-daphne-postgres")
    ]
    raw: dict[str, Any] = {"results": [], "counted": [], "rates": args.rates}
    with run.serving(specs, tmp, {"sqlite": env, "postgres": env}, args.server_core) as servers:
        floor, mcp = servers
        for server in servers:
            run.prepare(server, {"postgres": demo})
            run.wait_ready(server, server.spec.scenarios[0])
        for number in range(1, args.rounds + 1):
            shift = (number - 1) % len(STATES)
            for state in STATES[shift:] + STATES[:shift]:
                server = floor if state == "floor" else mcp
                if state == "on":
                    set_budgets(env, demo["agent_id"], on=True)
                    before = counted(env["REDIS_URL"])
                served = 0
                for scenario in server.spec.scenarios if state == "floor" else args.scenarios:
                    idle = run.wait_for_quiet(args.quiet_wait, args.quiet_cores)
                    result = run.measure(server, scenario, LEVEL, args.duration, args.warmup)
                    result.update(round=number, state=state, busy_cores_before=idle)
                    raw["results"].append(result)
                    served += result["ok"]
                    run.say(f"{state} {run.brief(result)}")
                if state == "on":
                    grown = counted(env["REDIS_URL"]) - before
                    raw["counted"].append({"round": number, "served": served, "counter_growth": grown})
                    set_budgets(env, demo["agent_id"], on=False)
        for server in servers:
            if server.process.poll() is not None:
                raise RuntimeError(f"{server.spec.key} died during the run:\n{run.tail(server.log)}")
    return raw


def cpu(raw: dict[str, Any], state: str, scenario: str | None = None) -> dict[int, float]:
    return {
        r["round"]: r["server_cpu_us_per_req"]
        for r in raw["results"]
        if r["state"] == state and (scenario is None or r["scenario"] == scenario) and "server_cpu_us_per_req" in r
    }


def markdown(raw: dict[str, Any], args: argparse.Namespace) -> str:
    floor = cpu(raw, "floor")
    rates = "rate limits on (10^6/s)" if raw.get("rates") else "rate limits off"
    lines = [
        f"{rates}; c={LEVEL}, {args.duration:g} s per run after {args.warmup:g} s warm-up, median of {args.rounds} round(s); "
        "server CPU µs per call (median) and its ratio to the Channels floor of the same round (median).",
        "",
        "| scenario | Channels floor | mcp-host, no budget | with 4 budgets | budgets' cost per call |",
        "|---|---:|---:|---:|---:|",
    ]
    for scenario in args.scenarios:
        off, on = cpu(raw, "off", scenario), cpu(raw, "on", scenario)

        def cell(values: dict[int, float]) -> str:
            ratios = [value / floor[n] for n, value in values.items() if floor.get(n)]
            return f"{statistics.median(values.values()):,.0f} µs ({statistics.median(ratios):.2f}x)"

        extra = statistics.median(on[n] - off[n] for n in on if n in off)
        lines.append(
            f"| {scenario} | {statistics.median(floor.values()):,.0f} µs | {cell(off)} | {cell(on)} | {extra:+,.0f} µs |"
        )
    for row in raw["counted"]:
        lines.append(
            f"\nround {row['round']}: {row['served']} calls served with budgets on, calls counters grew by "
            f"{row['counter_growth']:,.0f} (tenant's and agent's, warm-ups included)"
        )
    errors = sum(r["errors"] for r in raw["results"])
    lines.append(f"\nFailed requests: {errors}.")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.budgets", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are medians (default 3)")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per load run (default 3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each (default 1)")
    parser.add_argument("--scenarios", default="legacy,modern", help="of mcp-host (default legacy,modern)")
    parser.add_argument("--rates", action="store_true", help="rate limits on, far out of reach, in both states")
    parser.add_argument("--server-core", type=int, default=0, help="the core of the servers (default 0)")
    parser.add_argument("--client-core", type=int, default=1, help="the load generator's core (default 1)")
    parser.add_argument("--quiet-wait", type=float, default=2.0, help="longest wait for an idle machine (default 2)")
    parser.add_argument("--quiet-cores", type=float, default=0.3, help="busy cores that count as idle (0.3)")
    parser.add_argument("--markdown-out", type=Path, help="also write the table to this file")
    parser.add_argument("--json-out", type=Path, help="also write every raw result to this file")
    args = parser.parse_args(argv)
    args.scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    if not set(args.scenarios) <= {"legacy", "session", "modern"} or not args.scenarios:
        parser.error("--scenarios: legacy, session and/or modern")
    if not 1 <= args.rounds <= 10 or not 0 < args.duration <= 60 or not 0 <= args.warmup <= 30:
        parser.error("bounds: 1 <= --rounds <= 10, 0 < --duration <= 60, 0 <= --warmup <= 30")
    if not (os.environ.get("DATABASE_URL", "").startswith("postgres") and os.environ.get("REDIS_URL")):
        parser.error("needs DATABASE_URL (PostgreSQL) and REDIS_URL")
    return args


def main(argv: Sequence[str] | None = None, printer: Callable[[str], None] = print) -> int:
    args = parse_args(argv)
    cores = os.cpu_count() or 1
    if cores < 2 or args.server_core >= cores or args.client_core >= cores:
        run.say(f"{cores} CPU(s): no pinning")
        args.server_core = args.client_core = None
    run.pin(args.client_core)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tmp = Path(tempfile.mkdtemp(prefix="mcp-budgets-"))
    started = time.monotonic()
    try:
        raw = benchmark(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    run.say(f"done in {time.monotonic() - started:.0f} s")
    text = markdown(raw, args)
    printer("\n" + text)
    if args.markdown_out:
        args.markdown_out.write_text(text)
    if args.json_out:
        args.json_out.write_text(json.dumps(raw, indent=2) + "\n")
    failed = sum(r["errors"] for r in raw["results"])
    unseen = any(row["counter_growth"] < row["served"] for row in raw["counted"])
    return 1 if failed or unseen else 0


if __name__ == "__main__":
    sys.exit(main())
