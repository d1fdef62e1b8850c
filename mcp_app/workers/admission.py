"""Admission of worker calls: a slot of the caller's tenant and of its agent before a call is recorded.

``admit(principal, call_id)`` takes the slot (``mcp_app.workers.quotas.acquire``, with the limits carried by
the request's ``Principal``: no query) or raises ``QuotaExceeded`` (-32010), so a refused call never runs. The
routing runner (``workers.runner.RoutingRunner.start``) is the single caller: it admits before the durable record
exists and gives the slot back when the call settles; the worker and the reaper give it back too when the
serving process no longer waits (``quotas.release_call``). Inline tools are never counted.

Not owned here: how calls run (``workers.runner``, ``workers.execute``), the lease semantics (``quotas``).
"""

from __future__ import annotations

from ..protocol.context import Principal
from . import quotas


async def admit(principal: Principal | None, call_id: str) -> quotas.Lease | None:
    """Take a slot for one worker call of ``principal``; ``None`` when the caller has no database identity (no
    tenant or agent to count against). Raises ``QuotaExceeded``."""
    if principal is None or principal.tenant_pk is None or principal.agent_pk is None:
        return None
    tenant_limit, agent_limit = quotas.limits_for(principal)
    return await quotas.acquire(
        call_id,
        tenant_pk=principal.tenant_pk,
        agent_pk=principal.agent_pk,
        tenant_limit=tenant_limit,
        agent_limit=agent_limit,
    )
