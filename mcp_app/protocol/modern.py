"""The 2026-07-28 request rules: era detection, the ``_meta`` envelope, routing headers, result decoration.

``is_modern`` tells a body's era. ``admit`` checks the envelope (-32602), the routing headers (-32020) and the
version (-32022), in that order, and raises the error of the first rule broken; ``check_param_headers`` checks
``Mcp-Param-*``; ``decorate`` adds what every modern result carries. The ladder in full: docs/architecture.md
("A POST, end to end").
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import versions
from .context import CallContext
from .descriptors import ToolDescriptor
from .errors import HeaderMismatch, InvalidParams, InvalidRequest, UnsupportedProtocolVersion
from .reporters import LOG_LEVELS

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def runs_as_task(tool: ToolDescriptor, call: CallContext) -> bool:
    """Whether a ``tools/call`` of ``tool`` follows the 2026 task rules (the runtime's ``call_maybe_as_task``):
    the tool may run as a task, the call is not one already, tasks are served here, and the client declared the
    tasks extension."""
    ctx = call.request
    return (
        tool.task_support != "forbidden"
        and not call.in_task
        and ctx.tasks.available
        and ctx.client_declares_extension(TASKS_EXTENSION)
    )


HEADER_PROTOCOL_VERSION = "mcp-protocol-version"
HEADER_METHOD = "mcp-method"
HEADER_NAME = "mcp-name"
HEADER_PARAM_PREFIX = "mcp-param-"

# Which body field each method's Mcp-Name header mirrors.
NAME_FIELDS: dict[str, str] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

CACHEABLE_METHODS = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)

_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="


@dataclass(frozen=True, slots=True)
class Envelope:
    """The request ``_meta`` envelope of the stateless era."""

    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None


def envelope_meta(payload: Any) -> Mapping[str, Any] | None:
    """The ``_meta`` of a single request body if it carries the envelope's version key, else ``None``."""
    if not isinstance(payload, dict):
        return None
    params = payload.get("params")
    if not isinstance(params, dict):
        return None
    meta = params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return meta
    return None


def is_modern(payload: Any, header_version: str | None) -> bool:
    """Which era serves this body: the envelope, or a stateless-era version header, make it modern."""
    if envelope_meta(payload) is not None:
        return True
    return header_version is not None and header_version >= versions.V2026_07_28


def read_envelope(payload: dict[str, Any]) -> Envelope:
    params = payload.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        raise InvalidParams("Invalid params: the request _meta envelope is missing")
    version = meta.get(META_PROTOCOL_VERSION)
    if not isinstance(version, str) or not version:
        raise InvalidParams(f"Invalid params: _meta[{META_PROTOCOL_VERSION!r}] is required")
    capabilities = meta.get(META_CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        raise InvalidParams(f"Invalid params: _meta[{META_CLIENT_CAPABILITIES!r}] is required (an object)")
    client_info = meta.get(META_CLIENT_INFO)
    if client_info is not None and not isinstance(client_info, dict):
        raise InvalidParams(f"Invalid params: _meta[{META_CLIENT_INFO!r}] must be an object")
    log_level = meta.get(META_LOG_LEVEL)
    if log_level is not None and log_level not in LOG_LEVELS:
        raise InvalidParams(f"Invalid params: _meta[{META_LOG_LEVEL!r}] must be one of {', '.join(LOG_LEVELS)}")
    return Envelope(version, capabilities, client_info, log_level)


def decode_header_value(value: str) -> str:
    """A routing header's value, with the ``=?base64?…?=`` form decoded; invalid values raise -32020."""
    if value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX):
        encoded = value[len(_SENTINEL_PREFIX) : -len(_SENTINEL_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise HeaderMismatch("Header mismatch: invalid base64 header value") from exc
    if not value.isascii() or any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise HeaderMismatch("Header mismatch: header values must be visible ASCII or use the base64 form")
    return value


def _require_header(headers: Mapping[str, str], name: str, expected: str) -> None:
    raw = headers.get(name)
    if raw is None:
        raise HeaderMismatch(f"Header mismatch: {name} is required")
    if decode_header_value(raw) != expected:
        raise HeaderMismatch(f"Header mismatch: {name} does not match the request body")


def check_headers(method: str, params: Mapping[str, Any], envelope: Envelope, headers: Mapping[str, str]) -> None:
    _require_header(headers, HEADER_PROTOCOL_VERSION, envelope.protocol_version)
    _require_header(headers, HEADER_METHOD, method)
    name_field = NAME_FIELDS.get(method)
    if name_field is None:
        return
    value = params.get(name_field)
    if isinstance(value, str):
        _require_header(headers, HEADER_NAME, value)
    elif headers.get(HEADER_NAME) is not None:
        raise HeaderMismatch(f"Header mismatch: {HEADER_NAME} given but params.{name_field} is missing")


def admit(payload: Any, headers: Mapping[str, str], supported: tuple[str, ...]) -> Envelope:
    """Check a modern request body against the envelope, header and version rules; return its envelope."""
    if not isinstance(payload, dict):
        raise InvalidRequest("Invalid Request: batches are not allowed in the stateless protocol")
    method = payload.get("method")
    if not isinstance(method, str):
        # A response or malformed body: the dispatcher answers it; there is nothing to route by.
        raise InvalidRequest("Invalid Request: a stateless request needs a method")
    envelope = read_envelope(payload)
    params = payload.get("params")
    check_headers(method, params if isinstance(params, dict) else {}, envelope, headers)
    if envelope.protocol_version not in versions.modern_versions(supported):
        raise UnsupportedProtocolVersion(envelope.protocol_version, versions.newest_first(supported))
    return envelope


def check_param_headers(schema: Mapping[str, Any], arguments: Mapping[str, Any], headers: Mapping[str, str]) -> None:
    """``x-mcp-header``: each annotated argument present in the body must be mirrored by ``Mcp-Param-<Name>``."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for argument, definition in properties.items():
        if not isinstance(definition, dict):
            continue
        header_name = definition.get("x-mcp-header")
        if not isinstance(header_name, str) or not header_name:
            continue
        header = f"{HEADER_PARAM_PREFIX}{header_name.lower()}"
        value = arguments.get(argument)
        raw = headers.get(header)
        if value is None:
            if raw is not None:
                raise HeaderMismatch(f"Header mismatch: {header} given but argument {argument!r} is absent")
            continue
        if raw is None:
            raise HeaderMismatch(f"Header mismatch: {header} is required for argument {argument!r}")
        if not _header_matches(decode_header_value(raw), value):
            raise HeaderMismatch(f"Header mismatch: {header} does not match argument {argument!r}")


def _header_matches(header: str, value: Any) -> bool:
    if isinstance(value, bool):
        return header == ("true" if value else "false")
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        try:
            return int(header.strip()) == int(value)
        except ValueError:
            return False
    return isinstance(value, str) and header == value


def decorate(method: str, result: dict[str, Any], server_info: Mapping[str, Any], ttl_ms: int) -> dict[str, Any]:
    """Add the fields every stateless-era result carries, without overriding what a handler set."""
    result.setdefault("resultType", "complete")
    meta = result.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta.setdefault(META_SERVER_INFO, dict(server_info))
    result["_meta"] = meta
    if method in CACHEABLE_METHODS and result["resultType"] == "complete":
        result.setdefault("ttlMs", ttl_ms)
        result.setdefault("cacheScope", "private")
    return result
