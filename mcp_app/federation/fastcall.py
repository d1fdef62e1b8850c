"""A warm ``tools/call`` to a 2026-07-28 upstream, written and read here instead of by the SDK client.

Why a second path beside the official client, for this one method: the SDK's per-request machinery (its dispatcher,
memory streams and a task per POST) and the HTTP stack under it (httpx2, httpcore2, h11, anyio) cost daphne about
2.3 ms of CPU per proxied call, more than ten times the exchange itself on a socket, and they are the whole gap to
issue 27's floors (docs/performance.md, "Issue 27: the proxied call, by the profile").

``applies(connection)``: whether a call on this pooled connection may take the fast path (it speaks 2026-07-28, has
no OAuth client, the SDK's request stamp is there, its headers are writable as they are); else the caller uses the
SDK. ``call_tool(...)`` sends what the SDK would send for the call (the SDK session's own stamp: the ``_meta``
envelope, ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``; the endpoint's headers and secret
headers; a progress token; one write) on a kept-alive link of the connection's ``wire.Links``, and returns what the
SDK's ``session.call_tool(..., allow_input_required=True)`` returns: a ``CallToolResult`` (checked by the SDK
session's own result adapter and output-schema check) or an ``InputRequiredResult``. An ``application/json`` answer
is parsed with orjson; a ``text/event-stream`` one is read as SSE, its progress and log notifications relayed to
the call (``relay.CallRelay``) in order. Every failure is raised as the SDK raises it (``MCPError`` of the SDK's
codes with ``connection.Trouble`` noted, ``UpstreamForbidden``, ``UpstreamUnavailable``, a validation error), so
``calls._guarded`` maps it once for both paths. A redirect is handed back to the SDK (``Declined``: the upstream
did not run the call), which follows a same-origin one and refuses the others, as before; so is a call with a
header that cannot be written as it is.

A link is reused only after its reply was read whole; a cancelled call (the client's cancellation, the deadline)
aborts its link, which ends the upstream's request as the SDK's closed stream does. Not here: the breaker, turns,
deadline and the mapping of failures (``calls``), the HTTP framing and the SSRF rule (``wire``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from typing import Any

import mcp_types as types
import orjson
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

from .. import __version__
from ..conf import mcp_settings
from ..definitions.http_tools import open_secret_headers
from ..netguard import ForbiddenAddress
from ..outbound import UPSTREAM_KEEPALIVE_SECONDS, UPSTREAM_MAX_KEEPALIVE_CONNECTIONS
from ..protocol.versions import V2026_07_28
from . import wire
from .connection import UpstreamForbidden, UpstreamUnavailable, answer_trouble, trouble
from .relay import CallRelay

logger = logging.getLogger("mcp_app.federation")

JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"
# How long a link whose SSE answer is in may take to end that stream before it is dropped instead of kept.
DRAIN_SECONDS = 5.0

_ids = itertools.count(1)
_draining: set[asyncio.Task[None]] = set()


class Declined(Exception):
    """The SDK's path is to make this call: a header of it cannot be written as it is, or the upstream answered
    with a redirect (the call did not run there)."""


class Fast:
    """What a pooled connection keeps for the fast path: its links and its requests' fixed header lines."""

    def __init__(self, connection: Any) -> None:
        endpoint = connection.endpoint
        self.links = wire.Links(
            endpoint.url,
            max_idle=UPSTREAM_MAX_KEEPALIVE_CONNECTIONS,
            idle_seconds=UPSTREAM_KEEPALIVE_SECONDS,
            connect_timeout=float(mcp_settings.UPSTREAM_CONNECT_TIMEOUT_SECONDS),
        )
        # The SDK's HTTP client's headers (the endpoint's, its secret ones, our User-Agent), under the transport's.
        headers: dict[str, str] = {}
        for name, value in (*endpoint.headers, *open_secret_headers(endpoint.secret_headers).items()):
            headers[name.lower()] = value
        headers["user-agent"] = f"mcp-host/{__version__}"
        headers["accept"] = f"{JSON_TYPE}, {SSE_TYPE}"
        headers["content-type"] = JSON_TYPE
        for dropped in ("host", "content-length", "transfer-encoding", "connection", "accept-encoding"):
            headers.pop(dropped, None)
        self.fixed = f"POST {self.links.target} HTTP/1.1\r\nhost: {self.links.authority}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers.items()
        )
        self.writable = _writable(self.fixed)

    def close(self) -> None:
        self.links.close()


