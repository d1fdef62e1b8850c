"""``pip install .`` installs the reusable app only, complete with migrations and typing marker."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_mcp_app_only(tmp_path):
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources, and a stale build/ could
    # smuggle deleted modules into the wheel.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "node_modules", "__pycache__"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("mcp_host-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"mcp_app"}
    for required in (
        "mcp_app/py.typed",
        "mcp_app/migrations/0001_initial.py",
        "mcp_app/protocol/dispatcher.py",
        "mcp_app/contrib/demo/mcp_tools.py",
        "mcp_app/templates/admin/mcp_app/try_it.html",
    ):
        assert required in names
    import mcp_app

    assert wheel.name.startswith(f"mcp_host-{mcp_app.__version__}-")
