"""The JSON-RPC messages mcp-host builds itself (requests to clients, notifications, a failed tool call's result):
one definition of each. Errors are made in ``errors.py``. Pure Python, no Django.
"""

from __future__ import annotations

from typing import Any

from .jsonrpc import JSONRPC_VERSION

LIST_KINDS = ("tools", "prompts", "resources")


def request(request_id: str | int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, **notification(method, params)}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "method": method}
    if params is not None:
        message["params"] = params
    return message


def list_changed(kind: str) -> dict[str, Any]:
    """``notifications/<kind>/list_changed``; ``kind`` is ``tools``, ``prompts`` or ``resources``."""
    if kind not in LIST_KINDS:
        raise ValueError(f"no list_changed notification for {kind!r}")
    return notification(f"notifications/{kind}/list_changed")


def failed_call(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` that failed (``isError``) with one text block saying why."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def resource_updated(uri: str) -> dict[str, Any]:
    return notification("notifications/resources/updated", {"uri": uri})