def _writable(text: str) -> bool:
    """Whether header text is what HTTP/1.1 may carry as written (no line breaks inside a value, latin-1)."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return "\n" not in text.replace("\r\n", "")


def applies(connection: Any) -> bool:
    """Whether a ``tools/call`` on ``connection`` may take the fast path (the module docstring)."""
    client = connection.client
    if client is None or connection.broken or not connection.modern or client.protocol_version != V2026_07_28:
        return False
    if connection.endpoint.oauth_client_id or not callable(getattr(client.session, "_stamp", None)):
        return False
    if connection.fast is None:
        connection.fast = Fast(connection)
    return bool(connection.fast.writable and not connection.fast.links.closed)


async def call_tool(
    connection: Any,
    name: str,
    arguments: dict[str, Any],
    relay: CallRelay,
    *,
    meta: dict[str, Any] | None,
    input_responses: dict[str, Any] | None,
    request_state: str | None,
) -> types.CallToolResult | types.InputRequiredResult:
    """The SDK's ``session.call_tool(name, arguments, progress_callback=relay.progress, meta=meta,
    input_responses=..., request_state=..., allow_input_required=True)``, on a kept-alive link."""
    fast: Fast = connection.fast
    session = connection.client.session
    request_id = next(_ids)
    if input_responses or request_state is not None:
        params = types.CallToolRequestParams(
            name=name, arguments=arguments, input_responses=input_responses, request_state=request_state
        ).model_dump(by_alias=True, mode="json", exclude_none=True)
    else:
        params = {"name": name, "arguments": arguments}
    params["_meta"] = dict(meta or {})
    data: dict[str, Any] = {"method": "tools/call", "params": params}
    options: dict[str, Any] = {}
    session._stamp(data, options)  # the SDK's own envelope and per-message headers, as it sends them
    params["_meta"]["progressToken"] = request_id  # the SDK's: the request id, when progress is asked for
    body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, **data})
    extra = "".join(f"{key.lower()}: {value}\r\n" for key, value in options.get("headers", {}).items())
    if not _writable(extra):
        raise Declined("a request header of this call cannot be written as it is")
    head = f"{fast.fixed}{extra}content-length: {len(body)}\r\n\r\n".encode("latin-1")

    try:
        link = await fast.links.acquire()
    except ForbiddenAddress as exc:
        raise UpstreamForbidden(str(exc)) from exc
    except TimeoutError as exc:
        raise UpstreamUnavailable("the upstream did not accept a connection in time") from exc
    kept: bool | None = False  # None: the SSE drain owns the link
    try:
        link.writer.write(head + body)
        status, headers = await wire.read_head(link.reader)
        kind = headers.get("content-type", "").lower()
        noted = trouble.get()
        if noted is not None:
            answer_trouble(noted, status, kind)
        if 300 <= status < 400 and "location" in headers:
            raise Declined(f"redirected to {headers['location']}")
        if kind.startswith(SSE_TYPE) and status < 300 and status != 202:
            outcome, kept = await _events(fast, link, headers, request_id, relay)
        else:
            payload = await _body(link, headers)
            kept = wire.keeps_alive(headers)
            outcome = _answer(status, kind, payload, request_id)
    except wire.TooLarge as exc:
        noted = trouble.get()
        if noted is not None:
            noted.too_large = True
        raise types_error(INTERNAL_ERROR, str(exc)) from exc
    except wire.WireError as exc:
        raise types_error(CONNECTION_CLOSED, f"Connection closed: {exc}") from exc
    finally:
        if kept:
            fast.links.release(link)
        elif kept is False:
            link.close()
    return await _result(session, name, outcome)


def types_error(code: int, message: str, data: Any = None) -> Exception:
    from mcp.shared.exceptions import MCPError

    return MCPError(code, message, data)


async def _body(link: wire.Link, headers: dict[str, str]) -> bytes:
    payload = await wire.read_body(link.reader, headers, int(mcp_settings.UPSTREAM_MAX_RESPONSE_BYTES))
    encoding = headers.get("content-encoding", "identity").lower()
    if encoding in ("gzip", "deflate"):
        try:
            payload = zlib.decompress(payload, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        except zlib.error as exc:
            raise wire.WireError("a body that does not decompress") from exc
    return payload


def _answer(status: int, kind: str, payload: bytes, request_id: int) -> dict[str, Any]:
    """The JSON-RPC result of a non-SSE answer, or the ``MCPError`` the SDK's transport makes of it."""
    if status == 202:
        raise types_error(INVALID_REQUEST, "server answered a request with 202 Accepted")
    if status >= 400:
        if kind.startswith(JSON_TYPE):
            message = _loads(payload)
            if isinstance(message, dict) and isinstance(message.get("error"), dict):
                return _outcome(message, request_id, check_id=False)
        if status == 404:
            raise types_error(METHOD_NOT_FOUND, "Not Found")
        raise types_error(INTERNAL_ERROR, "Server returned an error response")
    if not kind.startswith(JSON_TYPE):
        raise types_error(INVALID_REQUEST, f"Unexpected content type: {kind}")
    message = _loads(payload)
    if not isinstance(message, dict):
        raise types_error(PARSE_ERROR, "Failed to parse JSON response: not a JSON-RPC message")
    return _outcome(message, request_id)


