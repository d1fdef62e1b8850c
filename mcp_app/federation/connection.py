"""One connection to an upstream MCP server: the official SDK's ``Client``, SSRF-guarded and bounded.

``open_client(endpoint)`` yields a connected ``mcp.Client`` (enter and leave it in one task: the SDK holds task
groups) in the SDK's ``auto`` era unless the endpoint pins one, through the outbound SSRF guard, with the
endpoint's headers or OAuth client credentials. Its callbacks route what the upstream asks to its call
(``relay.current``) and its ``list_changed`` to ``on_list_changed``. Design: docs/upstreams.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
from pydantic import BaseModel, ValidationError

from .. import __version__
from ..conf import mcp_settings
from ..crypto import decrypt
from ..definitions.http_tools import open_secret_headers
from ..definitions.upstreams import ERA_HANDSHAKE, ERA_MODERN, UpstreamEndpoint
from ..outbound import upstream_http_client
from ..protocol.errors import INTERNAL_ERROR
from .relay import current

logger = logging.getLogger("mcp_app.federation")

ListChanged = Callable[[int, str], None]
Answer = TypeVar("Answer", bound=BaseModel)
_LIST_CHANGED = {
    "notifications/tools/list_changed": "tools",
    "notifications/resources/list_changed": "resources",
    "notifications/prompts/list_changed": "prompts",
}

# What each endpoint revision negotiated: ("legacy", None) or (modern version, its DiscoverResult).
_negotiated: dict[tuple[int, str], tuple[str, types.DiscoverResult | None]] = {}


@dataclass
class Trouble:
    """What the HTTP layer saw go wrong with one call's exchange, which the SDK reports only by generic codes:
    a reply or event past ``UPSTREAM_MAX_RESPONSE_BYTES``, a redirect it did not follow, an answer to a POST that
    is no JSON-RPC at all. A call sets ``trouble`` to its own; the transport's hooks note it in the call's context."""

    too_large: bool = False
    redirected: bool = False
    broken: bool = False


trouble: contextvars.ContextVar[Trouble | None] = contextvars.ContextVar("mcp_app.federation.trouble", default=None)


def _note_too_large() -> None:
    noted = trouble.get()
    if noted is not None:
        noted.too_large = True


def answer_trouble(noted: Trouble, status: int, kind: str) -> None:
    """Note what the status and (lowercased) content type of the answer to a POST say went wrong, if anything."""
    failed = status >= 400 and status != 404 and not kind.startswith("application/json")
    odd = status < 300 and status != 202 and not kind.startswith(("application/json", "text/event-stream"))
    noted.redirected = noted.redirected or 300 <= status < 400
    noted.broken = noted.broken or failed or odd


async def _note_answer(response: Any) -> None:
    noted = trouble.get()
    if noted is not None and response.request.method == "POST":
        answer_trouble(noted, response.status_code, response.headers.get("content-type", "").lower())


class UpstreamUnavailable(Exception):
    """The upstream could not be reached or did not speak MCP (connect, handshake, credentials)."""


class UpstreamForbidden(UpstreamUnavailable):
    """The SSRF guard refused every address of the upstream's host (not allow-listed)."""


async def _relayed(
    method: str, params: Any, answers: tuple[type[Answer], ...], outside: Answer | types.ErrorData, what: str
) -> Answer | types.ErrorData:
    """The client's answer to the upstream's ``method`` request, as the first of ``answers`` it fits, or the
    client's error; ``outside`` when no call is waiting for it."""
    relay = current.get()
    if relay is None:
        return outside
    answer = await relay.ask(method, params.model_dump(by_alias=True, mode="json", exclude_none=True))
    if "error" in answer:
        return types.ErrorData(code=answer["error"]["code"], message=answer["error"]["message"])
    for model in answers:
        with contextlib.suppress(ValidationError):
            return model.model_validate(answer)
    return types.ErrorData(code=INTERNAL_ERROR, message=f"The client's answer to the {what} was malformed")


async def _elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
    outside = types.ElicitResult(action="decline")
    return await _relayed("elicitation/create", params, (types.ElicitResult,), outside, "elicitation")


