"""What an upstream sends during a proxied call, carried to the call's client.

A proxied call sets ``current`` to its ``CallRelay`` while it awaits the upstream; the SDK carries context
variables into the callbacks of what arrives for that request, so they find the call on a shared connection (what
arrives outside a call is declined). Progress and logs are forwarded as the client asked; elicitation and
sampling asked of a declaring client, or queued (``pending``) for ``calls`` to hand a stateless one.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any

from ..protocol.context import CallContext
from ..protocol.errors import INTERNAL_ERROR

logger = logging.getLogger("mcp_app.federation")

CAPABILITY = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling"}


@dataclass(eq=False)
class Parked:
    """A server-to-client request of the upstream that a stateless-era client answers on its retry."""

    method: str
    params: dict[str, Any]
    answer: asyncio.Future[dict[str, Any]]


@dataclass(eq=False)
class CallRelay:
    """The call an upstream's messages belong to, and how to answer its requests."""

    call: CallContext
    # Stateless-era clients: requests wait here for the client's retry (``calls`` turns them into input_required).
    park: bool = False
    pending: asyncio.Queue[Parked] = field(default_factory=asyncio.Queue)
    # The SDK runs each notification's callback in a task of its own: one at a time, in arrival order, so that
    # no progress overtakes an earlier one (and is then dropped as stale).
    _order: asyncio.Lock = field(default_factory=asyncio.Lock)

    def can_ask(self, method: str) -> bool:
        capability = CAPABILITY.get(method)
        return capability is not None and self.call.request.client_declares(capability)

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The client's answer (a result object) to the upstream's request, or a refusal: ``{"error": ...}``
        for sampling, a declined elicitation."""
        if not self.can_ask(method):
            return declined(method, f"{method} declined: the client did not declare the capability")
        if self.park:
            parked = Parked(method, params, asyncio.get_running_loop().create_future())
            await self.pending.put(parked)
            return await parked.answer
        outbound = self.call.outbound
        if not outbound.can_request:
            return declined(method, f"{method} declined: the client's request cannot carry server-to-client requests")
        answer = await outbound.request(method, params)
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            code, message = int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "refused"))
            return {"error": {"code": code, "message": message}}
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    async def settled(self) -> None:
        """Wait until what arrived before the answer has been relayed (the lock is fair: its waiters go first),
        so that no progress reaches the client after the result, nor is lost with a worker call's end."""
        async with self._order:
            return

    async def log(self, level: str, data: Any, logger_name: str | None) -> None:
        async with self._order:
            await self.call.log.log(level, data, logger_name)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        async with self._order:
            await self.call.progress.report(progress, total, message)


def declined(method: str, message: str) -> dict[str, Any]:
    """The answer to an upstream's request the client does not give: a declined elicitation, else ``message``."""
    if method == "elicitation/create":
        return {"action": "decline"}
    return {"error": {"code": -1, "message": message}}


current: contextvars.ContextVar[CallRelay | None] = contextvars.ContextVar("mcp_app.federation.relay", default=None)
