"""The official MCP conformance suite (``@modelcontextprotocol/conformance``) against a real daphne process.

Both lines of the suite and the Node.js they need (22; the machine's Node may be older) are pinned by
``tests/e2e/node/package.json`` (the stable line under the npm alias ``conformance-stable``) and installed by
``make npm-tools`` (``tests/e2e/node_tools.py``): nothing is downloaded at test time. The suite's CLI has
no option for HTTP headers, so ``conformance_headers.mjs`` (a ``node --import`` preload) adds the agent's bearer
token to every request and puts ``?agentId=`` back where the CLI drops the query.

The target is the ``conformance`` server that ``mcp_app.contrib.conformance.setup.ensure_conformance`` creates,
whose allowed origins do not list the daphne fixture's (the DNS-rebinding probe sends that origin to that host:
a same-origin request, served unlisted). What is asserted:

- ``--requirements 2026-07-28``: every scenario on the stateless wire, the 37 scored ones and the extension
  (tasks) and pending ones too, passes: no FAILURE check anywhere, and the CLI exits 0.
- ``--suite all``: all 65 scenarios (the handshake-era ones on the 2025-11-25 wire: sessions, sampling,
  elicitation, subscriptions, logging) pass in the same way.
- ``--suite all`` of the stable 0.1.x line too. Both lines: no FAILURE and no WARNING check either.

The npm versions of both lines live in ``tests/e2e/node/package.json`` (and its lock) only.

The CLI's output stays captured (it is shown, with its ``Total: N passed, M failed`` line renamed, only in a
failure message), so its summary cannot be read as this test run's count.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Daphne
from tests.e2e.node_tools import package_dir, pinned, pinned_node

pytestmark = pytest.mark.e2e

SUITE_PACKAGE = "@modelcontextprotocol/conformance"
STABLE_SUITE_ALIAS = "conformance-stable"  # the stable 0.1.x line, installed beside the current one
ALPHA_SUITE_VERSION = pinned(SUITE_PACKAGE)  # the current line (2026-07-28 and --suite all)
STABLE_SUITE_VERSION = pinned(STABLE_SUITE_ALIAS)  # the newest 0.1.x release (--suite all; no --timeout option)
PRELOAD = Path(__file__).with_name("conformance_headers.mjs")
RUN_TIMEOUT_SECONDS = 420
SCENARIO_TIMEOUT_MS = 20_000

# Each line's --suite all runs at least this many server scenarios.
SUITE_ALL_SCENARIOS = {ALPHA_SUITE_VERSION: 65, STABLE_SUITE_VERSION: 32}

_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@dataclass(frozen=True)
class Cli:
    node: Path
    entry: Path
    version: str

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry), *args]


def _cli(package: str, version: str) -> Cli:
    """The CLI of one line of the suite and the pinned Node, as ``make npm-tools`` installed them."""
    return Cli(node=pinned_node(), entry=package_dir(package) / "dist" / "index.js", version=version)


@pytest.fixture(scope="session")
def conformance_cli() -> Cli:
    """The current (alpha) line of the suite."""
    return _cli(SUITE_PACKAGE, ALPHA_SUITE_VERSION)


@pytest.fixture(scope="session")
def stable_conformance_cli() -> Cli:
    """The stable 0.1.x line of the suite."""
    return _cli(STABLE_SUITE_ALIAS, STABLE_SUITE_VERSION)


@dataclass(frozen=True)
class Target:
    url: str
    agent_id: str
    token: str


@pytest.fixture
def conformance_target(transactional_db: None, daphne: Daphne, agent_factory: Any, token_factory: Any) -> Target:
    """The ``conformance`` server and a fresh agent token scoped to it (committed). Its allowed origins do not
    list daphne's: the suite's DNS-rebinding probe sends daphne's own origin, which passes as same-origin."""
    from mcp_app.contrib.conformance.setup import ensure_conformance

    server = ensure_conformance()
    server.allowed_origins = ["https://console.example"]  # no loopback origin listed, daphne's least of all
    server.save(update_fields=["allowed_origins"])
    agent = agent_factory(tenant=server.tenant, agent_id="conformance-agent")
    _token, raw = token_factory(agent=agent, servers=[server])
    return Target(
        url=f"{daphne.url}/mcp/{server.server_id}?agentId={agent.agent_id}", agent_id=agent.agent_id, token=raw
    )