async def _sample(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
    outside = types.ErrorData(code=-1, message="sampling/createMessage declined: no call is waiting for it")
    answers: tuple[type[types.CreateMessageResult | types.CreateMessageResultWithTools], ...]
    answers = (types.CreateMessageResult, types.CreateMessageResultWithTools)
    return await _relayed("sampling/createMessage", params, answers, outside, "sampling request")


async def _log(params: types.LoggingMessageNotificationParams) -> None:
    relay = current.get()
    if relay is not None:
        await relay.log(params.level, params.data, params.logger)


def _message_handler(endpoint: UpstreamEndpoint, on_list_changed: ListChanged | None) -> Any:
    async def handle(message: Any) -> None:
        if on_list_changed is None or isinstance(message, Exception):
            return
        method = getattr(message, "method", None)
        kind = _LIST_CHANGED.get(method) if isinstance(method, str) else None
        if kind is not None:
            on_list_changed(endpoint.pk, kind)

    return handle


class _MemoryTokens:
    """OAuth tokens of one connection (client credentials are cheap to exchange again)."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


def _auth(endpoint: UpstreamEndpoint) -> Any:
    if not endpoint.oauth_client_id:
        return None
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    return ClientCredentialsOAuthProvider(
        server_url=endpoint.url,
        storage=_MemoryTokens(),
        client_id=endpoint.oauth_client_id,
        client_secret=decrypt(endpoint.oauth_client_secret).decode() if endpoint.oauth_client_secret else "",
        scope=endpoint.oauth_scope or None,
        issuer=endpoint.oauth_issuer or None,
    )


@contextlib.asynccontextmanager
async def open_client(
    endpoint: UpstreamEndpoint, *, on_list_changed: ListChanged | None = None, log_everything: bool = False
) -> AsyncIterator[Any]:
    """A connected SDK client to ``endpoint`` (``UpstreamUnavailable`` past ``UPSTREAM_CONNECT_TIMEOUT_SECONDS``).
    ``log_everything``: ask a handshake-era upstream for every log level (the relay filters per client)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    connect_timeout = float(mcp_settings.UPSTREAM_CONNECT_TIMEOUT_SECONDS)
    headers = {
        **dict(endpoint.headers),
        **open_secret_headers(endpoint.secret_headers),
        "User-Agent": f"mcp-host/{__version__}",
    }
    http = upstream_http_client(
        headers=headers,
        timeout=float(mcp_settings.UPSTREAM_MAX_TIMEOUT_SECONDS),
        connect_timeout=connect_timeout,
        max_response_bytes=int(mcp_settings.UPSTREAM_MAX_RESPONSE_BYTES),
        auth=_auth(endpoint),
        max_calls=max(int(mcp_settings.UPSTREAM_MAX_CONCURRENT_CALLS), 1),
        on_too_large=_note_too_large,
    )
    refusals: list[int] = []  # HTTP statuses of refused requests: the SDK reports them without their status

    async def note_refusal(response: Any) -> None:
        if response.status_code in (401, 403, 404) or response.status_code >= 500:
            refusals.append(response.status_code)

    http.event_hooks["response"] += [note_refusal, _note_answer]
    async with http:
        mode, prior = _negotiated.get(endpoint.key, ("auto", None))
        if endpoint.era == ERA_HANDSHAKE:
            mode, prior = "legacy", None
        client = Client(
            streamable_http_client(
                endpoint.url, http_client=http, max_sse_event_size=int(mcp_settings.UPSTREAM_MAX_RESPONSE_BYTES)
            ),
            mode=mode,
            prior_discover=prior,
            read_timeout_seconds=None,
            elicitation_callback=_elicit,
            sampling_callback=_sample,
            logging_callback=_log,
            message_handler=_message_handler(endpoint, on_list_changed),
            client_info=types.Implementation(name="mcp-host", version=__version__),
            cache=None,
        )
        try:
            # asyncio's timeout, not anyio's: a cancel scope cannot enclose the task groups the SDK leaves open.
            async with asyncio.timeout(connect_timeout):
                await client.__aenter__()
        except Exception as exc:
            _negotiated.pop(endpoint.key, None)
            if root(exc).__class__.__name__ == "ForbiddenAddress":
                raise UpstreamForbidden(str(root(exc))) from exc
            raise UpstreamUnavailable(_refused(refusals) or _describe(exc)) from exc
        refusals.clear()  # a refused probe (server/discover on a handshake-era upstream) is not a failure
        try:
            session = client.session
            if endpoint.era == ERA_MODERN and session.discover_result is None:
                raise UpstreamUnavailable(f"the upstream does not speak {ERA_MODERN} (its era is pinned to it)")
            if session.discover_result is not None:
                _negotiated[endpoint.key] = (client.protocol_version, session.discover_result)
            else:
                _negotiated[endpoint.key] = ("legacy", None)
                if log_everything and client.server_capabilities.logging is not None:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # logging/setLevel is deprecated by 2026-07-28, not before
                        async with asyncio.timeout(connect_timeout):
                            await client.set_logging_level("debug")
            try:
                yield client
            except Exception as exc:
                if refusals and not isinstance(exc, UpstreamUnavailable):
                    raise UpstreamUnavailable(_refused(refusals)) from exc
                raise
        finally:
            await client.__aexit__(None, None, None)


def _refused(statuses: list[int]) -> str:
    """What the upstream's last refusal says, for a person (no body: it may echo what was sent)."""
    if not statuses:
        return ""
    status = statuses[-1]
    reason = {401: "check its credentials", 403: "check its credentials", 404: "check the URL's path"}.get(
        status, "the upstream failed"
    )
    return f"the upstream answered HTTP {status} ({reason})"


def root(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups (what anyio's task groups raise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the upstream could not be reached (connection refused or dropped, TLS, DNS), as
    opposed to an answer that was not MCP."""
    import anyio
    import httpx2

    cause = root(exc)
    return isinstance(
        cause, httpx2.TransportError | OSError | anyio.BrokenResourceError | anyio.ClosedResourceError
    ) or (isinstance(cause, UpstreamUnavailable) and not isinstance(cause, UpstreamForbidden))


def _describe(exc: BaseException) -> str:
    """A sentence about a connection failure, without URLs' secrets or tracebacks."""
    exc = root(exc)
    if isinstance(exc, TimeoutError):
        return "the upstream did not answer the handshake in time"
    name = type(exc).__name__
    message = str(exc).split("\n", 1)[0][:200]
    return f"{name}: {message}" if message else name
