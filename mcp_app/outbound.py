"""Every outbound connection mcp-host makes for a tenant: one allow-list, one SSRF-guarded connector
(docs/http-tools.md, "SSRF rules" and "Allow-list").

- ``allowed_networks(kind)``: ``OUTBOUND_ALLOWED_NETWORKS`` plus the older setting of ``kind``: ``"http_tool"``
  (webhooks), ``"upstream"`` (upstream MCP servers), ``"cimd"`` (OAuth client ID metadata documents) or ``"budget_alert"``
  (budget alert webhooks).
- ``GuardedBackend`` and ``GuardedTransport``: an httpcore (or httpcore2) pool, and the httpx (or httpx2) transport
  over it, that connects only to the addresses ``netguard.resolve_checked`` accepted, never to the name again (TLS
  still verifies the URL's host); a refused host raises ``netguard.ForbiddenAddress`` before any socket opens.
- ``webhook_transport()`` and ``upstream_http_client(...)``: what a webhook call and an upstream's SDK client use.
- ``resolver`` and ``ssl_context()``: name resolution and certificate verification (tests replace them).

Not here: URL syntax rules (``definitions.http_tools.validate_url``), redirects of webhooks (refused by the
runtime), response size bounds (each caller's), pooling of upstream clients (``mcp_app.federation``).
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

import httpcore
import httpx

from .conf import mcp_settings
from .netguard import AllowEntry, ForbiddenAddress, Resolver, parse_allow_list, resolve_checked, system_resolver

if TYPE_CHECKING:
    import httpx2

OutboundKind = Literal["http_tool", "upstream", "cimd", "budget_alert"]
KINDS: tuple[OutboundKind, ...] = ("http_tool", "upstream", "cimd", "budget_alert")

# The own setting of each kind, honoured in addition to OUTBOUND_ALLOWED_NETWORKS.
_KIND_SETTINGS = {
    "http_tool": "HTTP_TOOL_ALLOWED_NETWORKS",
    "cimd": "OAUTH_CIMD_ALLOWED_NETWORKS",
    "budget_alert": "BUDGET_ALERT_ALLOWED_NETWORKS",
}

resolver: Resolver = system_resolver


def allowed_networks(kind: OutboundKind) -> tuple[AllowEntry, ...]:
    """The allow-list of ``kind``: ``OUTBOUND_ALLOWED_NETWORKS`` plus the kind's own older setting, if any."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of outbound connection {kind!r}")
    own = _KIND_SETTINGS.get(kind)
    return _parsed((*mcp_settings.OUTBOUND_ALLOWED_NETWORKS, *(getattr(mcp_settings, own) if own else ())))


@functools.lru_cache(maxsize=16)
def _parsed(entries: tuple[str, ...]) -> tuple[AllowEntry, ...]:
    return parse_allow_list(entries)


@functools.lru_cache(maxsize=1)
def ssl_context() -> ssl.SSLContext:
    """The TLS context of every outbound connection (the system's trust store, or ``SSL_CERT_FILE``)."""
    return httpx.create_ssl_context()


def _resolve(host: str, port: int) -> Any:
    return resolver(host, port)  # looked up at each connection, so a replaced resolver applies to made clients