@dataclass
class Run:
    returncode: int
    output: str
    checks: dict[str, list[dict[str, Any]]]  # scenario -> its checks

    def failures(self, scenarios: frozenset[str] | set[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        return {
            scenario: failed
            for scenario, checks in sorted(self.checks.items())
            if scenarios is None or scenario in scenarios
            if (failed := [check for check in checks if check.get("status") == "FAILURE"])
        }

    def warnings(self) -> dict[str, list[dict[str, Any]]]:
        return {
            scenario: warned
            for scenario, checks in sorted(self.checks.items())
            if (warned := [check for check in checks if check.get("status") == "WARNING"])
        }

    def report(self, failures: dict[str, list[dict[str, Any]]]) -> str:
        lines = []
        for scenario, checks in failures.items():
            lines.append(f"{scenario}:")
            lines += [
                f"  {check.get('id')}: {check.get('errorMessage') or check.get('description')}" for check in checks
            ]
        return "\n".join(lines)

    def output_tail(self, lines: int = 60) -> str:
        # The CLI's closing "Total: N passed, M failed" must not pass for this test run's count.
        tail = self.output.splitlines()[-lines:]
        return "\n".join(re.sub(r"^Total:", "conformance total:", line) for line in tail)


def _scored_server_scenarios(cli: Cli, revision: str) -> set[str]:
    """The server scenarios ``--requirements revision`` scores, as the pinned CLI lists them."""
    listed = subprocess.run(
        cli.command("list", "--server", "--requirements", revision),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    scenarios: set[str] = set()
    in_server_section = False
    for line in listed.splitlines():
        if line.startswith("Server scenarios"):
            in_server_section = True
        elif in_server_section and line.strip().startswith("- "):
            scenarios.add(line.strip()[2:].strip())
        elif in_server_section and not line.strip():
            break
    assert scenarios, f"could not read the scored scenarios from:\n{listed}"
    return scenarios


def _run_suite(cli: Cli, target: Target, selection: list[str], output_dir: Path) -> Run:
    env = {
        **os.environ,
        "MCP_CONFORMANCE_HEADERS": json.dumps({"Authorization": f"Bearer {target.token}"}),
        "MCP_CONFORMANCE_QUERY": f"agentId={target.agent_id}",
        "MCP_CONFORMANCE_UNDICI": str(cli.entry),
        "NO_COLOR": "1",
    }
    command = [
        str(cli.node),
        "--import",
        PRELOAD.as_uri(),
        str(cli.entry),
        "server",
        "--url",
        target.url,
        *selection,
        *(["--timeout", str(SCENARIO_TIMEOUT_MS)] if cli.version != STABLE_SUITE_VERSION else []),
        "-o",
        str(output_dir),
    ]
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stalled = Run(returncode=-1, output=partial, checks={})
        pytest.fail(f"the conformance suite did not finish in {RUN_TIMEOUT_SECONDS}s:\n{stalled.output_tail()}")
    checks: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(output_dir.glob("*/checks.json")):
        match = _RESULT_DIR.match(path.parent.name)
        assert match, f"unexpected results folder {path.parent.name}"
        checks.setdefault(match["scenario"], []).extend(json.loads(path.read_text()))
    return Run(returncode=completed.returncode, output=completed.stdout + completed.stderr, checks=checks)


@contextlib.contextmanager
def _timed(label: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    print(f"{label}: {time.monotonic() - started:.1f}s")


def test_requirements_2026_07_28(conformance_cli: Cli, conformance_target: Target, tmp_path: Path) -> None:
    """Every scenario on the stateless wire: the 37 scored ones, and the extension and pending ones too."""
    scored = _scored_server_scenarios(conformance_cli, "2026-07-28")
    with _timed("conformance 2026-07-28"):
        run = _run_suite(conformance_cli, conformance_target, ["--requirements", "2026-07-28"], tmp_path / "results")
    missing = sorted(scored - set(run.checks))
    assert not missing, f"scored scenarios without results: {missing}\n{run.output_tail()}"
    failures = run.failures()
    assert not failures, f"conformance failures (2026-07-28):\n{run.report(failures)}\n\n{run.output_tail()}"
    warnings = run.warnings()
    assert not warnings, f"conformance warnings (2026-07-28):\n{run.report(warnings)}"
    assert run.returncode == 0, f"the suite exited {run.returncode}:\n{run.output_tail()}"


def _suite_all(cli: Cli, target: Target, results: Path) -> None:
    with _timed(f"conformance {cli.version} --suite all"):
        run = _run_suite(cli, target, ["--suite", "all"], results)
    expected = SUITE_ALL_SCENARIOS[cli.version]
    assert len(run.checks) >= expected, f"only {len(run.checks)} scenarios reported\n{run.output_tail()}"
    failures = run.failures()
    assert not failures, f"conformance failures ({cli.version}):\n{run.report(failures)}\n\n{run.output_tail()}"
    warnings = run.warnings()
    assert not warnings, f"conformance warnings ({cli.version}):\n{run.report(warnings)}"
    assert run.returncode == 0, f"the suite exited {run.returncode}:\n{run.output_tail()}"


def test_suite_all(conformance_cli: Cli, conformance_target: Target, tmp_path: Path) -> None:
    """``--suite all`` of the current line: the handshake-era scenarios on the 2025-11-25 wire (sessions,
    sampling, elicitation, subscriptions, SSE polling) and the 2026-07-28 ones with the tasks extension."""
    _suite_all(conformance_cli, conformance_target, tmp_path / "results")


def test_stable_line_suite_all(stable_conformance_cli: Cli, conformance_target: Target, tmp_path: Path) -> None:
    """``--suite all`` of the stable 0.1.x line, which clients of the released SDKs are tested with."""
    _suite_all(stable_conformance_cli, conformance_target, tmp_path / "results")
