"""A real upstream MCP server for the federation tests: the official SDK's ``MCPServer`` under uvicorn.

Run it as ``python -m tests.federation.upstream_server --port P --mode stateful|stateless``; it serves MCP at
``http://127.0.0.1:P/mcp`` and a small control API beside it. ``tests/upstreams.py`` (a plugin of the suite) starts it as a
subprocess; federation tests point mcp-host at ``.url`` and read what the upstream saw through the control API.

What it serves (the contract the federation tests build on):

- tools: ``echo(text) -> text`` (kept minimal: the benchmarks proxy it); ``add(a, b) -> int`` (structured
  output); ``slow(steps, delay, tag)`` (progress ``i/steps`` with a message and an info log each step, ``delay``
  seconds apart; records ``started``/``finished``/``cancelled`` events for ``tag``); ``ask_name()`` (elicits a form
  with one string field ``name``; returns ``hello <name>``, ``declined`` or ``cancelled``); ``summarize(text)``
  (asks the client to sample and returns the model's text); ``fail()`` (raises: an ``isError`` result); ``grow(name)``
  (registers a tool ``name`` that echoes ``text`` and announces ``tools/list_changed``); ``ask_directly()`` (elicits
  a ``name`` with ``ctx.elicit``, the handshake way: no back-channel at 2026-07-28); ``ask_later(tag)`` (answers
  ``asking``, then elicits a password outside any request, on the standalone stream, and records
  ``later-accept``/``later-decline``/``later-cancel``/``later-error`` for ``tag``). An unknown tool name is the SDK's
  own error. ``moved(text)`` is listed like ``echo``, but a ``tools/call`` of it is answered ``307`` to ``MOVED_TO``.
- resources: ``note://readme`` (text) and the template ``note://items/{id}``; a prompt ``greet(name)``.
- control API: ``GET /control/events?kind=K&tag=T&timeout=S`` answers ``{"seen": true}`` as soon as the event was
  recorded, or ``{"seen": false}`` after ``S`` seconds (a bounded long poll: no polling loop in the tests);
  ``GET /control/events`` lists every ``{"kind", "tag"}`` recorded; ``POST /control/tools`` with ``{"name": N}`` (and
  optionally ``"description"``, any text: hostile, huge; ``"argument": "message"`` to take ``message`` instead of
  ``text``) does what ``grow`` does, replacing a tool of that name (its description or schema changed upstream), for
  a test that has no MCP session of its own (e.g. a ``mcp_upstream sync`` test).

The two modes and the protocol eras they serve (the SDK routes on the ``MCP-Protocol-Version`` header, so both
modes answer the 2026-07-28 single-exchange era; ``--mode`` only decides the handshake era's transport):

- ``stateful``: handshake-era sessions (``Mcp-Session-Id``, a standalone GET stream) plus the 2026-07-28 era.
  ``mcp.Client(url)`` (``mode="auto"``) negotiates **2026-07-28**; ``mode="legacy"`` gets **2025-11-25**.
- ``stateless``: ``stateless_http=True``: each handshake-era POST is served by a fresh transport, with no session
  id and no standalone stream; plus the 2026-07-28 era. ``mode="auto"`` negotiates **2026-07-28** too;
  ``mode="legacy"`` gets **2025-11-25**.

What works in which mode and era (``tests/federation/test_upstream_servers.py`` proves each line; "stateless
handshake" is ``--mode stateless`` with ``mode="legacy"``, the one row with no back-channel):

- calls: ``fail()`` and an unknown tool name both answer an ``isError`` result (the message carries
  ``upstream tool failed`` / the tool name), never a JSON-RPC error; everywhere.
- progress (``notifications/progress`` on the call's stream): everywhere.
- logs (``ctx.info``): handshake era always; the 2026-07-28 era only for a request that opts in with the
  ``io.modelcontextprotocol/logLevel`` ``_meta`` key (``Client(log_level="info")``).
- cancellation: the tool's task is cancelled and ``cancelled <tag>`` recorded, never ``finished <tag>``. Handshake
  era (stateful) by ``notifications/cancelled``; 2026-07-28 (both modes) by closing the call's response stream
  (what the SDK client does when the awaiting task is cancelled). Stateless handshake: ``notifications/cancelled``
  lands on a fresh transport and is lost, and the SDK client keeps the call's POST open, so the tool runs on until
  the client closes its HTTP connections (the test asserts exactly that).
- elicitation and sampling (``ask_name``, ``summarize``: ``Resolve(...)`` with ``Elicit``/``Sample``): in the
  2026-07-28 era (both modes) the tool answers an ``InputRequiredResult`` (``resultType: "input_required"``) and
  resumes when the client retries with ``inputResponses``/``requestState`` (``Client.call_tool`` drives this and
  calls the client's callbacks); in the stateful handshake the SDK sends ``elicitation/create`` /
  ``sampling/createMessage`` on the call's stream. Stateless handshake: the call fails with a JSON-RPC error
  ("Cannot send 'elicitation/create': this transport context has no back-channel ..."). A client that did not
  declare the capability gets JSON-RPC error ``MISSING_REQUIRED_CLIENT_CAPABILITY`` (-32021) where there is a
  back-channel, the no-back-channel error otherwise.
- ``tools/list_changed``: stateful handshake: ``notifications/tools/list_changed`` on each seen session's
  standalone GET stream. 2026-07-28 (both modes): a ``ToolsListChanged`` event on ``subscriptions/listen``
  (``Client.listen(tools_list_changed=True)``), through the SDK's in-process bus. Stateless handshake: nothing can
  carry it; the new tool shows on the next ``tools/list``.

``UpstreamProcess`` is the test process's handle on one such process: ``start()``/``stop()`` (bounded; a stopped upstream
can be started again on the same port, for down/breaker tests), ``url``, the event waits and ``add_tool``.

Not here: the fixtures (``conftest.py``), anything about mcp-host.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import secrets
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.elicitation import AcceptedElicitation, CancelledElicitation, DeclinedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ToolsListChanged
from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

PATH = "/mcp"
MAX_EVENT_WAIT_SECONDS = 30.0
WAIT_SECONDS = 5.0  # the default bound of an event wait: long on a loaded 2-core machine, short on a hang
STOP_TIMEOUT_SECONDS = 10.0
MODES = ("stateful", "stateless")


@dataclass
class Events:
    """What the tools did, recorded in order; waiters are woken when a new event arrives."""

    seen: list[tuple[str, str]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def record(self, kind: str, tag: str) -> None:
        async with self.changed:
            self.seen.append((kind, tag))
            self.changed.notify_all()

    async def wait(self, kind: str, tag: str, timeout: float) -> bool:
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(lambda: (kind, tag) in self.seen), timeout)
            return (kind, tag) in self.seen


class Name(BaseModel):
    name: str


def ask_for_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def sample_summary(text: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(text=f"Summarize: {text}"))], max_tokens=50)


class ClientCredentials:
    """A minimal OAuth authorization server beside the upstream (``--oauth ID:SECRET``): RFC 8414 metadata and a
    token endpoint that grants ``client_credentials`` to that one client (HTTP Basic), and the verifier of the
    tokens it issued. Enough for mcp-host's upstream OAuth (the SDK's ``ClientCredentialsOAuthProvider``)."""

    def __init__(self, issuer: str, client_id: str, secret: str) -> None:
        self.issuer, self.client_id, self.secret = issuer, client_id, secret
        self.issued: set[str] = set()

    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id=self.client_id, scopes=[]) if token in self.issued else None

    def routes(self, server: MCPServer) -> None:
        @server.custom_route("/.well-known/oauth-authorization-server", methods=["GET"])
        async def metadata(request: Request) -> Response:
            return JSONResponse(
                {
                    "issuer": self.issuer,
                    # Required by RFC 8414 (and the SDK's model) although no client here is sent to it.
                    "authorization_endpoint": f"{self.issuer}/authorize",
                    "token_endpoint": f"{self.issuer}/token",
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["client_credentials"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                }
            )

        @server.custom_route("/token", methods=["POST"])
        async def token(request: Request) -> Response:
            form = await request.form()
            expected = "Basic " + base64.b64encode(f"{self.client_id}:{self.secret}".encode()).decode()
            if form.get("grant_type") != "client_credentials":
                return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
            if request.headers.get("authorization") != expected:
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            issued = secrets.token_urlsafe(16)
            self.issued.add(issued)
            return JSONResponse({"access_token": issued, "token_type": "Bearer", "expires_in": 3600})


class RequireAuthorization:
    """``--authorization VALUE``: an MCP request without exactly that ``Authorization`` header is answered 401 (a
    static credential, as a tenant configures in a secret header); the control API stays open."""

    def __init__(self, app: Any, value: str) -> None:
        self.app, self.value = app, value.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        refused = scope["type"] == "http" and scope["path"].startswith(PATH)
        if refused and dict(scope["headers"]).get(b"authorization") != self.value:
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


MOVED_TO = "http://127.0.0.1:9/elsewhere?key=moved-secret-7"


class RedirectMoved:
    """Answers a ``tools/call`` of the tool ``moved`` with ``307`` to ``MOVED_TO`` (an upstream that moved, or a
    hostile one pointing mcp-host elsewhere); every other request goes through."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith(PATH):
            await self.app(scope, receive, send)
            return
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if b'"tools/call"' in body and b'"name":"moved"' in body.replace(b" ", b""):
            await Response(status_code=307, headers={"location": MOVED_TO})(scope, receive, send)
            return

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def build(mode: str, oauth: ClientCredentials | None = None) -> tuple[MCPServer, Events]:
    events = Events()
    bus = InMemorySubscriptionBus()
    # Handshake-era sessions seen so far, by Mcp-Session-Id (stateful mode only: a stateless or 2026-07-28 request
    # has no session id): list_changed goes to each one's standalone GET stream.
    sessions: dict[str, ServerSession] = {}

    async def remember_session(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        headers = getattr(ctx.request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if session_id is not None and ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            sessions.setdefault(session_id, ctx.session)
        return await call_next(ctx)

    background: set[asyncio.Task[None]] = set()
    protected: dict[str, Any] = {}
    if oauth is not None:
        protected = {
            "token_verifier": oauth,
            "auth": AuthSettings(issuer_url=oauth.issuer, resource_server_url=f"{oauth.issuer}{PATH}"),
        }
    server = MCPServer(
        "upstream", version="1.0", log_level="WARNING", subscriptions=bus, middleware=[remember_session], **protected
    )
    if oauth is not None:
        oauth.routes(server)

    async def add_echo_tool(name: str, description: str | None = None, argument: str = "text") -> None:
        def grown(text: str) -> str:
            return text

        def grown_message(message: str) -> str:
            return message

        if name in {tool.name for tool in await server.list_tools()}:
            server.remove_tool(name)  # replaced: its description or its schema changed
        echo_tool = grown_message if argument == "message" else grown
        server.add_tool(echo_tool, name=name, description=description or f"Echo, added at runtime as {name}")
        await bus.publish(ToolsListChanged())
        for key, session in list(sessions.items()):
            try:
                with anyio.fail_after(1.0):  # a stuck session must not hold up the others
                    await session.send_tool_list_changed()
            except Exception:  # a session whose client went away: forget it
                sessions.pop(key, None)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def slow(steps: int, delay: float, tag: str, ctx: Context) -> str:
        """Report progress each step, `delay` seconds apart; records started/finished/cancelled for `tag`."""
        await events.record("started", tag)
        try:
            for step in range(1, steps + 1):
                await anyio.sleep(delay)
                await ctx.report_progress(step, steps, f"step {step}/{steps}")
                await ctx.info(f"step {step} of {steps}")
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await events.record("cancelled", tag)
            raise
        await events.record("finished", tag)
        return f"done {steps}"

    @server.tool()
    def ask_name(answer: Annotated[ElicitationResult[Name], Resolve(ask_for_name)]) -> str:
        """Elicit a name from the user."""
        if isinstance(answer, AcceptedElicitation):
            return f"hello {answer.data.name}"
        if isinstance(answer, DeclinedElicitation):
            return "declined"
        assert isinstance(answer, CancelledElicitation)
        return "cancelled"

    @server.tool()
    def summarize(text: str, sampled: Annotated[CreateMessageResult, Resolve(sample_summary)]) -> str:
        """Ask the client's model to summarize the text."""
        content = sampled.content
        return content.text if isinstance(content, TextContent) else str(content)

    @server.tool()
    async def ask_directly(ctx: Context) -> str:
        """Elicit a name the handshake way (``ctx.elicit`` on the request's stream; no back-channel at 2026-07-28)."""
        answer = await ctx.elicit("What is your name?", Name)
        return f"hello {answer.data.name}" if isinstance(answer, AcceptedElicitation) else answer.action

    @server.tool()
    async def ask_later(tag: str, ctx: Context) -> str:
        """Return at once, then elicit a password outside any request (the session's standalone stream) and
        record ``later-<action>`` (or ``later-error``) for `tag`."""
        session = ctx.session

        async def ask() -> None:
            schema: dict[str, Any] = {"type": "object", "properties": {"password": {"type": "string"}}}
            try:
                answer = await session.elicit_form("enter your password", schema)
                await events.record(f"later-{answer.action}", tag)
            except Exception:
                await events.record("later-error", tag)

        background.add(asyncio.get_running_loop().create_task(ask()))
        return "asking"

    @server.tool()
    def moved(text: str) -> str:
        """Echo, but a call is redirected elsewhere (``RedirectMoved``)."""
        return text

    @server.tool()
    def fail() -> str:
        """Always fails."""
        raise ToolError("upstream tool failed")

    @server.tool()
    async def grow(name: str) -> str:
        """Register a tool `name` that echoes, and announce tools/list_changed."""
        await add_echo_tool(name)
        return f"added {name}"

    @server.resource("note://readme", mime_type="text/plain")
    def readme() -> str:
        """The upstream's readme."""
        return "upstream readme"

    @server.resource("note://items/{id}", mime_type="text/plain")
    def item(id: str) -> str:
        """One item."""
        return f"item {id}"

    @server.prompt()
    def greet(name: str) -> str:
        """Greet someone."""
        return f"Please greet {name}."

    @server.custom_route("/control/events", methods=["GET"])
    async def control_events(request: Request) -> Response:
        kind, tag = request.query_params.get("kind"), request.query_params.get("tag")
        if kind is None or tag is None:
            return JSONResponse({"events": [{"kind": k, "tag": t} for k, t in events.seen]})
        timeout = min(float(request.query_params.get("timeout", "0")), MAX_EVENT_WAIT_SECONDS)
        return JSONResponse({"seen": await events.wait(kind, tag, timeout)})

    @server.custom_route("/control/tools", methods=["POST"])
    async def control_tools(request: Request) -> Response:
        body = await request.json()
        name = body["name"]
        await add_echo_tool(name, body.get("description"), body.get("argument", "text"))
        return JSONResponse({"added": name})

    return server, events


class UpstreamProcess:
    """A running ``upstream_server`` process on 127.0.0.1 and the test process's view of it.

    ``url`` is the MCP endpoint. ``wait_for_event`` / ``await_event`` ask the server whether a tool recorded
    ``kind`` (``started``, ``finished``, ``cancelled``) for ``tag``, waiting at most ``timeout`` seconds on the
    server side (a long poll), and return whether it did; ``events`` lists everything recorded so far.
    ``add_tool`` / ``add_tool_async`` register an echoing tool at runtime and announce ``tools/list_changed``.
    """

    def __init__(
        self,
        mode: str,
        port: int,
        log: Path,
        *,
        oauth: tuple[str, str] | None = None,
        authorization: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.oauth = oauth
        self.authorization = authorization
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}{PATH}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<UpstreamProcess {self.mode} {self.url}>"

    def start(self) -> None:
        """Start the process and return once it listens (the port check is ``tests.e2e.conftest``'s)."""
        # Imported here, not at the top: the subprocess runs this module as a script without Django configured.
        from tests.e2e.conftest import wait_for_port

        assert self.process is None, "already running"
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.federation.upstream_server",
                    "--port",
                    str(self.port),
                    "--mode",
                    self.mode,
                    *(["--oauth", ":".join(self.oauth)] if self.oauth else []),
                    *(["--authorization", self.authorization] if self.authorization else []),
                ],
                cwd=Path(__file__).resolve().parents[2],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, self.process, f"upstream_server ({self.mode})")

    def stop(self) -> None:
        """Terminate the process (kill it if it does not exit within the bound); the port is then down."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def _event_query(self, kind: str, tag: str, timeout: float) -> dict[str, str]:
        return {"kind": kind, "tag": tag, "timeout": str(timeout)}

    def wait_for_event(self, kind: str, tag: str, timeout: float = WAIT_SECONDS) -> bool:
        """Whether the upstream recorded ``kind`` for ``tag`` within ``timeout`` seconds (blocking)."""
        reply = httpx.get(
            f"{self.base}/control/events", params=self._event_query(kind, tag, timeout), timeout=timeout + 5
        )
        return bool(reply.raise_for_status().json()["seen"])

    async def await_event(self, kind: str, tag: str, timeout: float = WAIT_SECONDS) -> bool:
        """``wait_for_event`` for async tests: the event loop keeps running while the upstream is asked."""
        async with httpx.AsyncClient(timeout=timeout + 5) as http:
            reply = await http.get(f"{self.base}/control/events", params=self._event_query(kind, tag, timeout))
        return bool(reply.raise_for_status().json()["seen"])

    def events(self) -> list[tuple[str, str]]:
        """Every ``(kind, tag)`` recorded so far, in order."""
        reply = httpx.get(f"{self.base}/control/events", timeout=WAIT_SECONDS)
        return [(event["kind"], event["tag"]) for event in reply.raise_for_status().json()["events"]]

    def add_tool(self, name: str, description: str | None = None, argument: str = "text") -> None:
        """Register a tool ``name`` (echoes ``text``, or ``message`` with ``argument="message"``;
        ``description``: its own, else a default one), replacing one of that name, and announce
        ``tools/list_changed`` (blocking)."""
        body = {
            "name": name,
            "argument": argument,
            **({"description": description} if description is not None else {}),
        }
        httpx.post(f"{self.base}/control/tools", json=body, timeout=WAIT_SECONDS).raise_for_status()

    async def add_tool_async(self, name: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_SECONDS) as http:
            (await http.post(f"{self.base}/control/tools", json={"name": name})).raise_for_status()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["stateful", "stateless"], required=True)
    parser.add_argument("--oauth", help="CLIENT_ID:SECRET: require OAuth tokens this process issues to that client")
    parser.add_argument("--authorization", help="answer 401 to an MCP request without this Authorization value")
    args = parser.parse_args(argv)
    # Logging and sampling are deprecated as of 2026-07-28 but are exactly what the federation relays; an upstream
    # that still uses them is the case to test. Set here, not at import: the test process imports this module.
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    oauth = None
    if args.oauth:
        client_id, _, secret = args.oauth.partition(":")
        oauth = ClientCredentials(f"http://127.0.0.1:{args.port}", client_id, secret)
    server, _ = build(args.mode, oauth)
    app: Any = server.streamable_http_app(streamable_http_path=PATH, stateless_http=args.mode == "stateless")
    app = RedirectMoved(app)
    if args.authorization:
        app = RequireAuthorization(app, args.authorization)
    # A short graceful shutdown: open SSE and listen streams would otherwise hold up a terminate() (uvicorn waits).
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
