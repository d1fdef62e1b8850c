"""``mcp_host.asgi`` freezes the start-up heap out of the garbage collector's sight, unless told not to.

Checked in a fresh interpreter (importing the ASGI module here would freeze the test process's own heap).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import gc, mcp_host.asgi; print(gc.get_freeze_count())"


def frozen_objects(flag: str | None) -> int:
    env = {key: value for key, value in os.environ.items() if key != "MCP_GC_FREEZE"}
    env["DJANGO_SETTINGS_MODULE"] = "mcp_host.settings"
    env.pop("REDIS_URL", None)  # the embedded defaults: nothing to connect to at import
    env.pop("DATABASE_URL", None)
    if flag is not None:
        env["MCP_GC_FREEZE"] = flag
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("flag", [None, "1"])
def test_the_start_up_heap_is_frozen_by_default(flag: str | None) -> None:
    assert frozen_objects(flag) > 50_000  # Django, Channels, mcp_app: well over 100,000 objects here


def test_mcp_gc_freeze_off_leaves_the_collector_as_it_is() -> None:
    assert frozen_objects("0") == 0
