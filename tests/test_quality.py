"""Repository hygiene that CI enforces: migrations match the models, and ruff is clean."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_are_in_sync_with_models():
    out = io.StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_ruff_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    check = subprocess.run([str(ruff), "check", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout
    formatted = subprocess.run([str(ruff), "format", "--check", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert formatted.returncode == 0, formatted.stdout


# -- the layers ---------------------------------------------------------------------------------------------------
# The contracts live in pyproject.toml ([tool.importlinter]); docs/architecture.md explains the order. The two
# cycles the edge's rewrite of the consumer and of durable tasks removes (issue 8) are the only ones allowed.
EDGE_CYCLE_IMPORTS: tuple[tuple[str, str], ...] = ()


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_import_contracts_hold():
    run = subprocess.run([_bin("lint-imports"), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


# Checks our contracts (pyproject.toml) on the real import graph, as it is and with one import added, in a fresh
# interpreter: import-linter reads every attribute of its contract classes, which the test process's Twisted
# (zope.interface) decorates with one that cannot be read.
_PROBE = """
import json, sys
import grimp
from importlinter import configuration
from importlinter.application.use_cases import read_user_options
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract

configuration.configure()
kinds = {"forbidden": ForbiddenContract, "layers": LayersContract, "acyclic_siblings": AcyclicSiblingsContract}
options = read_user_options("pyproject.toml")
results = []
for name_starts, importer, imported in json.loads(sys.argv[1]):
    (contract_options,) = [c for c in options.contracts_options if c["name"].startswith(name_starts)]
    kept = []
    for extra in (False, True):
        graph = grimp.build_graph("mcp_app", include_external_packages=True, cache_dir=None)
        if extra:
            graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import (test)")
        contract = kinds[contract_options["type"]](
            name=contract_options["name"], session_options=options.session_options, contract_options=contract_options
        )
        kept.append(contract.check(graph, verbose=False).kept)
    results.append(kept)
print(json.dumps(results))
"""

AGAINST_THE_CONTRACTS = [
    ("protocol is a pure core", "mcp_app.protocol.handlers.tools", "django.db"),
    ("protocol is a pure core", "mcp_app.protocol.context", "mcp_app.conf"),
    ("protocol, inside", "mcp_app.protocol.descriptors", "mcp_app.protocol.context"),
    ("protocol, inside", "mcp_app.protocol.ports", "mcp_app.protocol.reporters"),
    ("layers", "mcp_app.models.catalog", "mcp_app.catalog.resolver"),
    ("layers", "mcp_app.catalog.resolver", "mcp_app.runtime.execution"),
    ("layers", "mcp_app.definitions.targets", "mcp_app.runtime.webhooks"),
    ("layers", "mcp_app.definitions.registry", "mcp_app.models.catalog"),
    ("layers", "mcp_app.caching.identity", "mcp_app.runtime.audit"),
    ("layers", "mcp_app.api.views", "mcp_app.admin.base"),
    ("workers: the running side", "mcp_app.workers.running.call", "mcp_app.workers.serving.inbox"),
    ("models hold state", "mcp_app.models.servers", "mcp_app.api.serializers"),
    ("models hold state", "mcp_app.models.servers", "mcp_app.events"),
    ("admin and API", "mcp_app.api.views", "mcp_app.transport.auth"),
    ("no import cycles", "mcp_app.invalidation", "mcp_app.caching.identity"),
]


@pytest.fixture(scope="module")
def contract_results() -> list[list[bool]]:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(AGAINST_THE_CONTRACTS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr
    return json.loads(probe.stdout)


@pytest.mark.parametrize(
    "case", range(len(AGAINST_THE_CONTRACTS)), ids=[f"{a}->{b}" for _, a, b in AGAINST_THE_CONTRACTS]
)
def test_each_contract_catches_an_import_against_it(contract_results, case):
    kept_as_is, kept_with_the_import = contract_results[case]
    assert kept_as_is
    assert not kept_with_the_import


def _contracts() -> list[dict]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["importlinter"]["contracts"]


def test_the_pure_core_contract_names_every_other_part_of_mcp_app():
    """A new top-level module or package of mcp_app must be added to the forbidden list of the protocol contract
    (so the core cannot start importing it)."""
    import pkgutil

    import mcp_app

    (contract,) = [c for c in _contracts() if c["name"].startswith("protocol is a pure core")]
    parts = {f"mcp_app.{info.name}" for info in pkgutil.iter_modules(mcp_app.__path__)} - {"mcp_app.protocol"}
    assert parts - set(contract["forbidden_modules"]) == set()


def test_no_import_cycles_between_modules():
    """Module by module (finer than the contracts' sibling packages), imports inside functions and under
    TYPE_CHECKING included: the only cycles are the two the edge's rewrite removes."""
    import grimp

    graph = grimp.build_graph("mcp_app", cache_dir=None)
    for importer, imported in EDGE_CYCLE_IMPORTS:
        if graph.direct_import_exists(importer=importer, imported=imported):
            graph.remove_import(importer=importer, imported=imported)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append((module, imported, graph.find_shortest_chain(importer=imported, imported=module)))
    assert cycles == []


def test_mypy_is_clean():
    run = subprocess.run([_bin("mypy")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr


def test_managers_build_no_model_instances_from_hand_written_sql():
    """Managers query through the ORM. The SQL left in the models: ``ToolCall.objects.usage``, an aggregate
    (percentiles per tool, calls per day) that returns plain figures, and ``statements``, the composed-once
    INSERT and UPDATEs of the worker-call path, which only write (from the model's own field definitions) and
    never read a row back into an instance."""
    models_dir = ROOT / "mcp_app" / "models"
    offenders = {}
    for path in sorted(models_dir.glob("*.py")):
        source = path.read_text()
        hits = [marker for marker in (".raw(", "RawSQL", "cursor(", ".extra(") if marker in source]
        if hits:
            offenders[path.name] = hits
    assert offenders == {"audit.py": ["cursor("], "statements.py": ["cursor("]}
    statements = (models_dir / "statements.py").read_text()
    assert "SELECT" not in statements.upper() and "from_db" not in statements


def _private_imports() -> list[str]:
    """``from x import _y`` where ``x`` is another module of mcp_app (relative or absolute; inside functions too)."""
    import ast

    root = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / "mcp_app").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not (source == "mcp_app" or source.startswith("mcp_app.")):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: from {source} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    """A leading underscore says "this module's own": no other module of mcp_app imports it (make it public,
    with a name that says what it is, or move it where both can use it)."""
    assert _private_imports() == []


def test_every_module_of_workers_and_runtime_stays_under_350_lines():
    """A module that grows past this holds more than one job: cut it by job (docs/workers.md lists them)."""
    root = Path(__file__).resolve().parent.parent / "mcp_app"
    sizes = {
        str(path.relative_to(root)): len(path.read_text().splitlines())
        for part in ("workers", "runtime")
        for path in (root / part).rglob("*.py")
    }
    assert {name: size for name, size in sizes.items() if size >= 350} == {}
