"""Running ``http`` tools: send the call to the tenant's webhook, turn the reply into a ``CallToolResult``.

``call_webhook`` is the one implementation of docs/http-tools.md (the request, ``map_reply`` for a 2xx reply, the
``WEBHOOK_*`` codes, the SSRF rules through ``outbound.webhook_transport()``). Every failure is an ``isError``
result whose message never holds header values, bodies or tracebacks; cancelling the call closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
import orjson

from .. import __version__
from ..conf import mcp_settings
from ..definitions.context import CONTENT_BLOCK_FIELDS, CodedFailure, error_result
from ..definitions.http_tools import SecretHeadersUnavailable, effective_timeout, open_secret_headers
from ..definitions.targets import HttpTarget
from ..netguard import ForbiddenAddress
from ..observability import tracing
from ..outbound import webhook_transport
from ..protocol.context import CallContext

logger = logging.getLogger("mcp_app.runtime.webhooks")


def webhook_error(code: str, message: str) -> dict[str, Any]:
    return error_result(message, code, "webhook_error")


async def call_webhook(
    target: HttpTarget, tool_name: str, arguments: dict[str, Any], call: CallContext
) -> dict[str, Any]:
    """Send one call to ``target`` and return the ``CallToolResult`` (``isError`` for every failure)."""
    started = time.monotonic()
    call_id = uuid.uuid4().hex
    try:
        secret_headers = open_secret_headers(target.secret_headers)
    except SecretHeadersUnavailable:
        logger.error("http tool %s: its secret headers cannot be decrypted with the configured keys", tool_name)
        return webhook_error(
            "WEBHOOK_UNAVAILABLE", f"Tool {tool_name} is misconfigured: its secret headers cannot be read"
        )
    principal = call.request.principal
    body = orjson.dumps(
        {
            "arguments": arguments,
            "agent": principal.agent_id if principal else None,
            "call_id": call_id,
            "tool": tool_name,
            "server": call.request.server.server_id,
        }
    )
    headers = {
        **dict(target.headers),
        **secret_headers,
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Accept-Encoding": "identity",
        "User-Agent": f"mcp-host/{__version__}",
    }
    tracer = tracing.active()
    try:
        # With tracing on: a span, and its traceparent header.
        with tracer.webhook(target.method, target.url, headers) if tracer is not None else contextlib.nullcontext():
            reply = await _exchange(target, headers, body)
        result = map_reply(reply)
    except CodedFailure as failure:
        logger.info(
            "http tool %s call %s failed after %.0f ms: %s",
            tool_name,
            call_id,
            (time.monotonic() - started) * 1000,
            failure.code,
        )
        return webhook_error(failure.code, f"Tool {tool_name}: {failure.message}")
    except Exception as exc:
        # Only the type: an unexpected library error could quote a header value in its message.
        logger.error("http tool %s call %s failed unexpectedly (%s)", tool_name, call_id, type(exc).__name__)
        return webhook_error("WEBHOOK_FAILED", f"Tool {tool_name}: the call failed with an internal error")
    return result


async def _exchange(target: HttpTarget, headers: dict[str, str], body: bytes) -> bytes:
    limit = mcp_settings.HTTP_TOOL_MAX_RESPONSE_BYTES
    timeout = effective_timeout(target.timeout_seconds)
    where = urlsplit(target.url).netloc or target.url
    transport = webhook_transport()
    # The transport directly, not an httpx client: no redirect, cookie or auth handling to switch off, and no
    # "HTTP Request: <url>" log line (a webhook URL may carry a key in its path or query).
    try:
        request = httpx.Request(
            target.method,
            target.url,
            content=body,
            headers=headers,
            extensions={"timeout": httpx.Timeout(timeout).as_dict()},
        )
        async with asyncio.timeout(timeout), transport:
            response = await transport.handle_async_request(request)
            try:
                return await _read(response, limit)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        raise CodedFailure("WEBHOOK_TIMEOUT", f"the webhook did not answer within {timeout:g} s") from None
    except httpx.InvalidURL:
        raise CodedFailure("WEBHOOK_UNREACHABLE", "the webhook's URL is not valid") from None
    except ForbiddenAddress as exc:
        raise CodedFailure("WEBHOOK_FORBIDDEN_ADDRESS", f"refused to connect: {exc}") from None
    except httpx.ConnectError as exc:
        raise CodedFailure("WEBHOOK_UNREACHABLE", _connect_failure(exc, where)) from None
    except (httpx.HTTPError, httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
        raise CodedFailure("WEBHOOK_UNREACHABLE", f"the exchange with {where} failed ({type(exc).__name__})") from None


async def _read(response: httpx.Response, limit: int) -> bytes:
    status = response.status_code
    if 300 <= status < 400:
        raise CodedFailure("WEBHOOK_REDIRECT", f"the webhook redirected (HTTP {status}); redirects are not followed")
    if not 200 <= status < 300:
        reason = f" {response.reason_phrase}" if response.reason_phrase else ""
        raise CodedFailure("WEBHOOK_HTTP_STATUS", f"the webhook answered HTTP {status}{reason}")
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise CodedFailure("WEBHOOK_INVALID_JSON", f"the webhook replied with {encoding}-encoded content")
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise CodedFailure("WEBHOOK_TOO_LARGE", f"the reply is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            raise CodedFailure("WEBHOOK_TOO_LARGE", f"the reply is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _connect_failure(exc: BaseException, where: str) -> str:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"the TLS certificate of {where} could not be verified"
        if isinstance(seen, ssl.SSLError):
            return f"the TLS handshake with {where} failed"
        seen = seen.__cause__ or seen.__context__
    return f"could not connect to {where}"


def _check_content(content: Any) -> str | None:
    if not isinstance(content, list):
        return "content must be a list of content blocks"
    for index, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") not in CONTENT_BLOCK_FIELDS:
            return f"content block {index} has no known type"
        for key in CONTENT_BLOCK_FIELDS[block["type"]]:
            if not isinstance(block.get(key), str):
                return f"content block {index} ({block['type']}) needs a string {key!r}"
        if block["type"] == "resource" and not (
            isinstance(block.get("resource"), dict) and isinstance(block["resource"].get("uri"), str)
        ):
            return f"content block {index} (resource) needs a resource with a uri"
    return None


def map_reply(body: bytes) -> dict[str, Any]:
    """The ``CallToolResult`` for a 2xx reply body; raises ``CodedFailure`` for invalid JSON or results."""
    if not body.strip():
        return {"content": []}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise CodedFailure("WEBHOOK_INVALID_JSON", "the webhook's reply is not valid JSON") from None
    if isinstance(value, dict) and ("content" in value or "structuredContent" in value):
        content = value.get("content", [])
        problem = _check_content(content)
        if problem is None and "structuredContent" in value and not isinstance(value["structuredContent"], dict):
            problem = "structuredContent must be an object"
        if problem is None and "isError" in value and not isinstance(value["isError"], bool):
            problem = "isError must be true or false"
        if problem is not None:
            raise CodedFailure("WEBHOOK_INVALID_RESULT", f"the webhook's result is invalid: {problem}")
        result: dict[str, Any] = {"content": content}
        if "structuredContent" in value:
            result["structuredContent"] = value["structuredContent"]
        if value.get("isError"):
            result["isError"] = True
        return result
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return {"content": [{"type": "text", "text": text}]}
