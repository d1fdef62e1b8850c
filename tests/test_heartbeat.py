"""``mcp_app.heartbeat``: owners judged by their beats in Redis (any host), queues counted by their consumers,
and a zombie of this host judged dead by its pid."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mcp_app import process
from mcp_app.heartbeat import RedisHeartbeats
from tests.conftest import require_redis

BOUND_SECONDS = 10.0


@pytest.fixture
def beats() -> RedisHeartbeats:
    return RedisHeartbeats(require_redis(), prefix=f"mcp:test-live:{uuid.uuid4().hex[:8]}")


def test_an_owner_that_stops_beating_is_dead_after_the_timeout_on_any_host(beats: RedisHeartbeats) -> None:
    remote = "another-host:4242:abcdef"
    beats.beat(remote, [])
    assert beats.dead([remote], timeout=60) == set()
    assert beats.dead(["never-beat:1:x"], timeout=0.001) == set()  # not known here: not judged by its heartbeat
    started = time.monotonic()
    while remote not in beats.dead([remote], timeout=0.2):  # silent for longer than the timeout
        assert time.monotonic() - started < BOUND_SECONDS
        time.sleep(0.05)
    beats.beat(remote, [])  # beating again: alive again
    assert beats.dead([remote], timeout=60) == set()


def test_consumers_of_a_queue_are_counted_until_they_leave(beats: RedisHeartbeats) -> None:
    assert beats.consumers("calls", 60) == 0
    beats.beat("w1:1:a", ["calls"])
    beats.beat("w2:2:b", ["calls", "other"])
    assert beats.consumers("calls", 60) == 2 and beats.consumers("other", 60) == 1
    beats.leave("w1:1:a", ["calls"])
    assert beats.consumers("calls", 60) == 1


def test_a_zombie_of_this_host_is_dead() -> None:
    """``kill(pid, 0)`` succeeds for an exited process nobody reaped yet: the pid check reads its state."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        started = time.monotonic()
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() - started < BOUND_SECONDS
            time.sleep(0.01)
        assert process.owner_is_dead(f"{socket.gethostname()[:64]}:{child.pid}:feedbeef")
    finally:
        child.wait()
    assert not process.owner_is_dead(process.owner_id())
