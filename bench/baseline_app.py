"""The floor of the benchmarks: a bare ASGI app (no Django, no Channels) that answers any POST with a fixed result.

Served by the same daphne as mcp-host (``daphne bench.baseline_app:application``), it measures what the HTTP
server, the event loop and the load generator cost on their own. It reads the whole body, as the real endpoint
does, then answers with the JSON-RPC result that mcp-host gives to an ``echo`` call of ``"hi"`` (id 1) and the
same response headers. Anything but POST gets 405. It keeps no state and touches no database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

RESULT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}'
JSON_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":  # daphne does not send lifespan events; other servers may
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    while True:  # drain the body, as the real endpoint does before it answers
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("more_body"):
            break
    if scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 405, "headers": [(b"allow", b"POST")]})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": RESULT})
