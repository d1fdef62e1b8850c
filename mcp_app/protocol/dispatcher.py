"""Routing of decoded JSON-RPC payloads to method handlers, and the exception-to-wire boundary.

``Dispatcher.dispatch`` answers one decoded body (an object or a batch) with a response, a list of them, or
``None`` when nothing is owed. Every exception a handler raises becomes a JSON-RPC error here and nowhere else;
one that is not a ``ProtocolError`` is logged with its traceback and reaches the client as ``Internal error``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .. import PRODUCT_NAME, __version__
from . import modern, versions
from .context import CallContext, OpenStream, RequestContext
from .errors import (
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ProtocolError,
    ServiceUnavailable,
    error_response,
)
from .jsonrpc import ClientResponse, Notification, Request, classify, recover_id, valid_id
from .reporters import LogReporter, ProgressReporter

logger = logging.getLogger("mcp_app.protocol")


@dataclass(slots=True)
class MessageContext:
    """One request inside an HTTP request: its id, and its progress and log channels."""

    request: RequestContext
    request_id: str | int
    progress: ProgressReporter
    log: LogReporter

    def call(self, params: dict[str, Any]) -> CallContext:
        """What a runner gets for this request, with the answers of a multi-round trip (``inputResponses``,
        ``requestState``) checked for shape."""
        input_responses = params.get("inputResponses")
        if input_responses is not None and not isinstance(input_responses, dict):
            raise InvalidParams('Invalid params: "inputResponses" must be an object')
        request_state = params.get("requestState")
        if request_state is not None and not isinstance(request_state, str):
            raise InvalidParams('Invalid params: "requestState" must be a string')
        return CallContext(
            request=self.request,
            progress=self.progress,
            log=self.log,
            input_responses=input_responses,
            request_state=request_state,
            request_id=self.request_id,
            meta=params.get("_meta") if isinstance(params.get("_meta"), dict) else None,
        )


RequestHandler = Callable[[dict[str, Any], MessageContext], Awaitable[dict[str, Any] | OpenStream]]
BOTH_ERAS = (versions.LEGACY, versions.MODERN)
NotificationHandler = Callable[[dict[str, Any], RequestContext], Awaitable[None]]


def server_info() -> dict[str, Any]:
    """The implementation this server reports (``serverInfo``): the product, not the hosted server."""
    return {"name": PRODUCT_NAME, "version": __version__}


def _log_threshold(ctx: RequestContext) -> str | None:
    """2026-07-28: the request's own ``logLevel``; handshake era: the level the session set, if any."""
    if ctx.era == versions.MODERN:
        return ctx.log_level
    return ctx.session.log_level if ctx.session is not None else None


