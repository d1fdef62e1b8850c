"""``pip install .`` installs the reusable app only, complete with migrations, typing marker and licence, built
without a deprecation warning from the build backend."""

from __future__ import annotations

import re
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
    build = subprocess.run(
        # -v: pip shows the build backend's output, where setuptools prints its deprecation warnings.
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    output = build.stdout + build.stderr
    assert not re.search(r"DeprecationWarning|BuildBackendWarning|is deprecated", output), output[-4000:]
    (wheel,) = tmp_path.glob("mcp_host-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    # The licence: an SPDX expression (PEP 639) and the LICENSE file in the wheel.
    (metadata_name,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    metadata = archive.read(metadata_name).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    (license_name,) = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
    assert archive.read(license_name) == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in archive.read(license_name)
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