class GuardedBackend:
    """The network backend of a ``core`` (httpcore or httpcore2) pool, against the allow-list ``allow`` (the
    module docstring): ``core.AsyncNetworkBackend``'s interface, not its class, so one class serves both cores."""

    def __init__(self, core: ModuleType, allow: Sequence[AllowEntry], resolve: Resolver | None = None) -> None:
        self._core = core
        self._allow = tuple(allow)
        self._resolve: Resolver = resolve or _resolve
        self._inner = core.AnyIOBackend()
        self._connect_errors: tuple[type[Exception], ...] = (core.ConnectError, core.ConnectTimeout)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's interface)
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        addresses = await resolve_checked(host, port, self._allow, self._resolve)
        failure: Exception | None = None
        for address in addresses:
            try:
                # The checked address itself, never the name again: nothing can re-resolve it differently.
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except self._connect_errors as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's interface)
        socket_options: Any = None,
    ) -> Any:
        raise ForbiddenAddress("outbound connections never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class ResponseTooLarge(Exception):
    """A reply went past the bound its transport was made with."""


class GuardedTransport:
    """The transport of a ``client`` (httpx or httpx2) over a ``core`` pool of ``GuardedBackend`` connections:
    ``client.AsyncBaseTransport``'s interface, not its class, so one class serves both. By default one connection,
    no keep-alive (one webhook call, one client metadata document). Replies stop at ``max_response_bytes``
    (``ResponseTooLarge``; ``on_too_large`` is called first, in the request's context); in an event stream the
    bound is per event and only noted (``on_too_large``): the client's own bound on events ends the stream."""

    def __init__(
        self,
        allow: Sequence[AllowEntry],
        *,
        client: ModuleType = httpx,
        core: ModuleType = httpcore,
        resolve: Resolver | None = None,
        max_connections: int = 1,
        max_keepalive_connections: int = 0,
        keepalive_expiry: float | None = None,
        max_response_bytes: int | None = None,
        on_too_large: Callable[[], None] | None = None,
    ) -> None:
        self._client, self._core = client, core
        # The core's errors raised again as the client's of the same name, as the client's own transport does.
        self._errors: dict[type[Exception], type[Exception]] = {
            error: getattr(client, name)
            for name, error in vars(core).items()
            if isinstance(error, type) and issubclass(error, Exception) and hasattr(client, name)
        }
        self._limit, self._on_too_large = max_response_bytes, on_too_large
        self.pool = core.AsyncConnectionPool(
            ssl_context=ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=GuardedBackend(core, allow, resolve),
        )

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[None]:
        try:
            yield
        except tuple(self._errors) as exc:
            kind = next(self._errors[base] for base in type(exc).__mro__ if base in self._errors)
            raise kind(str(exc)) from exc

    async def handle_async_request(self, request: Any) -> Any:
        url = request.url
        target = self._core.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path)
        sent = self._core.Request(
            method=request.method,
            url=target,
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with self._mapped():
            answer = await self.pool.handle_async_request(sent)
        events = any(
            name.lower() == b"content-type" and value.lower().startswith(b"text/event-stream")
            for name, value in answer.headers
        )
        body = _body_class(self._client)(self, answer.stream, events)
        return self._client.Response(
            status_code=answer.status, headers=answer.headers, stream=body, extensions=answer.extensions
        )

    async def aclose(self) -> None:
        await self.pool.aclose()

    async def __aenter__(self) -> GuardedTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@functools.cache
def _body_class(client: ModuleType) -> type:
    """The reply body of a ``GuardedTransport`` for ``client`` (a ``client.AsyncByteStream``)."""

    class Body(client.AsyncByteStream):  # type: ignore[name-defined]
        def __init__(self, transport: GuardedTransport, stream: Any, events: bool) -> None:
            self._transport, self._stream, self._events = transport, stream, events

        async def __aiter__(self) -> AsyncIterator[bytes]:
            limit, seen = self._transport._limit, 0
            with self._transport._mapped():
                async for chunk in self._stream:
                    if self._events:  # the largest event of the chunk, the one under way counted from its start
                        events = chunk.replace(b"\r", b"").split(b"\n\n")
                        largest = max([seen + len(events[0]), *map(len, events[1:])])
                        seen = seen + len(events[0]) if len(events) == 1 else len(events[-1])
                    else:
                        seen += len(chunk)
                        largest = seen
                    if limit is not None and largest > limit:
                        if self._transport._on_too_large is not None:
                            self._transport._on_too_large()
                        if not self._events:
                            raise ResponseTooLarge(f"the reply is larger than {limit} bytes")
                    yield chunk

        async def aclose(self) -> None:
            await self._stream.aclose()

    return Body


def webhook_transport(kind: OutboundKind = "http_tool") -> httpx.AsyncBaseTransport:
    """A fresh guarded transport for one webhook call (an http tool's; ``"budget_alert"``: a budget alert's),
    against the allow-list of ``kind``."""
    return cast(httpx.AsyncBaseTransport, GuardedTransport(allowed_networks(kind)))


# The SDK's defaults (mcp.shared._httpx_utils): a server may hold a response stream (SSE) open for long without
# sending, so reads wait far longer than connects; our own call deadline is the caller's, not the socket's.
SSE_READ_TIMEOUT_SECONDS = 300.0
# Connections an upstream's pool holds beyond its concurrent calls: the standalone stream, a subscription, the
# handshake's requests, a cancellation's POST.
UPSTREAM_SPARE_CONNECTIONS = 8
UPSTREAM_MAX_KEEPALIVE_CONNECTIONS = 8
UPSTREAM_KEEPALIVE_SECONDS = 60.0


def upstream_http_client(
    *,
    headers: dict[str, str],
    timeout: float,
    connect_timeout: float,
    max_response_bytes: int | None = None,
    auth: httpx2.Auth | None = None,
    max_calls: int = 24,
    on_too_large: Callable[[], None] | None = None,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for one upstream MCP server, to be closed by the caller: guarded, no proxy or
    certificate bundle from the environment beyond ``SSL_CERT_FILE``, no redirect followed (the SDK follows
    same-origin ones itself), keep-alive on (the caller pools one client per upstream).

    ``connect_timeout`` also bounds the wait for a pooled connection; reads wait at least
    ``SSE_READ_TIMEOUT_SECONDS``. The pool holds ``max_calls`` connections (the caller admits no more calls at
    once) plus ``UPSTREAM_SPARE_CONNECTIONS``. ``max_response_bytes`` and ``on_too_large``: ``GuardedTransport``'s
    (an SSE stream is bounded per event by the SDK's ``max_sse_event_size``)."""
    # httpx2 comes with the mcp SDK, which only federation needs.
    import httpcore2
    import httpx2

    transport = GuardedTransport(
        allowed_networks("upstream"),
        client=httpx2,
        core=httpcore2,
        max_connections=max_calls + UPSTREAM_SPARE_CONNECTIONS,
        max_keepalive_connections=UPSTREAM_MAX_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=UPSTREAM_KEEPALIVE_SECONDS,
        max_response_bytes=max_response_bytes,
        on_too_large=on_too_large,
    )
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(
            timeout, connect=connect_timeout, read=max(timeout, SSE_READ_TIMEOUT_SECONDS), pool=connect_timeout
        ),
        auth=auth,
        transport=cast("httpx2.AsyncBaseTransport", transport),
        follow_redirects=False,
        trust_env=False,
    )
