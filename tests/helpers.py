"""The suite's one helpers module: drive the real ASGI application (router + consumer) in-process with Channels'
``HttpCommunicator``, in both eras, and wait for things with a bound.

What lives here and nowhere else: ``call``/``communicator``/``rpc`` (one request at the wire), ``open_session`` (a
handshake-era session), the 2026-07-28 envelope and routing headers (``modern_body``, ``modern_call``), the tasks
extension's declaration (``DECLARING``), a worker call's record (``running_worker_call``), ``settled`` (every task's
background work ended), one bounded ``wait_until`` (async and blocking), and the fixtures the wire tests share
(``access``, ``make_access``, ``orm``, ``worker_calls_drained``; conftests import them), and for the end-to-end tests
against a real daphne the URL, headers, ``initialize`` body, SSE frame readers and an OAuth token's refusal on every
process. Test modules import helpers from here, never from another test module; a helper that a second module needs
moves here.

Not here: pytest-django's database fixtures and the factories (``tests/conftest.py``), helper servers
(``tests/webhook_server.py``, ``tests/oauth_flow.py``, ...), starting daphne and Celery workers
(``tests/e2e/conftest.py``, ``tests/e2e/workers.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
WAIT_SECONDS = 5.0  # the default bound of every wait here: long on a loaded 2-core machine, short on a hang


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")

    def sse_messages(self) -> list[Any]:
        """The JSON-RPC messages of an SSE body (priming events, which carry empty data, are skipped)."""
        return sse_messages(self.body)


def sse_messages(body: bytes) -> list[Any]:
    return [
        orjson.loads(line[len("data: ") :])
        for line in body.decode().splitlines()
        if line.startswith("data: ") and line[len("data: ") :].strip()
    ]


def header_list(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(key.lower().encode(), value.encode()) for key, value in headers.items()]


def default_headers(access: Any) -> dict[str, str]:
    return {
        "authorization": f"Bearer {access.raw_token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }


def communicator(
    access: Any,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    query: str | None = None,
    path: str | None = None,
    raw: bytes | None = None,
) -> HttpCommunicator:
    merged = {**default_headers(access), **(headers or {})}
    for name in drop:
        merged.pop(name, None)
    payload = raw if raw is not None else (orjson.dumps(body) if body is not None else b"")
    target = f"{path or access.path}?{access.query if query is None else query}"
    from mcp_host.asgi import application

    return HttpCommunicator(application, method, target, body=payload, headers=header_list(merged))


async def call(access: Any, body: Any = None, *, timeout: float = 5, **kwargs: Any) -> Reply:
    comm = communicator(access, body, **kwargs)
    try:
        response = await comm.get_response(timeout=timeout)
    finally:
        await comm.wait(timeout=timeout)
    headers = {key.decode().lower(): value.decode() for key, value in response["headers"]}
    return Reply(status=response["status"], headers=headers, body=response["body"])


def rpc(method: str, params: Any = None, id: int | str | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id is not None:
        message["id"] = id
    return message


# ------------------------------------------------------------------------------------ handshake era


async def open_session(
    access: Any, version: str = LEGACY, capabilities: dict[str, Any] | None = None, *, initialized: bool = False
) -> str:
    """``initialize`` a handshake-era session (client info ``t`` 1) and return its ``Mcp-Session-Id``; with
    ``initialized``, send ``notifications/initialized`` on it too."""
    init = rpc(
        "initialize",
        {"protocolVersion": version, "capabilities": capabilities or {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    reply = await call(access, init)
    assert reply.status == 200, reply.body
    session_id = reply.headers["mcp-session-id"]
    if initialized:
        done = await call(access, rpc("notifications/initialized", id=None), headers={"mcp-session-id": session_id})
        assert done.status == 202
    return session_id


EVENT = re.compile(r"id: (?P<id>\S+)\n(?:retry: (?P<retry>\d+)\n)?data: (?P<data>.*)")


def events(body: bytes) -> list[tuple[str, object]]:
    """The ``(id, message)`` of each SSE event of a resumable stream (a priming event's message is ``None``)."""
    found = []
    for block in body.decode().split("\n\n"):
        match = EVENT.match(block)
        if match:
            data = match["data"].strip()
            found.append((match["id"], orjson.loads(data) if data else None))
    return found


def tool_call(mode: str, name: str, text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A ``tools/call`` of ``name`` with ``{"text": text}`` and its headers: ``modern`` (envelope and routing
    headers) or the handshake era."""
    if mode == "modern":
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        }
        body = rpc("tools/call", {"name": name, "arguments": {"text": text}, "_meta": meta})
        return body, {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
    return rpc("tools/call", {"name": name, "arguments": {"text": text}}), {"mcp-protocol-version": LEGACY}


# ------------------------------------------------------------------------------ 2026-07-28 (stateless)

CLIENT_INFO = {"name": "modern-tests", "version": "1.0.0"}
ABSENT = object()

# Which body field each method's Mcp-Name header mirrors.
NAME_FIELDS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


def envelope(
    *,
    version: Any = MODERN,
    capabilities: Any = None,
    client_info: Any = CLIENT_INFO,
    log_level: str | None = None,
) -> dict[str, Any]:
    """The request ``_meta`` envelope; pass ``ABSENT`` to leave a key out."""
    meta: dict[str, Any] = {}
    if version is not ABSENT:
        meta["io.modelcontextprotocol/protocolVersion"] = version
    if capabilities is not ABSENT:
        meta["io.modelcontextprotocol/clientCapabilities"] = {} if capabilities is None else capabilities
    if client_info is not ABSENT:
        meta["io.modelcontextprotocol/clientInfo"] = client_info
    if log_level is not None:
        meta["io.modelcontextprotocol/logLevel"] = log_level
    return meta


def modern_body(method: str, params: dict[str, Any] | None = None, *, id: int | str = 1, **meta: Any) -> dict:
    """A JSON-RPC request whose ``params._meta`` carries the envelope (merged with any ``_meta`` in ``params``)."""
    params = dict(params or {})
    params["_meta"] = {**envelope(**meta), **params.get("_meta", {})}
    return rpc(method, params, id=id)


def routing_headers(body: dict[str, Any]) -> dict[str, str]:
    """The headers a conformant client derives from the body."""
    params = body.get("params") or {}
    version = (params.get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion")
    headers = {"mcp-method": body["method"]}
    if isinstance(version, str):
        headers["mcp-protocol-version"] = version
    name_field = NAME_FIELDS.get(body["method"])
    if name_field is not None and isinstance(params.get(name_field), str):
        headers["mcp-name"] = params[name_field]
    return headers


def assert_no_session(headers: dict[str, str]) -> None:
    assert "mcp-session-id" not in headers, "the stateless revision never mints or echoes Mcp-Session-Id"


async def send(access: Any, body: Any = None, **kwargs: Any) -> Reply:
    """``helpers.call`` plus the module-wide rule: no response carries a session id."""
    reply = await call(access, body, **kwargs)
    assert_no_session(reply.headers)
    return reply


def prepared_headers(body: dict[str, Any], headers_override: dict[str, str | None] | None) -> tuple[dict, tuple]:
    headers = routing_headers(body)
    drop: list[str] = []
    for name, value in (headers_override or {}).items():
        if value is None:
            headers.pop(name.lower(), None)
            drop.append(name.lower())
        else:
            headers[name.lower()] = value
    return headers, tuple(drop)


async def modern_call(
    access: Any,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    id: int | str = 1,
    headers_override: dict[str, str | None] | None = None,
    capabilities: Any = None,
    client_info: Any = CLIENT_INFO,
    version: Any = MODERN,
    log_level: str | None = None,
) -> Reply:
    """POST one stateless request with derived routing headers; ``headers_override`` values of ``None`` remove."""
    body = modern_body(
        method, params, id=id, version=version, capabilities=capabilities, client_info=client_info, log_level=log_level
    )
    headers, drop = prepared_headers(body, headers_override)
    return await send(access, body, headers=headers, drop=drop)


async def modern_call_tool(access: Any, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Reply:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return await modern_call(access, "tools/call", params, **kwargs)


def error_of(reply: Reply, status: int, code: int) -> dict[str, Any]:
    assert reply.status == status, reply.body
    assert reply.content_type == "application/json"
    body = reply.json()
    assert "result" not in body, body
    assert body["error"]["code"] == code, body
    return body["error"]


def result_of(reply: Reply) -> dict[str, Any]:
    assert reply.status == 200, reply.body
    body = reply.json()
    assert "error" not in body, body
    return body["result"]


def sse_data(frame: dict[str, Any]) -> Any:
    body = frame["body"]
    assert body.startswith(b"data: ") and body.endswith(b"\n\n"), body
    return orjson.loads(body[len(b"data: ") :])


async def open_stream(access: Any, body: dict[str, Any]) -> Any:
    """Start a streaming request (``subscriptions/listen``); returns the communicator after the 200 headers."""
    headers, _drop = prepared_headers(body, None)
    comm = communicator(access, body, headers=headers)
    await comm.send_input({"type": "http.request", "body": comm.body})
    start = await comm.receive_output(timeout=5)
    assert start["type"] == "http.response.start"
    response_headers = {key.decode().lower(): value.decode() for key, value in start["headers"]}
    assert_no_session(response_headers)
    assert start["status"] == 200
    assert response_headers["content-type"].startswith("text/event-stream")
    return comm


async def close_stream(comm: Any) -> None:
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)


# ---------------------------------------------------------------------------------------------- tasks

TASKS = "io.modelcontextprotocol/tasks"
DECLARING = {"elicitation": {}, "extensions": {TASKS: {}}}  # 2026-07-28 client capabilities declaring tasks


async def settled() -> None:
    """Wait (bounded) until the background work of every task in this process has ended and been recorded."""
    from mcp_app.runtime import durable

    await durable.drain(WAIT_SECONDS)


async def task_call_tool(
    access: Any, name: str, arguments: dict[str, Any] | None = None, capabilities: Any = DECLARING, **params: Any
) -> Reply:
    """A 2026-07-28 ``tools/call`` from a client that declares the tasks extension."""
    return await modern_call(
        access, "tools/call", {"name": name, "arguments": arguments or {}, **params}, capabilities=capabilities
    )


async def task(access: Any, method: str, task_id: str, capabilities: Any = DECLARING, **params: Any) -> Reply:
    """A 2026-07-28 task method (``tasks/get``, ``tasks/update``, ``tasks/cancel``) on ``task_id``."""
    return await modern_call(access, method, {"taskId": task_id, **params}, capabilities=capabilities)


def running_worker_call(access: Any, tool: str, *, ttl_ms: int = 600_000, started_at: Any = None, **fields: Any) -> Any:
    """The record (a ``ToolTask``) of a call of ``tool`` by ``access``'s agent running on a worker, not a client's
    task, started at ``started_at`` (now); ``fields`` set more of it (``progress``, ``status``, ...)."""
    from django.utils import timezone

    from mcp_app.models import ToolTask

    return ToolTask.objects.create_task(
        tool_name=tool,
        arguments={},
        ttl_ms=ttl_ms,
        server=access.server,
        agent=access.agent,
        execution="worker",
        client_task=False,
        started_at=started_at or timezone.now(),
        **fields,
    )


async def worker_work_ended() -> None:
    """Wait (bounded) until the in-process work of every worker call (``WORKER_DISPATCH`` in-process) has ended."""
    from mcp_app.runtime import durable

    await durable.drain(WAIT_SECONDS)


# ------------------------------------------------------------------------------------------- waiting


async def wait_until(
    condition: Callable[[], Any], timeout: float = WAIT_SECONDS, interval: float = 0.02, what: str = "the condition"
) -> Any:
    """Poll ``condition`` (a function, sync or async) until it returns something truthy, and return that; fail the
    test after ``timeout`` seconds. For state that no event announces (a row's status, a counter); where an event
    exists, wait on the event instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} did not hold within {timeout} s")
        await asyncio.sleep(interval)


async def nothing_left_running(within: float = WAIT_SECONDS) -> None:
    """Wait (at most ``within`` seconds) until every other task of this event loop has ended; fail naming those
    still running. A task left receiving when a test's loop closes hangs the suite: closing cancels each task once
    and waits for all of them."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=within)
    left = [task.get_coro() for task in others if not task.done()]
    if left:
        pytest.fail(f"still running {within} s after the test: {left}")


def wait_until_blocking(
    condition: Callable[[], Any], timeout: float = WAIT_SECONDS, interval: float = 0.02, what: str = "the condition"
) -> Any:
    """``wait_until`` for synchronous tests and threads: the same bound and the same failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} did not hold within {timeout} s")
        time.sleep(interval)


# -------------------------------------------------------------------- fixtures the wire tests share
# Imported by the conftests of tests/transport/ and tests/interaction/ (and of the other directories that drive
# the consumer): rows must be committed for the consumer's threads to see them.


@pytest.fixture
def access(transactional_db: Any, access_factory: Callable[..., Any]) -> Any:
    return access_factory()


@pytest.fixture
def make_access(transactional_db: Any, access_factory: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    return database_sync_to_async(access_factory)


@pytest.fixture
def orm() -> Callable[..., Awaitable[Any]]:
    """Run a sync callable (ORM work) from an async test."""

    async def run(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await database_sync_to_async(function)(*args, **kwargs)

    return run


@pytest.fixture(autouse=True, scope="session")
def close_connections_of_async_threads(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """database_sync_to_async keeps a connection in its worker thread: close it before the test DB is dropped.
    Autouse where it is imported (a conftest or module whose tests use the consumer)."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        asyncio.run(database_sync_to_async(connections.close_all)())


@pytest.fixture
async def worker_calls_drained() -> Any:
    """After the test, wait (bounded) for the in-process work of worker calls to end in this test's event loop:
    a receive on the channel layer left pending when the loop closes would break the next test's loop."""
    yield
    await worker_work_ended()


@pytest.fixture
def own_channel_layer() -> Any:
    """This test's own instance of the configured channel layer, dropped after it: channels-redis keeps receive
    state (its per-channel locks) on the instance, and a receive an earlier test left pending when its event loop
    closed would fail this test's receives ("bound to a different event loop")."""
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    yield
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)


# ----------------------------------------------------------------------- a real daphne, over httpx (e2e)

READ_TIMEOUT_SECONDS = 10.0  # the bound of a read from a real daphne's stream


def needs_shared_layer() -> None:
    """Skip (or fail under ``MCP_REQUIRE_SERVICES=1``) a test that crosses processes without a shared layer."""
    from django.conf import settings

    from tests.conftest import REQUIRE_SERVICES

    if not settings.REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not configured")
        pytest.skip("crossing processes needs a shared channel layer (set REDIS_URL)")


def budget_counters(redis_url: str, tenant_pk: int, *, clear: bool = False) -> dict[str, float]:
    """The tenant's budget counters in the Redis the processes share, by key (``clear``: deleted first; they are
    keyed by primary keys, which a new test database reuses)."""
    import redis

    from mcp_app.limits.budgets import KEY_PREFIX

    client = redis.Redis.from_url(redis_url, socket_timeout=5.0)
    try:
        keys = list(client.scan_iter(f"{KEY_PREFIX}:t:{tenant_pk}:*"))
        if clear and keys:
            client.delete(*keys)
        return {key.decode(): float(client.get(key) or 0) for key in keys if not clear}
    finally:
        client.close()


def endpoint(base: str, access: Any, server_id: str | None = None) -> str:
    """The MCP URL of ``access``'s server (or ``server_id``) on the daphne at ``base``."""
    return f"{base}/mcp/{server_id or access.server.server_id}?{access.query}"


async def within_bound(
    changed: Callable[[str], Awaitable[bool]], bases: Iterable[str], *, what: str, bound: float | None = None
) -> dict[str, float]:
    """Ask each daphne at ``bases`` (``changed(base)``, a request and a verdict) until every one shows a change
    just made; fail when one has not after ``bound`` seconds (``BOUND_SECONDS``, the invalidation bound).
    Returns how long each took."""
    from tests.e2e.conftest import BOUND_SECONDS

    limit = BOUND_SECONDS if bound is None else bound
    started = time.monotonic()
    seen: dict[str, float] = {}
    pending = set(bases)
    while pending:
        for base in sorted(pending):
            if await changed(base):
                seen[base] = time.monotonic() - started
                pending.discard(base)
        elapsed = time.monotonic() - started
        if pending and elapsed > limit:
            pytest.fail(f"{what}: not seen by {sorted(pending)} after {elapsed:.2f}s (seen: {seen})")
        await asyncio.sleep(0.01)
    return seen


async def served_then_refused(issued: Any, bases: Iterable[str], change: Callable[[], None], *, what: str) -> None:
    """A tool call with ``issued``'s OAuth access token is served on each daphne at ``bases`` (twice: each caches
    the token); after ``change`` (made in this process, as the admin would) each answers 401 ``invalid_token``
    with the resource metadata within ``BOUND_SECONDS``."""
    from tests.e2e.conftest import BOUND_SECONDS, CALL

    headers = post_headers(issued, **{"MCP-Protocol-Version": LEGACY})
    async with httpx.AsyncClient(timeout=10.0) as http:
        for base in bases:
            for _ in range(2):
                served = await http.post(f"{base}{issued.path}", json=CALL, headers=headers)
                assert served.status_code == 200, served.text
        await database_sync_to_async(change)()

        async def refused(base: str) -> bool:
            reply = await http.post(f"{base}{issued.path}", json=CALL, headers=headers)
            if reply.status_code != 401:
                return False
            assert 'error="invalid_token"' in reply.headers["www-authenticate"]
            assert "resource_metadata=" in reply.headers["www-authenticate"]
            return True

        seen = await within_bound(refused, bases, what=what)
    assert max(seen.values()) <= BOUND_SECONDS, seen


def auth_headers(access: Any, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {access.raw_token}", **extra}


def post_headers(access: Any, **extra: str) -> dict[str, str]:
    """What a client POSTs with: the token, JSON, and both answer types accepted."""
    return auth_headers(
        access, **{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **extra}
    )


def initialize(capabilities: dict[str, Any]) -> dict[str, Any]:
    """A 2025-11-25 ``initialize`` request (client info ``e2e`` 1) declaring ``capabilities``."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": {"name": "e2e", "version": "1"},
        },
    }


async def data_messages(lines: Any) -> Any:
    """The JSON-RPC messages of an event stream's lines as they arrive (priming events skipped)."""
    async for line in lines:
        if line.startswith("data: ") and line[len("data: ") :].strip():
            yield orjson.loads(line[len("data: ") :])


async def admin_session(http: httpx.AsyncClient, base: str, credentials: tuple[str, str]) -> str:
    """Log in to the admin of the daphne at ``base``; return the CSRF token for the forms that follow."""
    page = await http.get(f"{base}/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    form = {"username": credentials[0], "password": credentials[1], "csrfmiddlewaretoken": token, "next": "/admin/"}
    logged_in = await http.post(f"{base}/admin/login/?next=/admin/", data=form)
    assert logged_in.status_code == 302, logged_in.text[:500]
    return http.cookies["csrftoken"]


def demo_tenant_token(server: Any) -> tuple[str, str]:
    """An agent of ``server``'s tenant and a raw token for it (ORM; call it from a sync context)."""
    from mcp_app.models import Agent, AgentToken

    agent, _ = Agent.objects.get_or_create(tenant=server.tenant, agent_id="two-process-agent", defaults={"name": "e2e"})
    _token, raw = AgentToken.objects.issue_token(agent, servers=[server])
    return agent.agent_id, raw


@dataclass
class SseFrame:
    """One server-sent event: its comment lines, its joined ``data:`` lines and its id."""

    comments: list[str] = field(default_factory=list)
    data: str | None = None
    event_id: str | None = None

    @property
    def message(self) -> Any:
        assert self.data is not None, f"frame has no data: {self}"
        return json.loads(self.data)


def parse_frame(raw: str) -> SseFrame:
    frame = SseFrame()
    data: list[str] = []
    for line in raw.split("\n"):
        if line.startswith(":"):
            frame.comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "id":
            frame.event_id = value
    frame.data = "\n".join(data) if data else None
    return frame


async def sse_frames(response: httpx.Response) -> AsyncIterator[SseFrame]:
    """The frames of an event stream as they arrive (a frame ends at a blank line)."""
    buffer = ""
    async for chunk in response.aiter_text():
        buffer = (buffer + chunk).replace("\r\n", "\n")
        while "\n\n" in buffer:
            raw, buffer = buffer.split("\n\n", 1)
            yield parse_frame(raw)
    assert not buffer.strip(), f"stream ended inside a frame: {buffer!r}"


def task_call(seconds: int) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026 ``tools/call`` of ``slow_compute`` for ``seconds`` from a client that declared tasks, with its
    routing headers: it becomes a task."""
    body = modern_body(
        "tools/call",
        {"name": "slow_compute", "arguments": {"seconds": seconds, "label": "crash"}},
        id="task-1",
        capabilities={"extensions": {TASKS: {}}},
    )
    return body, routing_headers(body)


class RedisRoundTrips:
    """Counts the commands and pipelines this process's redis-py clients send: each is one round trip to Redis."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import redis.asyncio.client as client

        self.sent: list[str] = []  # each round trip: its command's name, or "PIPELINE"
        command, pipeline = client.Redis.execute_command, client.Pipeline.execute

        async def counted_command(this: Any, *args: Any, **options: Any) -> Any:
            self.sent.append(str(args[0]).upper())
            return await command(this, *args, **options)

        async def counted_pipeline(this: Any, *args: Any, **options: Any) -> Any:
            self.sent.append("PIPELINE")
            return await pipeline(this, *args, **options)

        monkeypatch.setattr(client.Redis, "execute_command", counted_command)
        monkeypatch.setattr(client.Pipeline, "execute", counted_pipeline)

    @property
    def count(self) -> int:
        return len(self.sent)
