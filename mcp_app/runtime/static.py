"""Static tools: a canned ``CallToolResult`` or a canned JSON-RPC error, configured in the catalog.

This is the hosted-mock tool kind: QA teams describe what a tool answers and point the agent under test at it.
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import ProtocolError

_CONTENT_TYPES = {"text", "image", "audio", "resource", "resource_link"}


def validate_static_config(result: Any, error: Any) -> None:
    """Raise ``ValueError`` unless exactly one of ``result`` / ``error`` is a well-formed answer."""
    if (result is None) == (error is None):
        raise ValueError("A static tool needs exactly one of a static result or a static error.")
    if error is not None:
        if not isinstance(error, dict):
            raise ValueError("The static error must be an object {code, message, data?}.")
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            raise ValueError("The static error needs an integer code.")
        if not isinstance(error.get("message"), str):
            raise ValueError("The static error needs a message string.")
        return
    if not isinstance(result, dict):
        raise ValueError("The static result must be a CallToolResult object.")
    content = result.get("content", [])
    if not isinstance(content, list) or not all(
        isinstance(block, dict) and block.get("type") in _CONTENT_TYPES for block in content
    ):
        raise ValueError("The static result's content must be a list of content blocks with a known type.")
    if "isError" in result and not isinstance(result["isError"], bool):
        raise ValueError("isError must be true or false.")


def static_answer(result: Any, error: Any) -> dict[str, Any]:
    """The result to return, or raise the configured error as a ``ProtocolError``."""
    if error is not None:
        raise ProtocolError(error["message"], error.get("data"), code=error["code"])
    answer = dict(result)
    answer.setdefault("content", [])
    return answer
