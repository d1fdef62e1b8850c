"""What one audit record is, before the flusher stores it: the caller (``Caller``), the pending call
(``PendingCall``), its outcome label (``outcome_status``), the keyed digest of its arguments
(``arguments_digest``) and their redacted, size-bounded copy (``redact``). Pure functions and value objects:
the buffer and the flusher are ``runtime.audit``'s.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from django.conf import settings
from django.utils.crypto import salted_hmac

from ..models.audit import ToolCall as ToolCallRecord

REDACTED = "[redacted]"
DIGEST_SALT = "mcp_app.audit.arguments"


# ``salted_hmac``'s keyed HMAC for the current ``SECRET_KEY``, made once: each digest copies it (Django's function
# derives the key and builds the HMAC again for every call). Replaced whole when the key changes.
_keyed: tuple[str, hmac.HMAC] | None = None


def arguments_digest(arguments: Any) -> str:
    """HMAC-SHA256 (``salted_hmac`` with ``DIGEST_SALT`` and ``SECRET_KEY``) of the canonical JSON of ``arguments``:
    equal arguments give equal digests, and a guessable secret among them cannot be confirmed offline."""
    global _keyed
    canonical = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    secret, keyed = settings.SECRET_KEY, _keyed
    if keyed is None or keyed[0] != secret:
        keyed = _keyed = (secret, salted_hmac(DIGEST_SALT, b"", secret, algorithm="sha256"))
    digest = keyed[1].copy()
    digest.update(canonical)
    return digest.hexdigest()


def redact(value: Any, pattern: re.Pattern[str], max_chars: int, max_items: int, depth: int = 0) -> Any:
    """A copy of ``value`` safe to store: values under secret-looking keys replaced, strings cut to
    ``max_chars``, lists and objects cut to ``max_items`` entries, nesting cut below 8 levels."""
    if depth >= 8:
        return "[…]"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for index, (key, item) in enumerate(value.items()):
            if index >= max_items:
                out["…"] = f"{len(value) - max_items} more"
                break
            name = str(key)[:max_chars]
            out[name] = REDACTED if pattern.search(name) else redact(item, pattern, max_chars, max_items, depth + 1)
        return out
    if isinstance(value, list | tuple):
        items = [redact(item, pattern, max_chars, max_items, depth + 1) for item in value[:max_items]]
        if len(value) > max_items:
            items.append(f"… {len(value) - max_items} more")
        return items
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + f"… ({len(value)} chars)"
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value), pattern, max_chars, max_items, depth)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request's calls are recorded under (copied once per request from the authorization)."""

    tenant_id: int
    server_pk: int
    server_key: str
    agent_pk: int
    agent_key: str
    token_prefix: str
    era: str
    protocol_version: str


class PendingCall(NamedTuple):
    """One call as the request path buffers it (immutable; a ``NamedTuple``, cheaper to make per call than a frozen
    dataclass)."""

    caller: Caller
    tool_name: str
    arguments: Any
    request_id: str
    status: str
    error_code: int | None
    error_message: str
    started: float
    finished: float
    task_id: str
    appended: float  # time.monotonic() when it entered the buffer: the flusher reports how long rows waited
    upstream: str = ""  # the upstream MCP server that answered, and how long it took (``federation.calls``)
    upstream_ms: float | None = None


UPSTREAM_META = "dev.mcp-host/upstream"


def upstream_of(result: Mapping[str, Any] | None) -> tuple[str, float | None]:
    """Which upstream answered a proxied call, and in how many milliseconds (``("", None)``: not proxied)."""
    meta = result.get("_meta") if isinstance(result, Mapping) else None
    if meta is None:  # most results (and no ABC check for it)
        return "", None
    stamp = meta.get(UPSTREAM_META) if isinstance(meta, Mapping) else None
    if not isinstance(stamp, Mapping) or not isinstance(stamp.get("upstream"), str):
        return "", None
    duration = stamp.get("durationMs")
    return stamp["upstream"], float(duration) if isinstance(duration, int | float) else None


def outcome_status(result: Mapping[str, Any] | None, error_code: int | None, cancelled: bool) -> tuple[str, str]:
    """The audit status of a ``tools/call`` outcome, and the task id it created, if any."""
    if cancelled:
        return ToolCallRecord.Status.CANCELLED, ""
    if error_code is not None or result is None:
        return ToolCallRecord.Status.ERROR, ""
    kind = result.get("resultType")
    if kind == "task":
        task_id = result.get("taskId")
        return ToolCallRecord.Status.TASK, task_id if isinstance(task_id, str) else ""
    if kind == "input_required":
        return ToolCallRecord.Status.INPUT_REQUIRED, ""
    if result.get("isError") is True:
        return ToolCallRecord.Status.TOOL_ERROR, ""
    return ToolCallRecord.Status.OK, ""
