"""The one question the edge asks of every limit of a request: ``await admit(caller, ...)``, a ``Refusal`` or ``None``.

What is checked follows from the caller (docs/limits.md): not authenticated (``Caller.token`` is ``None``), whether
its address or token prefix is blocked, and with ``failed=True`` its failure counted (``bruteforce``);
authenticated, ``requests`` drawn from its buckets (``rates``) and, for the ``tools`` it calls, charged to its
budgets (``budgets``: the calls counted, refused once a tool-seconds or cost budget is spent), a stream slot appended to ``stream`` for its owner
to release (an idle stream keeps it), room under the session caps with ``session=True`` (``caps``). A refusal
carries its error, the HTTP status (429; 503 when short of file descriptors) and ``Retry-After`` (5 for a cap:
when a slot frees depends on the caller, not on time; for a budget, until its period resets).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from ..protocol.errors import BudgetExceeded, CapacityExceeded, RateLimited
from ..protocol.serving import Refusal
from . import bruteforce, budgets, caps, rates

CAP_RETRY_AFTER = 5


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: its source address and the bearer token it presents, and once authenticated its token snapshot
    (``caching.identity.TokenEntry``)."""

    address: str
    raw_token: str | None
    token: Any = None

    @classmethod
    def of(cls, scope: dict[str, Any], raw_token: str | None) -> Caller:
        """The caller of an ASGI request, by its client address, before authentication."""
        return cls(bruteforce.client_address(scope), raw_token)


async def admit(
    caller: Caller,
    *,
    failed: bool = False,
    requests: int = 0,
    tools: Iterable[Any] = (),
    stream: list[caps.Slot] | None = None,
    session: bool = False,
) -> Refusal | None:
    """The refusal of the first limit ``caller`` is over, or ``None`` (see the module docstring)."""
    token = caller.token
    if token is None:
        if not failed:
            limited = bruteforce.blocked(caller.address, caller.raw_token)
        else:
            bruteforce.log_failure(caller.address, 401)
            limited = await bruteforce.failed(caller.address, caller.raw_token)
        return None if limited is None else Refusal(limited, 429, limited.retry_after_seconds)
    try:
        if requests:
            tools = list(tools)
            buckets = rates.request_buckets(token, tools=tools, cost=requests)
            if token.budgets and tools:
                await budgets.take(token, buckets, len(tools))  # the buckets too, in the same round trip
            else:
                await rates.take(buckets)
        if stream is not None:
            stream.append(await caps.hold_stream(token, uuid.uuid4().hex))
        if session:
            await database_sync_to_async(caps.check_sessions)(token.tenant_pk, token.agent_pk)
    except RateLimited as limited:
        return Refusal(limited, 429, limited.retry_after_seconds)
    except BudgetExceeded as spent:
        return Refusal(spent, 429, spent.retry_after_seconds)
    except CapacityExceeded as capped:
        return Refusal(capped, 503, 1) if capped.scope == "process" else Refusal(capped, 429, CAP_RETRY_AFTER)
    return None
