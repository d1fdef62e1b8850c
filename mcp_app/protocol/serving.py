"""One POST body in, one answer out: the protocol's entry for each era, pure of HTTP plumbing.

``serve_post(body, PostRequest, Exchange)`` decodes the body, picks its era and draws its ``Demand`` from the
edge's limits (``Exchange.admit``); ``serve_modern`` or ``serve_legacy`` applies that era's rules, asks the
``Exchange`` port for the ``RequestContext``, dispatches, and returns one ``Answer`` the edge writes without
looking inside. Nothing here imports Django or Channels; no status is decided outside this module and
``statuses``. The rules in order, and their answers: docs/architecture.md ("A POST, end to end").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from . import jsonrpc, limits, modern, statuses, versions
from .context import OpenStream, RequestContext
from .errors import InvalidParams, InvalidRequest, JsonRpcId, ProtocolError, error_response
from .handlers import dispatcher
from .ports import Session


@dataclass(frozen=True, slots=True)
class PostRequest:
    """What the protocol needs to know about one POST besides its body (the edge fills it from its caches)."""

    headers: Mapping[str, str]  # by lower-case name
    supported_versions: tuple[str, ...]  # every version the server speaks, both eras
    max_depth: int
    max_batch_size: int
    max_client_info_bytes: int
    sessions_required: bool = False
    session_named: bool = False  # Mcp-Session-Id was sent
    session: Session | None = None  # the live session it names (None: unknown, expired, or none named)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes once the rules are passed: its era, the version it is served under and, for a
    handshake-era request with an id, that id (its cancellation key)."""

    era: str
    protocol_version: str
    request_id: str | int | None = None


@dataclass(frozen=True, slots=True)
class NewSession:
    """A successful ``initialize``: the edge opens a session and names it in ``Mcp-Session-Id``."""

    protocol_version: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Answer:
    """What to write: ``status`` with ``payload`` (a JSON-RPC message or batch; ``None``: no body), or a
    long-lived ``stream`` to open, and the session to open first, if any."""

    status: int
    payload: Any = None
    stream: OpenStream | None = None
    new_session: NewSession | None = None
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (Retry-After of a 429)


@dataclass(frozen=True, slots=True)
class Demand:
    """What a decoded body asks of the edge before dispatch, read here once: its era, how many messages it holds
    (each draws from the rate limits), the names of the tools it calls, the id an answer the edge writes itself
    carries, and whether it holds a ``tools/call`` request (``calls``) whose client waits for progress
    (``progress``)."""

    era: str
    payload: Any  # the decoded body, for the request log's bounded method label
    messages: int
    tools: tuple[str, ...] = ()
    request_id: JsonRpcId = None
    calls: bool = False
    progress: bool = False


def read_demand(era: str, payload: Any) -> Demand:
    messages = payload if isinstance(payload, list) else [payload]
    tools: list[str] = []
    calls = progress = False
    for message in messages:
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            continue
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(params.get("name"), str):
            tools.append(params["name"])
        if "id" in message:
            meta = params.get("_meta")
            calls = True
            progress = progress or (isinstance(meta, dict) and meta.get("progressToken") is not None)
    return Demand(era, payload, max(1, len(messages)), tuple(tools), jsonrpc.recover_id(payload), calls, progress)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A limit's refusal (``mcp_app.limits.admit``): its error, the HTTP status and ``Retry-After`` in seconds."""

    error: ProtocolError
    status: int
    retry_after: int


class Exchange(Protocol):
    """What the edge lends the protocol for one POST."""

    async def admit(self, demand: Demand) -> Refusal | None:
        """Draw the decoded request from the edge's limits: ``None``, or the refusal to answer."""

    def context(self, route: Route, **fields: Any) -> RequestContext:
        """The request's context: ``fields`` (session, client metadata, log level) plus what the edge owns."""


