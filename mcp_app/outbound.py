"""Every outbound connection mcp-host makes for a tenant: one allow-list, one SSRF-guarded connector.

Three kinds of connection leave the process on a tenant's (or a client's) say-so: ``"http_tool"`` (webhooks of
http tools), ``"upstream"`` (upstream MCP servers, ``mcp_app.federation``) and ``"cimd"`` (OAuth client ID
metadata documents). Each is checked by ``netguard`` against ``allowed_networks(kind)``: the operator's
``MCP_APP["OUTBOUND_ALLOWED_NETWORKS"]``, which applies to every kind, plus the older per-kind setting where there
is one (``HTTP_TOOL_ALLOWED_NETWORKS`` for http tools, ``OAUTH_CIMD_ALLOWED_NETWORKS`` for client metadata).
Parsed lists are cached per settings value, so a changed setting (``override_settings``) takes effect at once.

``GuardedBackend(core)`` is the network backend of an httpcore connection pool that connects only to addresses
``netguard.resolve_checked`` accepted for the URL's host, and to the checked address itself (never the name
again, so a DNS answer that changes in between cannot redirect it), while TLS still verifies the certificate for
the URL's host name (the pool starts TLS with the URL's host as SNI; only the socket is pinned). It is written
once for both cores: ``httpcore`` (httpx; webhooks) and ``httpcore2`` (httpx2, the ``mcp`` SDK's client;
upstreams). A refused host raises ``netguard.ForbiddenAddress`` from the request, before any socket is opened.

- ``webhook_transport()``: what one webhook call uses, an httpx transport with one connection, no keep-alive and
  no proxy from the environment (a fresh one per call, so no connection is shared across tenants).
- ``upstream_http_client(...)``: the ``httpx2.AsyncClient`` to hand to the SDK's
  ``streamable_http_client(url, http_client=...)``: guarded, no proxy or certificate bundle from the environment
  beyond ``SSL_CERT_FILE``, no redirect followed by httpx2 (the SDK follows same-origin ones itself), keep-alive
  on (the caller pools one client per upstream), a bounded number of connections.

``resolver`` is the name resolver every guarded connection uses (tests replace it to resolve made-up names);
``ssl_context()`` the certificate verification (tests replace it to trust a test CA).

Not here: URL syntax rules (``definitions.http_tools.validate_url``), redirects of webhooks (refused by the
runtime), response size bounds (each caller's), pooling of upstream clients (``mcp_app.federation``).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

import httpcore
import httpx

from .conf import mcp_settings
from .netguard import AllowEntry, ForbiddenAddress, Resolver, parse_allow_list, resolve_checked, system_resolver

if TYPE_CHECKING:
    import httpx2

OutboundKind = Literal["http_tool", "upstream", "cimd"]
KINDS: tuple[OutboundKind, ...] = ("http_tool", "upstream", "cimd")

# The older setting of each kind, still honoured in addition to OUTBOUND_ALLOWED_NETWORKS.
_KIND_SETTINGS: dict[str, str | None] = {
    "http_tool": "HTTP_TOOL_ALLOWED_NETWORKS",
    "upstream": None,
    "cimd": "OAUTH_CIMD_ALLOWED_NETWORKS",
}

# Tests replace this to resolve made-up names; everything else uses the system resolver.
resolver: Resolver = system_resolver


def allowed_networks(kind: OutboundKind) -> tuple[AllowEntry, ...]:
    """The allow-list of ``kind``: ``OUTBOUND_ALLOWED_NETWORKS`` plus the kind's own older setting, if any."""
    if kind not in _KIND_SETTINGS:
        raise ValueError(f"unknown kind of outbound connection {kind!r}")
    entries = tuple(mcp_settings.OUTBOUND_ALLOWED_NETWORKS)
    own = _KIND_SETTINGS[kind]
    if own is not None:
        entries += tuple(getattr(mcp_settings, own))
    return _parsed(entries)


@functools.lru_cache(maxsize=16)
def _parsed(entries: tuple[str, ...]) -> tuple[AllowEntry, ...]:
    return parse_allow_list(entries)


@functools.lru_cache(maxsize=1)
def _default_ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def ssl_context() -> ssl.SSLContext:
    """The TLS context of every outbound connection (the system's trust store, or ``SSL_CERT_FILE``)."""
    return _default_ssl_context()


