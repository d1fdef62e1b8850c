"""Caps of concurrent streams and live sessions per tenant and per agent, and the guard on file descriptors
(docs/limits.md).

- ``await hold_stream(token, slot_id) -> Slot``: a stream takes a slot under ``STREAMS_PER_TENANT`` and
  ``STREAMS_PER_AGENT``, a lease of ``limits.quotas`` in the ``STREAM_CAPS`` backend, or raises ``CapacityExceeded``
  (-32012; scope "process", 503, when ``descriptors_short()``). ``Slot.release()`` gives it back (idempotent).
- ``check_sessions(tenant_pk, agent_pk)`` (sync): raises ``CapacityExceeded`` over ``SESSIONS_PER_AGENT`` or
  ``SESSIONS_PER_TENANT`` live sessions, counted in the database (two racing for the last slot may both pass).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
from datetime import timedelta
from typing import Any

from django.utils import timezone

from ..backends import backends
from ..conf import mcp_settings
from ..observability import metrics
from ..protocol.errors import CapacityExceeded
from .quotas import Lease, take

__all__ = ["CapacityExceeded", "Slot", "check_sessions", "descriptors_short", "hold_stream"]

logger = logging.getLogger("mcp_app.limits")

STREAMS = "streams"
SESSIONS = "sessions"


Slot = Lease  # a stream's slot is a lease of the STREAM_CAPS backend


def descriptors_short() -> bool:
    """Whether this process has fewer than ``FD_RESERVE`` file descriptors left under its soft limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return False
    return open_descriptors() >= soft - int(mcp_settings.FD_RESERVE)


def open_descriptors() -> int:
    """How many file descriptors this process holds (``/proc/self/fd``; elsewhere ``/dev/fd``)."""
    for path in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError), os.scandir(path) as entries:
            return sum(1 for _ in entries) - 1  # the directory's own descriptor
    return 0


async def hold_stream(token: Any, slot_id: str) -> Slot:
    """Take a stream slot for ``token`` (a ``TokenEntry``), see the module docstring."""
    if descriptors_short():
        metrics.cap_refused(STREAMS, "process")
        logger.warning("new stream refused: fewer than FD_RESERVE file descriptors left (RLIMIT_NOFILE)")
        raise CapacityExceeded(STREAMS, "process", 0)
    tenant_limit = max(0, int(mcp_settings.STREAMS_PER_TENANT))
    agent_limit = max(0, int(mcp_settings.STREAMS_PER_AGENT))
    backend = backends["STREAM_CAPS"]
    ttl = float(mcp_settings.CAP_LEASE_SECONDS)
    pks = (token.tenant_pk, token.agent_pk)
    refused = await take(backend, slot_id, *pks, (tenant_limit, agent_limit), ttl, "stream caps")
    if refused is not None:
        metrics.cap_refused(STREAMS, refused)
        raise CapacityExceeded(STREAMS, refused, tenant_limit if refused == "tenant" else agent_limit)
    return Slot(backend, slot_id, *pks, ttl, "stream slot")


def check_sessions(tenant_pk: int, agent_pk: int) -> None:
    """Refuse a new session over a cap (sync; one query per cap that is set), see the module docstring."""
    from ..models import McpSession

    caps = (
        ("agent", "agent_id", agent_pk, mcp_settings.SESSIONS_PER_AGENT),
        ("tenant", "agent__tenant_id", tenant_pk, mcp_settings.SESSIONS_PER_TENANT),
    )
    since = timezone.now() - timedelta(seconds=float(mcp_settings.SESSION_IDLE_SECONDS))
    for scope, field, pk, limit in caps:
        if limit <= 0:
            continue
        live = McpSession.objects.filter(**{field: pk}, terminated_at__isnull=True, last_seen_at__gt=since)
        if live.count() >= limit:
            metrics.cap_refused(SESSIONS, scope)
            raise CapacityExceeded(SESSIONS, scope, int(limit))
