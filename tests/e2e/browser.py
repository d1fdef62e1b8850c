"""What the browser tests share: Debian's chromium (required under ``MCP_REQUIRE_SERVICES=1``), signing in, and
where screenshots go (the daphne as in production is ``styled_daphne`` in ``conftest.py``).

Screenshots: ``$MCP_ARTIFACTS_DIR`` (default ``artifacts/screenshots/`` in the repository, git-ignored), one folder
per test module; CI keeps the folder as the run's artifacts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REQUIRE_SERVICES

CHROMIUM = os.environ.get("MCP_CHROMIUM", "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
WINDOW = {"width": 1366, "height": 900}


def chromium() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if path is None:
        message = f"chromium is not installed ({CHROMIUM}); .ci/run installs it with apt-get"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)
    return path


def screenshots(folder: str) -> Path:
    """The folder for one test's screenshots (created, emptied of an earlier run's)."""
    base = Path(os.environ.get("MCP_ARTIFACTS_DIR") or ROOT / "artifacts" / "screenshots")
    path = base / folder
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def login(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("form [type=submit]")
    page.wait_for_url(f"{base}/admin/")