def _resolve(host: str, port: int) -> Any:
    return resolver(host, port)  # looked up at each connection, so a replaced resolver applies to made clients


class GuardedBackend:
    """An httpcore (or httpcore2: ``core`` is the module) network backend that connects only to addresses the
    SSRF guard accepted for the host. ``allow`` is the allow-list; ``resolve`` defaults to ``outbound.resolver``.

    It has the interface of ``core.AsyncNetworkBackend`` (the pools call nothing else) without inheriting from
    it, so that one class serves both cores."""

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


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose every connection goes through ``GuardedBackend``: one
    connection, no keep-alive, no proxy from the environment. What one webhook call uses."""

    def __init__(self, allow: Sequence[AllowEntry], resolve: Resolver | None = None) -> None:
        context = ssl_context()
        super().__init__(verify=context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=1,
            max_keepalive_connections=0,
            network_backend=cast(httpcore.AsyncNetworkBackend, GuardedBackend(httpcore, allow, resolve)),
        )


def webhook_transport() -> GuardedTransport:
    """A fresh guarded transport for one webhook call, against the ``"http_tool"`` allow-list."""
    return GuardedTransport(allowed_networks("http_tool"))


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
    """An ``httpx2.AsyncClient`` for one upstream MCP server, for the SDK's ``streamable_http_client``.

    Every connection is guarded against the ``"upstream"`` allow-list. Timeouts: ``connect_timeout`` to connect
    and to wait for a free pooled connection, ``timeout`` to write, and reads wait at least
    ``SSE_READ_TIMEOUT_SECONDS`` (an open SSE stream is silent between events; the caller bounds each call).
    ``auth`` (an ``httpx2.Auth``, e.g. the SDK's OAuth provider) authenticates every request. The pool holds
    ``max_calls`` connections (the caller admits no more calls at once) plus ``UPSTREAM_SPARE_CONNECTIONS``.
    ``max_response_bytes`` bounds a reply that is not a stream (an SSE stream is bounded per event, by the SDK's
    ``max_sse_event_size``): reading past it fails the request. The client must be closed (``async with`` or
    ``aclose()``). ``on_too_large`` is called (in the request's context) when a reply goes past that bound."""
    # httpx2 comes with the mcp SDK, which only federation needs.
    import httpcore2
    import httpx2

    context = ssl_context()
    transport = httpx2.AsyncHTTPTransport(verify=context, trust_env=False)
    # The transport's pool replaced by one over the guarded backend, as GuardedTransport does for httpx.
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=context,
        max_connections=max_calls + UPSTREAM_SPARE_CONNECTIONS,
        max_keepalive_connections=UPSTREAM_MAX_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=UPSTREAM_KEEPALIVE_SECONDS,
        network_backend=cast(httpcore2.AsyncNetworkBackend, GuardedBackend(httpcore2, allowed_networks("upstream"))),
    )
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(
            timeout,
            connect=connect_timeout,
            read=max(timeout, SSE_READ_TIMEOUT_SECONDS),
            pool=connect_timeout,
        ),
        auth=auth,
        transport=transport if max_response_bytes is None else _bounded(transport, max_response_bytes, on_too_large),
        follow_redirects=False,
        trust_env=False,
    )


class ResponseTooLarge(Exception):
    """A reply went past the bound its client was made with."""


def _bounded(inner: Any, limit: int, on_too_large: Callable[[], None] | None = None) -> Any:
    """``inner`` (an httpx2 transport) whose replies, other than event streams, stop at ``limit`` bytes."""
    import httpx2

    class Bounded(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await inner.handle_async_request(request)
            if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
                return response
            stream = response.stream

            class Counted(httpx2.AsyncByteStream):
                async def __aiter__(self) -> Any:
                    seen = 0
                    async for chunk in stream:
                        seen += len(chunk)
                        if seen > limit:
                            if on_too_large is not None:
                                on_too_large()
                            raise ResponseTooLarge(f"the reply is larger than {limit} bytes")
                        yield chunk

                async def aclose(self) -> None:
                    await stream.aclose()

            response.stream = Counted()
            return response

        async def aclose(self) -> None:
            await inner.aclose()

    return Bounded()
