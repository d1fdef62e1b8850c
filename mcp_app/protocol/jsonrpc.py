"""JSON-RPC 2.0 framing: strict decoding, encoding, and ``classify`` of one message.

``decode`` uses orjson: invalid UTF-8, ``NaN``, trailing garbage and integers beyond 64 bits are parse errors.
``classify`` makes one decoded value a ``Request``, ``Notification`` or ``ClientResponse``, or raises
``InvalidRequest``. It knows nothing of MCP methods; that is the dispatcher's business.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from . import limits
from .errors import InvalidRequest, JsonRpcId, ParseError

JSONRPC_VERSION = "2.0"
# Nesting of arrays and objects accepted by ``decode`` unless the caller says otherwise (MAX_JSON_DEPTH).
DEFAULT_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Request:
    id: str | int
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class ClientResponse:
    """A response the client sends to a server-initiated request (sampling, elicitation, roots)."""

    id: str | int
    result: Any
    error: Any


Message = Request | Notification | ClientResponse


# orjson turns integers beyond 64 bits into rounded floats. Only a body holding a run of 19+ digits can
# contain one, so only such bodies pay for the exact (slower) check with the standard library.
_LONG_DIGITS = re.compile(rb"\d{19,}")
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def _exact_int(text: str) -> int:
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise ParseError("Parse error: integer out of 64-bit range")
    return value


class RefusedMessage(InvalidRequest):
    """A body that decoded but is refused whole (a NUL in a string); ``request_id`` is its id when readable, so
    the refusal answers the request it refuses."""

    def __init__(self, message: str, request_id: JsonRpcId) -> None:
        super().__init__(message)
        self.request_id = request_id


def decode(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The JSON value of ``body``. Too deep a nesting is refused before any decoder sees it (decoders recurse),
    and strings holding NUL are refused (no store accepts them); both as ``InvalidRequest``."""
    if limits.exceeds_depth(body, max_depth):
        raise InvalidRequest(f"Invalid Request: JSON nested deeper than {max_depth} levels")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ParseError("Parse error: body is not valid JSON") from exc
    if _LONG_DIGITS.search(body) is not None:
        json.loads(body, parse_int=_exact_int)
    if limits.may_hold_nul(body) and limits.find_nul(value):
        request_id = recover_id(value)
        if isinstance(request_id, str) and "\x00" in request_id:
            request_id = None
        raise RefusedMessage("Invalid Request: strings must not contain NUL (\\u0000)", request_id)
    return value


def encode(payload: Any) -> bytes:
    return orjson.dumps(payload)


def valid_id(value: Any) -> TypeGuard[str | int]:
    # MCP forbids null ids; booleans are ints to Python but not ids in JSON-RPC.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def recover_id(obj: Any) -> JsonRpcId:
    """The id to put on an error about ``obj``: its own if it is a valid id, else null."""
    if isinstance(obj, dict):
        candidate = obj.get("id")
        if valid_id(candidate):
            return candidate
    return None


def peek_id(body: bytes) -> JsonRpcId:
    """The id of a raw body, when it can be read (for an answer the protocol did not produce: a 503 or a 500);
    ``None`` for a batch, a notification or a body that is not JSON."""
    try:
        request_id = recover_id(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None
    return None if isinstance(request_id, str) and "\x00" in request_id else request_id


def classify(obj: Any) -> Message:
    if not isinstance(obj, dict):
        raise InvalidRequest("Invalid Request: a JSON-RPC message must be an object")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise InvalidRequest('Invalid Request: "jsonrpc" must be "2.0"')
    method = obj.get("method")
    if method is not None:
        if not isinstance(method, str) or not method:
            raise InvalidRequest('Invalid Request: "method" must be a non-empty string')
        params = obj.get("params")
        if "id" not in obj:
            return Notification(method=method, params=params)
        request_id = obj["id"]
        if not valid_id(request_id):
            raise InvalidRequest('Invalid Request: "id" must be a string or an integer')
        return Request(id=request_id, method=method, params=params)
    if ("result" in obj) != ("error" in obj) and valid_id(obj.get("id")):
        return ClientResponse(id=obj["id"], result=obj.get("result"), error=obj.get("error"))
    raise InvalidRequest("Invalid Request: neither a request, a notification nor a response")
