"""Orphan recovery: the durable calls of processes that died are failed, not left ``working`` until their TTL."""

from __future__ import annotations

import functools
import logging

from ...models import ToolTask

logger = logging.getLogger("mcp_app.runtime.durable")


def recover_orphaned_tasks(*, quiet: bool = False) -> int:
    """Fail the ``working`` tasks of processes that died (kill -9, OOM, a crash): judged by their heartbeat
    (``mcp_app.heartbeat.dead``: a lease, so an exited but unreaped process, a pid reused after a fast restart
    and a process on another host count as dead), and at once for a process of this host that is gone. Called
    when a process starts (``mcp_host.asgi``) and periodically (``workers.serving.liveness.start_sweeping``). Returns
    how many were failed; never raises (a database that is not migrated yet or unreachable, or an unreachable
    heartbeat backend, is logged, at debug level when ``quiet``, and skipped)."""
    from ... import heartbeat

    @functools.cache
    def is_dead(owner: str) -> bool:
        return owner in heartbeat.dead([owner])

    try:
        failed = ToolTask.objects.fail_orphaned(is_dead)
    except Exception as error:  # not migrated yet, or no database at import time: nothing to recover from
        level = logging.DEBUG if quiet else logging.WARNING
        logger.log(level, "could not recover the tasks of dead processes: %s: %s", type(error).__name__, error)
        return 0
    if failed:
        logger.warning("failed %d task(s) whose process had died", failed)
    return failed
