"""Who this process is, for records that a process owns while it runs (durable tasks running in-process).

``owner_id()`` is ``<host>:<pid>:<boot id>``; the boot id, random per process start, tells a pid reused after a
restart (pid 1 in every container) from the process that died. ``owner_is_dead(owner)`` answers only for owners on
this host (pid gone or a zombie, or this very pid with another boot id); ``mcp_app.heartbeat`` judges any host.
"""

from __future__ import annotations

import os
import secrets
import socket

HOST = socket.gethostname()[:64]
BOOT_ID = secrets.token_hex(6)


def owner_id() -> str:
    return f"{HOST}:{os.getpid()}:{BOOT_ID}"


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists (``kill(pid, 0)``, true for an exited process not reaped yet) and, where
    /proc tells, is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True  # no /proc (macOS) or it just went: trust kill()
    return state not in ([b"Z"], [b"X"])


def owner_is_dead(owner: str) -> bool:
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid_text, boot = parts
    if host != HOST:
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return boot != BOOT_ID
    return not _pid_alive(pid)
