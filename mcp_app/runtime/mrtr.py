"""Multi-round-trip requests (2026-07-28): signing the state a tool hands out and checking the client's retry.

``requestState`` travels through the client, which may alter it: it is signed (``django.core.signing``, keyed by
``SECRET_KEY``) for one server, agent and tool, and expires after ``STATE_MAX_AGE_SECONDS``.
"""

from __future__ import annotations

from typing import Any

from django.core import signing

from ..definitions.context import REQUIRED_CAPABILITY, InputRequired
from ..protocol.context import CallContext
from ..protocol.errors import InvalidParams, MissingRequiredClientCapability
from ..protocol.messages import failed_call
from ..protocol.versions import MODERN

STATE_MAX_AGE_SECONDS = 15 * 60
PARK = "__mcp_park__"


def _salt(call: CallContext, tool_name: str) -> str:
    principal = call.request.principal
    agent = f"{principal.tenant}/{principal.agent_id}" if principal else "-"
    return f"mcp_app.mrtr:{call.request.server.server_id}:{agent}:{tool_name}"


def sign_state(call: CallContext, tool_name: str, state: Any) -> str:
    return signing.dumps({"s": state}, salt=_salt(call, tool_name), compress=True)


def verify_state(call: CallContext, tool_name: str) -> Any:
    """The tool's state from a retry, or ``None`` on a first call; forged or expired state is -32602."""
    if call.request_state is None:
        return None
    try:
        payload = signing.loads(call.request_state, salt=_salt(call, tool_name), max_age=STATE_MAX_AGE_SECONDS)
    except signing.SignatureExpired as exc:
        raise InvalidParams("Invalid params: requestState has expired; call the tool again") from exc
    except signing.BadSignature as exc:
        raise InvalidParams("Invalid params: requestState was not issued by this server for this call") from exc
    return payload.get("s")


def input_required_result(call: CallContext, tool_name: str, needed: InputRequired) -> dict[str, Any]:
    """The wire ``InputRequiredResult``; refuses to ask for what the client cannot answer."""
    if call.request.era != MODERN:
        return failed_call(
            f"Tool {tool_name} needs input from the client, which protocol version "
            f"{call.request.protocol_version} cannot carry on this server."
        )
    for request in needed.requests.values():
        method = request.get("method")
        capability = REQUIRED_CAPABILITY.get(method) if isinstance(method, str) else None
        if capability is None:
            raise ValueError(f"tool {tool_name} asked for unsupported input method {method!r}")
        if not call.request.client_declares(capability):
            raise MissingRequiredClientCapability(
                {capability: {}}, f"Tool {tool_name} needs the client capability {capability!r}"
            )
    requests = dict(needed.requests)
    result: dict[str, Any] = {"resultType": "input_required"}
    if requests:
        result["inputRequests"] = requests
    if needed.state is not None or not requests:
        result["requestState"] = sign_state(call, tool_name, needed.state)
    if needed.park and call.in_task:
        result[PARK] = True  # read (and removed) by the task runner, never sent
    return result