def _loads(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


def _outcome(message: dict[str, Any], request_id: int, *, check_id: bool = True) -> dict[str, Any]:
    """The ``result`` of the JSON-RPC response ``message``; its error raised as ``MCPError``."""
    error = message.get("error")
    if isinstance(error, dict):
        code, text = error.get("code"), error.get("message")
        if isinstance(code, int) and not isinstance(code, bool) and isinstance(text, str):
            raise types_error(code, text, error.get("data"))
    result = message.get("result")
    if (
        message.get("jsonrpc") != "2.0"
        or not isinstance(result, dict)
        or (check_id and message.get("id") != request_id)
    ):
        raise types_error(PARSE_ERROR, "Failed to parse JSON response: not the JSON-RPC response to the call")
    return result


async def _events(
    fast: Fast, link: wire.Link, headers: dict[str, str], request_id: int, relay: CallRelay
) -> tuple[dict[str, Any], bool | None]:
    """Read an SSE answer up to the call's response, relaying progress and logs in order. Returns the result
    and ``None``: the rest of the stream is drained in the background and the link kept if it ends in time."""
    if headers.get("content-encoding", "identity").lower() != "identity":
        raise wire.WireError("a compressed event stream")
    limit = int(mcp_settings.UPSTREAM_MAX_RESPONSE_BYTES)
    chunks = wire.body_chunks(link.reader, headers)
    pending = b""
    async for chunk in chunks:
        pending = (pending + chunk).replace(b"\r\n", b"\n")  # joined first: a chunk may end between \r and \n
        *events, pending = pending.split(b"\n\n")
        if len(pending) > limit:
            raise wire.TooLarge(f"an event is larger than {limit} bytes")
        for event in events:
            message = _event_data(event, limit)
            if message is None:
                continue
            if "id" in message and ("result" in message or "error" in message):
                if message.get("id") != request_id:
                    continue
                outcome = _outcome(message, request_id)
                _drain(fast, link, chunks, wire.keeps_alive(headers))
                return outcome, None
            await _notified(message, request_id, relay)
    raise types_error(CONNECTION_CLOSED, "SSE stream ended without a response")


def _event_data(event: bytes, limit: int) -> dict[str, Any] | None:
    """The JSON message an SSE event carries (its ``data`` lines joined), or ``None`` (a comment, a keep-alive,
    an event of another type, or no JSON object)."""
    if len(event) > limit:
        raise wire.TooLarge(f"an event is larger than {limit} bytes")
    data: list[bytes] = []
    for line in event.split(b"\n"):
        field, _, value = line.partition(b":")
        if field == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
        elif field == b"event" and value.strip() not in (b"", b"message"):
            return None
    if not data:
        return None
    message = _loads(b"\n".join(data))
    return message if isinstance(message, dict) else None


async def _notified(message: dict[str, Any], request_id: int, relay: CallRelay) -> None:
    """Relay a notification of the call's stream as the SDK's callbacks do (a failing relay is logged)."""
    method, params = message.get("method"), message.get("params")
    if not isinstance(params, dict):
        return
    try:
        if method == "notifications/progress":
            token, progress = params.get("progressToken"), params.get("progress")
            if token != request_id or isinstance(token, bool) or isinstance(progress, bool):
                return
            if not isinstance(progress, int | float):
                return
            total, text = params.get("total"), params.get("message")
            await relay.progress(
                float(progress),
                float(total) if isinstance(total, int | float) else None,
                text if isinstance(text, str) else None,
            )
        elif method == "notifications/message":
            log = types.LoggingMessageNotificationParams.model_validate(params)
            await relay.log(log.level, log.data, log.logger)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("relaying an upstream's %s failed", method)


def _drain(fast: Fast, link: wire.Link, chunks: Any, keep: bool) -> None:
    """Read what follows the response on an SSE answer (usually only its end) without holding the call up, and
    keep the link if the stream ends within ``DRAIN_SECONDS``."""

    async def drain() -> None:
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                async for _ in chunks:
                    pass
        except (Exception, asyncio.CancelledError):
            link.close()
            return
        if keep:
            fast.links.release(link)
        else:
            link.close()

    task = asyncio.get_running_loop().create_task(drain())
    _draining.add(task)
    task.add_done_callback(_draining.discard)


async def _result(session: Any, name: str, raw: dict[str, Any]) -> types.CallToolResult | types.InputRequiredResult:
    """``raw`` as the SDK's ``send_request`` and ``call_tool`` take a ``tools/call`` result: the negotiated
    version's checks, its result adapter, the output-schema check of a successful result."""
    from mcp_types import methods

    ttl = raw.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        raw["ttlMs"] = 0
    methods.validate_server_result("tools/call", V2026_07_28, raw)
    result = session._call_tool_adapter.validate_python(raw, by_name=False)
    if isinstance(result, types.CallToolResult) and not result.is_error:
        await session.validate_tool_result(name, result)
    if not isinstance(result, types.CallToolResult | types.InputRequiredResult):
        from mcp.client.extension import UnexpectedClaimedResult

        raise UnexpectedClaimedResult(result)
    return result
