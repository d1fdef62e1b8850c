"""Who this process is, for records that a process owns while it runs (durable tasks running in-process).

``owner_id()`` is ``<host>:<pid>:<boot id>``; the boot id is random per process start, so a pid reused after a
restart (pid 1 in every container start) is told apart from the process that died. ``owner_is_dead(owner)``
answers only for owners on this host (a pid that no longer exists, or this very pid with another boot id); an
owner on another host is never declared dead from here (that host's processes recover its tasks when they
start, and the task's TTL bounds the rest).
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
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


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
