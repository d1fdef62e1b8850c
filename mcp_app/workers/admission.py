"""``QuotaRunner``: the inline ``Runner`` with worker-call admission in front of tools bound with
``execution == "worker"``.

A worker-bound call first takes a slot of its tenant and of its agent (``mcp_app.workers.quotas.acquire``, the
limits carried by the request's ``Principal``, no query) and gives it back when the run ends, however it ends
(result, error, cancellation). A refused call never runs; the client gets ``QuotaExceeded`` (-32010). Inline
tools pass straight through. The slot covers the run itself, so a call that turns into a durable task
(tasks extension) keeps its slot until the task's work ends, not only until its request is answered.

This is the single admission point until the proxy runner of ``mcp_app.workers`` dispatches worker calls to
Celery; it then moves there (acquire before dispatch, release when the durable record is terminal).

Not owned here: how calls run (``mcp_app.runtime.execution.Runner``), the lease semantics (``quotas``).
"""

from __future__ import annotations

import secrets
from typing import Any

from ..protocol.context import Principal, ToolCall, ToolDescriptor
from ..runtime.execution import Runner
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


class QuotaRunner(Runner):
    """Runs calls in the serving process like ``Runner``, admitting worker-bound ones against their quotas."""

    async def _call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        if tool.execution != "worker":
            return await super()._call(tool, arguments, call)
        lease = await admit(call.request.principal, secrets.token_hex(16))
        try:
            return await super()._call(tool, arguments, call)
        finally:
            if lease is not None:
                await lease.release()
