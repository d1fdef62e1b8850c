"""No module of ``mcp_app`` writes to a third-party module or class outside the listed compatibility modules,
whose writes are version-guarded (issue 26; ``docs/architecture.md``, *Writes to third-party names*).

An AST scan of every assignment, augmented or annotated assignment, deletion and ``setattr``/``delattr`` call whose
target is rooted in a name imported from outside ``mcp_app`` and the standard library (``httpx.X = ...``,
``http.RESPONSES[429] = ...``, ``setattr(Server, ...)``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPATIBILITY_MODULES = {"mcp_app/transport/twisted_compat.py"}
# Public attributes a library documents for setting: Django's ``AdminSite.index_template`` and ``index_title``.
DOCUMENTED = {
    "mcp_app/admin/__init__.py: _admin.site.index_template",
    "mcp_app/admin/__init__.py: _admin.site.index_title",
}


def _third_party_names(tree: ast.Module) -> set[str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({(alias.asname or alias.name).split(".")[0]: alias.name for alias in node.names})
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update({alias.asname or alias.name: node.module for alias in node.names})
    return {
        name
        for name, module in names.items()
        if module.split(".")[0] not in {"mcp_app", "__future__", *sys.stdlib_module_names}
    }


def _root(target: ast.expr) -> str | None:
    while isinstance(target, ast.Attribute | ast.Subscript):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def writes(source: str) -> list[str]:
    """The writes to third-party names in ``source``, as source text."""
    tree = ast.parse(source)
    imported = _third_party_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"setattr", "delattr"}:
            if node.args and _root(node.args[0]) in imported:
                found.append(ast.unparse(node))
            continue
        found += [
            ast.unparse(target)
            for target in targets
            if isinstance(target, ast.Attribute | ast.Subscript) and _root(target) in imported
        ]
    return found


def test_no_module_writes_to_a_third_party_name_outside_the_compatibility_modules() -> None:
    found = []
    for path in sorted((ROOT / "mcp_app").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if "/migrations/" not in name and name not in COMPATIBILITY_MODULES:
            found += [f"{name}: {write}" for write in writes(path.read_text())]
    assert [write for write in found if write not in DOCUMENTED] == []


def test_the_compatibility_modules_still_write_what_the_architecture_lists() -> None:
    listed = (ROOT / "docs" / "architecture.md").read_text()
    for name in COMPATIBILITY_MODULES:
        for write in writes((ROOT / name).read_text()):
            assert f"`{write.split('[')[0]}" in listed, write


def test_the_scan_sees_every_kind_of_write() -> None:
    source = """
import os
import httpx
from twisted.web import http
from mcp_app import conf

httpx.AsyncClient.send = None
http.RESPONSES[429] = b"Too Many Requests"
httpx.limit += 1
del httpx.Timeout
setattr(http.Request, "x", 1)
delattr(httpx, "y")
os.environ["A"] = "b"
conf.mcp_settings.X = 1
client = httpx.AsyncClient()
client.timeout = 1
"""
    assert writes(source) == [
        "httpx.AsyncClient.send",
        "http.RESPONSES[429]",
        "httpx.limit",
        "httpx.Timeout",
        "setattr(http.Request, 'x', 1)",
        "delattr(httpx, 'y')",
    ]