def _progress_token(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if valid_id(token) else None


def _check_echoed(name: str, value: str | int | None, max_bytes: int) -> None:
    """Refuse (-32602) a client value the server repeats in what it sends (every progress notification, the
    event store): its size must not multiply the memory one request can take."""
    if isinstance(value, str) and len(value.encode()) > max_bytes:
        raise InvalidParams(
            f"Invalid params: {name} takes {len(value.encode())} bytes; at most {max_bytes} are accepted",
            {"maxBytes": max_bytes},
        )


class Dispatcher:
    """A method table plus the JSON-RPC rules for single messages and batches."""

    def __init__(self) -> None:
        # method -> era -> handler: a method may exist in both eras with different wire rules (``tasks/get``).
        self._requests: dict[str, dict[str, RequestHandler]] = {}
        self._notifications: dict[str, NotificationHandler] = {}
        # Exceptions that mean a backing service is unavailable (the app registers the database's): they leave the
        # dispatcher as ServiceUnavailable does, so the edge answers 503, not an internal error with a traceback.
        self.unavailable: tuple[type[BaseException], ...] = ()

    def treat_as_unavailable(self, *errors: type[BaseException]) -> None:
        self.unavailable = tuple(dict.fromkeys((*self.unavailable, *errors)))

    def request(self, method: str, *, eras: tuple[str, ...] = BOTH_ERAS) -> Callable[[RequestHandler], RequestHandler]:
        """Register a request handler for the protocol eras in which ``method`` exists (another handler may serve
        the same method in the other era)."""

        def register(handler: RequestHandler) -> RequestHandler:
            table = self._requests.setdefault(method, {})
            for era in eras:
                table[era] = handler
            return handler

        return register

    def notification(self, method: str) -> Callable[[NotificationHandler], NotificationHandler]:
        def register(handler: NotificationHandler) -> NotificationHandler:
            self._notifications[method] = handler
            return handler

        return register

    def methods(self, era: str) -> frozenset[str]:
        return frozenset(method for method, table in self._requests.items() if era in table)

    async def dispatch(self, payload: Any, ctx: RequestContext, *, max_batch_size: int) -> Any:
        """Answer a decoded body: a response dict, a list of responses, or ``None`` when nothing is owed."""
        if not isinstance(payload, list):
            return await self._dispatch_one(payload, ctx)
        if not payload:
            return error_response(None, InvalidRequest("Invalid Request: empty batch"))
        if not versions.allows_batches(ctx.protocol_version):
            return error_response(
                None, InvalidRequest(f"Invalid Request: batches are not allowed in {ctx.protocol_version}")
            )
        if len(payload) > max_batch_size:
            return error_response(None, InvalidRequest(f"Invalid Request: batch exceeds {max_batch_size} messages"))
        results = await asyncio.gather(*(self._dispatch_one(item, ctx) for item in payload))
        answered = [result for result in results if result is not None]
        return answered or None

    async def _dispatch_one(self, obj: Any, ctx: RequestContext) -> dict[str, Any] | None:
        try:
            message = classify(obj)
        except ProtocolError as exc:
            return error_response(recover_id(obj), exc)
        if isinstance(message, Request):
            return await self._answer(message, ctx)
        if isinstance(message, Notification):
            await self._notify(message, ctx)
            return None
        assert isinstance(message, ClientResponse)
        # A response to a server-to-client request: hand it to the call waiting for it, in whichever process.
        answer = {"error": message.error} if message.error is not None else {"result": message.result}
        await ctx.outbound.deliver(message.id, answer)
        return None

    async def _answer(self, request: Request, ctx: RequestContext) -> dict[str, Any]:
        if isinstance(request.id, str) and len(request.id.encode()) > ctx.max_echoed_bytes:
            # Every answer and event repeats the id: one too long to echo is refused without it.
            return error_response(
                None, InvalidRequest(f"Invalid Request: the id takes more than {ctx.max_echoed_bytes} bytes")
            )
        if ctx.tracer is not None:
            return await ctx.tracer.trace(
                request.method, request.id, request.params, ctx, lambda: self._respond(request, ctx)
            )
        return await self._respond(request, ctx)

    async def _respond(self, request: Request, ctx: RequestContext) -> dict[str, Any]:
        try:
            handler = self._requests.get(request.method, {}).get(ctx.era)
            if handler is None:
                raise MethodNotFound(f"Method not found: {request.method}")
            params = request.params
            if params is None:
                params = {}
            elif not isinstance(params, dict):
                raise InvalidParams("Invalid params: params must be an object")
            token = _progress_token(params)
            _check_echoed("_meta.progressToken", token, ctx.max_echoed_bytes)
            message_ctx = MessageContext(
                request=ctx,
                request_id=request.id,
                progress=ProgressReporter(token, ctx.emit),
                log=LogReporter(_log_threshold(ctx), ctx.emit),
            )
            result = await handler(params, message_ctx)
            if isinstance(result, OpenStream):
                return result  # type: ignore[return-value]
            if ctx.era == versions.MODERN:
                result = modern.decorate(request.method, result, server_info(), ctx.cache_ttl_ms)
        except ServiceUnavailable:
            raise  # about the transport, not this method: the edge answers 503 or ends the stream
        except ProtocolError as exc:
            return error_response(request.id, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, self.unavailable):
                raise
            logger.exception("unhandled error in %s", request.method)
            return error_response(request.id, InternalError())
        return {"jsonrpc": "2.0", "id": request.id, "result": result}

    async def _notify(self, notification: Notification, ctx: RequestContext) -> None:
        handler = self._notifications.get(notification.method)
        if handler is None:
            return  # Unknown notifications are ignored, as JSON-RPC requires.
        params = notification.params if isinstance(notification.params, dict) else {}
        try:
            await handler(params, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("unhandled error in notification %s", notification.method)
