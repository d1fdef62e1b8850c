"""The composition root: which implementation serves each port of the protocol core, built in one place.

``get_runner()`` is the ``RoutingRunner`` (worker-bound tools go to Celery workers, or run in this process without
a broker, after admission against their quotas; the rest run inline); tests may ``set_runner`` a fake and
``set_runner(None)`` to go back. ``request_context`` wires one request with the ports of its era. Nothing else
constructs a runner or decides which port a request gets: the transport and the admin's console ask here, and
bring only what the transport owns (headers, the response's ``emit``, the back-channel, the session).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .conf import mcp_settings, on_reload
from .limits import metering
from .limits.quotas import limits_for
from .observability import tracing
from .protocol import versions
from .protocol.context import Approvals, Principal, RequestContext, ToolRunner
from .protocol.descriptors import ServerCatalog
from .runtime.audit import request_audit

if TYPE_CHECKING:
    from .caching.identity import ServerEntry, TokenEntry
    from .models import ToolTask
    from .runtime.handshake_tasks import HandshakeTaskService
    from .runtime.tasks import TaskService

_runner: ToolRunner | None = None


def get_runner() -> ToolRunner:
    """The process's tool runner (built on first use)."""
    global _runner
    if _runner is None:
        from .workers.serving.runner import RoutingRunner

        _runner = RoutingRunner()
    return _runner


def set_runner(runner: ToolRunner | None) -> None:
    """Replace the process's runner (``None``: the default again)."""
    global _runner
    _runner = runner


_gate: Approvals | None = None


def approval_gate() -> Approvals:
    """The ``Approvals`` port: the calls of tools that require approval (stateless, one for every request)."""
    global _gate
    if _gate is None:
        from .runtime.approvals import GATE

        _gate = GATE
    return _gate


def task_service(server_pk: int, agent_pk: int) -> TaskService:
    """The caller's durable tasks on one server, run with the process's runner."""
    from .runtime.tasks import TaskService

    return TaskService(server_pk, agent_pk, get_runner())


def handshake_task_service(server_pk: int, agent_pk: int, session_key: str | None) -> HandshakeTaskService:
    """The caller's 2025-11-25 tasks on one server (``session_key``: where their status notifications go)."""
    from .runtime.handshake_tasks import HandshakeTaskService

    return HandshakeTaskService(server_pk, agent_pk, session_key)


def cancel_task(task: ToolTask, message: str = "Cancelled by an administrator") -> bool:
    """Cancel a durable record (a task of either era, or a worker call) from synchronous code, wherever it runs:
    the admin's cancel action. Returns whether it moved (a terminal record stays as it is)."""
    from .runtime import durable
    from .workers.serving import runner  # noqa: F401  (registers how a worker call is stopped: its Celery message revoked)

    return durable.cancel_now(task, message)


# What a request's context holds that depends only on its (server, token) snapshots, era, protocol version and the
# settings: made on the first request of each, reused by the next (the warm path builds one object, the context).
# Keyed by the snapshots' identities (an invalidated entry is a new object, so a new key); the entries themselves
# are kept in the value, so that a key is never a freed object's reused id. Bounded, forgotten on a settings change.
_Warm = tuple["ServerEntry", "TokenEntry", Principal, Any, Any]
_warm: dict[tuple[int, int, str, str], _Warm] = {}
_WARM_KEPT = 4096


@on_reload
def _forget_warm() -> None:
    _warm.clear()


def _warm_parts(server: ServerEntry, token: TokenEntry, era: str, protocol_version: str) -> _Warm:
    key = (id(server), id(token), era, protocol_version)
    parts = _warm.get(key)
    if parts is not None and parts[0] is server and parts[1] is token:
        return parts
    principal = Principal(
        tenant=server.tenant_slug,
        agent_id=token.agent_id,
        tenant_pk=token.tenant_pk,
        agent_pk=token.agent_pk,
        worker_call_limits=limits_for(token),
        time_zone=server.time_zone,
    )
    # The audit port of a request stamps calls with this caller only: one serves every request of the key.
    audit = request_audit(server, token, era, protocol_version)
    # Sessionless handshake-era requests share their tasks port too (it keeps only these keys).
    handshake = handshake_task_service(server.pk, token.agent_pk, None) if era != versions.MODERN else None
    if len(_warm) >= _WARM_KEPT:
        _warm.clear()
    parts = _warm[key] = (server, token, principal, audit, handshake)
    return parts


def request_context(
    server: ServerEntry,
    token: TokenEntry,
    catalog: ServerCatalog,
    *,
    era: str,
    protocol_version: str,
    durable_tasks: bool = True,
    **fields: Any,
) -> RequestContext:
    """The handlers' context for one request of ``token``'s agent on ``server`` (cached snapshots: no query),
    wired for its era. ``fields`` are what the transport owns (``headers``, ``emit``, ``outbound``, ``session``,
    ...); ``durable_tasks=False`` leaves out the task ports of both eras (the admin's console runs no tasks)."""
    _server, _token, principal, audit, sessionless_tasks = _warm_parts(server, token, era, protocol_version)
    ports: dict[str, Any] = {
        "runner": get_runner(),
        "tracer": tracing.active(),  # None (untraced) unless MCP_APP["TRACING"] is on
        # Buffers one record per tools/call in memory (no query); written off the path. NO_AUDIT when off.
        "audit": audit,
        # Tells what each call spent to the usage ledger and the budgets (buffered in memory: no query).
        "meter": metering.METER,
        "approvals": approval_gate(),
    }
    tasks = None
    if era == versions.MODERN:
        ports["cache_ttl_ms"] = mcp_settings.CACHE_TTL_MS
        if durable_tasks:
            ports["tasks"] = tasks = task_service(server.pk, token.agent_pk)
    elif durable_tasks:
        session = fields.get("session")
        ports["handshake_tasks"] = (
            sessionless_tasks if session is None else handshake_task_service(server.pk, token.agent_pk, session.key)
        )
    ctx = RequestContext(
        server=server.description(),
        catalog=catalog,
        protocol_version=protocol_version,
        era=era,
        principal=principal,
        page_size=mcp_settings.PAGE_SIZE,
        page_bytes=mcp_settings.PAGE_MAX_BYTES,
        max_echoed_bytes=mcp_settings.MAX_ECHOED_BYTES,
        **ports,
        **fields,
    )
    if tasks is not None:
        tasks.bind(ctx)  # the service hides the tasks of tools outside this context's view
    return ctx
