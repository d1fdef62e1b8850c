"""The bench apps with the daphne/Twisted levers of ``mcp_app.transport.twisted_compat`` (daphne tuning) applied.

``daphne bench.tuned:baseline`` is the bare ASGI app and ``daphne bench.tuned:channels_floor`` the Channels floor,
each with both levers on (mcp-host gets them from ``MCP_DAPHNE_TUNING=1``). ``install()`` refuses (and logs why)
outside the daphne/Twisted versions they were verified on, so these rows then measure plain daphne.
"""

from __future__ import annotations

from typing import Any

from bench.baseline_app import application as baseline
from mcp_app.transport import twisted_compat

TUNED = twisted_compat.install(edge_limits=False, daphne_tuning=True)


async def channels_floor(scope: Any, receive: Any, send: Any) -> None:
    """The Channels floor, imported on first use (it sets Django up, which the bare app must not pay for)."""
    from bench.channels_floor import application

    await application(scope, receive, send)


__all__ = ["TUNED", "baseline", "channels_floor"]
