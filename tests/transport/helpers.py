"""Drive the real ASGI application (router + consumer) in-process with Channels' HttpCommunicator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from channels.testing import HttpCommunicator

from mcp_host.asgi import application


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")

    def sse_messages(self) -> list[Any]:
        """The JSON-RPC messages of an SSE body (priming events, which carry empty data, are skipped)."""
        return sse_messages(self.body)


def sse_messages(body: bytes) -> list[Any]:
    return [
        orjson.loads(line[len("data: ") :])
        for line in body.decode().splitlines()
        if line.startswith("data: ") and line[len("data: ") :].strip()
    ]


def header_list(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(key.lower().encode(), value.encode()) for key, value in headers.items()]


def default_headers(access: Any) -> dict[str, str]:
    return {
        "authorization": f"Bearer {access.raw_token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }


def communicator(
    access: Any,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    query: str | None = None,
    path: str | None = None,
    raw: bytes | None = None,
) -> HttpCommunicator:
    merged = {**default_headers(access), **(headers or {})}
    for name in drop:
        merged.pop(name, None)
    payload = raw if raw is not None else (orjson.dumps(body) if body is not None else b"")
    target = f"{path or access.path}?{access.query if query is None else query}"
    return HttpCommunicator(application, method, target, body=payload, headers=header_list(merged))


async def call(access: Any, body: Any = None, *, timeout: float = 5, **kwargs: Any) -> Reply:
    comm = communicator(access, body, **kwargs)
    try:
        response = await comm.get_response(timeout=timeout)
    finally:
        await comm.wait(timeout=timeout)
    headers = {key.decode().lower(): value.decode() for key, value in response["headers"]}
    return Reply(status=response["status"], headers=headers, body=response["body"])


def rpc(method: str, params: Any = None, id: int | str | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id is not None:
        message["id"] = id
    return message
