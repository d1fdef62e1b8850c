"""The protocol core imports nothing from Django, Channels, Celery or DRF: statically (every import statement
of every module under ``mcp_app/protocol``) and at runtime (a fresh interpreter importing the handlers)."""

from __future__ import annotations

import ast
import importlib.util
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import mcp_app

FORBIDDEN = frozenset({"django", "channels", "celery", "rest_framework"})
PROTOCOL_DIR = Path(mcp_app.__file__).parent / "protocol"
REPO_ROOT = Path(mcp_app.__file__).parent.parent


def protocol_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, found without importing any of them."""
    found = {"mcp_app.protocol": PROTOCOL_DIR / "__init__.py"}

    def walk(directory: Path, prefix: str) -> None:
        for info in pkgutil.iter_modules([str(directory)]):
            name = f"{prefix}.{info.name}"
            if info.ispkg:
                found[name] = directory / info.name / "__init__.py"
                walk(directory / info.name, name)
            else:
                found[name] = directory / f"{info.name}.py"

    walk(PROTOCOL_DIR, "mcp_app.protocol")
    return found


def forbidden_imports(source: str, module: str, is_package: bool) -> set[str]:
    """The forbidden top-level modules that ``source`` imports anywhere, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                imported.add(importlib.util.resolve_name("." * node.level + (node.module or ""), package))
            else:
                imported.add(node.module or "")
    return {name.split(".")[0] for name in imported} & FORBIDDEN


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import django.db", {"django"}),
        ("from channels.layers import get_channel_layer", {"channels"}),
        ("def f():\n    import celery as c", {"celery"}),
        ("from rest_framework import serializers", {"rest_framework"}),
        ("from . import versions\nfrom ..errors import ParseError\nimport djangoish", set()),
    ],
)
def test_forbidden_imports_detects_what_it_should(source: str, expected: set[str]) -> None:
    assert forbidden_imports(source, "mcp_app.protocol.handlers.tools", is_package=False) == expected


def test_no_protocol_module_imports_a_framework() -> None:
    modules = protocol_modules()
    assert {
        "mcp_app.protocol.jsonrpc",
        "mcp_app.protocol.dispatcher",
        "mcp_app.protocol.handlers.tools",
    } <= set(modules)
    offenders = {
        name: found
        for name, path in modules.items()
        if (found := forbidden_imports(path.read_text(), name, is_package=path.name == "__init__.py"))
    }
    assert offenders == {}


def test_importing_the_handlers_loads_no_framework() -> None:
    code = (
        "import json, sys, mcp_app.protocol.handlers\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(FORBIDDEN)!r}))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