def refusal(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    """A refusal of the whole request: an id-less JSON-RPC error body, as the spec allows for 4xx answers."""
    return Answer(status, error_response(None, InvalidRequest(message)), headers=headers)


def refused(by: Refusal, request_id: JsonRpcId = None) -> Answer:
    """A limit's refusal as an answer, with ``Retry-After``."""
    return Answer(by.status, error_response(request_id, by.error), headers=(("retry-after", str(by.retry_after)),))


async def serve_post(body: bytes, request: PostRequest, exchange: Exchange) -> Answer:
    """Decode ``body``, choose its era and serve it there."""
    try:
        payload = jsonrpc.decode(body, max_depth=request.max_depth)
    except jsonrpc.RefusedMessage as exc:
        return Answer(400, error_response(exc.request_id, exc))
    except ProtocolError as exc:
        return Answer(400, error_response(None, exc))
    is_modern = modern.is_modern(payload, request.headers.get(modern.HEADER_PROTOCOL_VERSION))
    demand = read_demand(versions.MODERN if is_modern else versions.LEGACY, payload)
    limited = await exchange.admit(demand)
    if limited is not None:
        return refused(limited, demand.request_id)
    if is_modern:
        return await serve_modern(payload, request, exchange)
    return await serve_legacy(payload, request, exchange)


async def serve_modern(payload: Any, request: PostRequest, exchange: Exchange) -> Answer:
    """A decoded 2026-07-28 body."""
    if isinstance(payload, dict) and "method" in payload and "id" not in payload:
        return Answer(202)  # no client notifications are defined on HTTP in this revision
    try:
        envelope = modern.admit(payload, request.headers, request.supported_versions)
        limits.check_client_metadata(envelope.client_info, envelope.client_capabilities, request.max_client_info_bytes)
    except ProtocolError as exc:
        return Answer(statuses.modern_refusal_status(exc.code), error_response(jsonrpc.recover_id(payload), exc))
    ctx = exchange.context(
        Route(versions.MODERN, envelope.protocol_version),
        client_info=envelope.client_info,
        client_capabilities=envelope.client_capabilities,
        log_level=envelope.log_level,
    )
    outcome = await dispatcher.dispatch(payload, ctx, max_batch_size=1)
    if isinstance(outcome, OpenStream):
        return Answer(200, stream=outcome)
    return Answer(statuses.modern_status(outcome), outcome)


async def serve_legacy(payload: Any, request: PostRequest, exchange: Exchange) -> Answer:
    """A decoded handshake-era body (2024-11-05 … 2025-11-25)."""
    supported = versions.handshake_versions(request.supported_versions)
    if not supported:
        return refuse_handshake_era(payload, request.supported_versions)
    params = payload.get("params") if isinstance(payload, dict) else None
    initialize = isinstance(payload, dict) and payload.get("method") == "initialize" and "id" in payload
    if initialize and isinstance(params, dict):
        try:
            limits.check_client_metadata(
                params.get("clientInfo"), params.get("capabilities"), request.max_client_info_bytes
            )
        except ProtocolError as exc:
            return Answer(200, error_response(payload["id"], exc))
    session: Session | None = None
    if not initialize:
        if request.session_named and request.session is None:
            return refusal(404, "Session not found: it expired or was terminated; initialize a new one.")
        session = request.session
        if session is None and request.sessions_required:
            return refusal(400, "Mcp-Session-Id is required: initialize a session first.")
    header = request.headers.get(modern.HEADER_PROTOCOL_VERSION)
    version = versions.legacy_request_version(
        header, session.protocol_version if session is not None else None, supported
    )
    if version is None:
        return refusal(400, f"Unsupported MCP-Protocol-Version {header!r}; supported: {', '.join(supported)}.")
    request_id = jsonrpc.recover_id(payload) if isinstance(payload, dict) and "method" in payload else None
    ctx = exchange.context(
        Route(versions.LEGACY, version, request_id),
        session=session,
        client_capabilities=session.client_capabilities if session is not None else {},
    )
    outcome = await dispatcher.dispatch(payload, ctx, max_batch_size=request.max_batch_size)
    new_session = None
    if initialize and isinstance(outcome, dict) and "result" in outcome:
        new_session = NewSession(outcome["result"]["protocolVersion"], params if isinstance(params, dict) else {})
    return Answer(statuses.legacy_status(outcome), outcome, new_session=new_session)


def refuse_handshake_era(payload: Any, supported_versions: tuple[str, ...]) -> Answer:
    """A modern-only server names what it speaks, without the stateless-only error codes (400)."""
    supported = versions.newest_first(supported_versions)
    request_id = jsonrpc.recover_id(payload)
    if isinstance(payload, dict) and payload.get("method") == "initialize":
        params = payload.get("params")
        requested = params.get("protocolVersion") if isinstance(params, dict) else None
        error: ProtocolError = InvalidParams(
            f"Unsupported protocol version: this server speaks only {', '.join(supported)}",
            {"supported": supported, "requested": requested},
        )
    else:
        error = InvalidRequest(
            f"This server speaks only {', '.join(supported)}: send the _meta envelope and routing headers",
            {"supported": supported},
        )
    return Answer(400, error_response(request_id, error))
