"""The MCP side of the isolation matrix: two tenants, each with a server, an agent, a full token and a
grant-limited token, and a catalog (tools, resources, a template, prompts, a task, a session) whose names are
distinct per tenant plus one name both use (``common``). Every MCP method of both eras is tried across the
boundary, and nothing crosses:

- another tenant's server, with any of our tokens and any HTTP method, is exactly the 404 of a server that does
  not exist; naming the other tenant's agent with our token is 403;
- on our own server, every method that takes a name, URI, task id or session id answers for the other tenant's
  one exactly as for a name that does not exist (the bodies are equal once the name is substituted), and every
  other method's answer mentions nothing of the other tenant;
- a grant-limited token sees exactly its grant, in both eras.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from mcp_app.models import AgentToken, McpSession, Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from mcp_app.protocol.handlers import dispatcher
from tests.conftest import Access
from tests.helpers import DECLARING, Reply, call, modern_body, routing_headers, rpc, settled

LEGACY_VERSION = "2025-11-25"
LEGACY_METHODS = sorted(dispatcher.methods("legacy"))
MODERN_METHODS = sorted(dispatcher.methods("modern"))
UNKNOWN = "zz-unknown"


@dataclass
class Side:
    """One tenant's half of the matrix."""

    prefix: str
    full: Access
    limited: Access  # granted: its own tool, its resource, its prompt; not "common" nor the task tool
    task_id: str = ""
    session_id: str = ""
    markers: list[str] = field(default_factory=list)

    @property
    def tool(self) -> str:
        return f"{self.prefix}_tool"

    @property
    def uri(self) -> str:
        return f"res://{self.prefix}/doc"

    @property
    def template(self) -> str:
        return f"res://{self.prefix}/items/{{id}}"

    @property
    def prompt(self) -> str:
        return f"{self.prefix}_prompt"


def build_side(access_factory: Any, prefix: str) -> Side:
    full = access_factory(tools=("gated_job",))
    tenant, server = full.tenant, full.server
    own = Tool.objects.create(
        tenant=tenant, name=f"{prefix}_tool", static_result={"content": [{"type": "text", "text": prefix}]}
    )
    common = Tool.objects.create(
        tenant=tenant, name="common", static_result={"content": [{"type": "text", "text": f"common of {prefix}"}]}
    )
    ServerTool.objects.create(server=server, tool=own, position=1)
    ServerTool.objects.create(server=server, tool=common, position=2)
    doc = Resource.objects.create(tenant=tenant, uri=f"res://{prefix}/doc", name=f"{prefix}-doc", text=prefix)
    items = Resource.objects.create(
        tenant=tenant, uri=f"res://{prefix}/items/{{id}}", name=f"{prefix}-items", is_template=True, text="{id}"
    )
    ServerResource.objects.create(server=server, resource=doc, position=0)
    ServerResource.objects.create(server=server, resource=items, position=1)
    prompt = Prompt.objects.create(
        tenant=tenant,
        name=f"{prefix}_prompt",
        arguments=[{"name": "style", "completions": [f"{prefix}-style"]}],
        messages=[{"role": "user", "content": prefix}],
    )
    ServerPrompt.objects.create(server=server, prompt=prompt, position=0)
    token, raw = AgentToken.objects.issue_token(
        full.agent, servers=[server], tools=[own], resources=[doc], prompts=[prompt]
    )
    server.refresh_from_db()
    full.server = server
    limited = Access(tenant=tenant, server=server, agent=full.agent, token=token, raw_token=raw)
    _session, session_id = McpSession.objects.open_session(
        server=server, agent=full.agent, protocol_version=LEGACY_VERSION
    )
    side = Side(prefix=prefix, full=full, limited=limited, session_id=session_id)
    side.markers = [
        side.tool,
        side.uri,
        f"res://{prefix}/items",
        side.prompt,
        f"{prefix}-style",
        f"common of {prefix}",
        server.server_id,
        full.agent.agent_id,
        tenant.slug,
    ]
    return side


@pytest.fixture
async def sides(transactional_db: Any, access_factory: Any, orm: Any, fresh_gate: Any) -> Any:
    ours = await orm(build_side, access_factory, "ours")
    theirs = await orm(build_side, access_factory, "theirs")
    # Each tenant has a durable task of its own.
    for side in (ours, theirs):
        reply = await post_modern(side.full, "tools/call", {"name": "gated_job", "arguments": {}})
        side.task_id = reply.json()["result"]["taskId"]
        side.markers.append(side.task_id)
    yield ours, theirs
    fresh_gate.gate.release.set()
    await settled()


# ----------------------------------------------------------------------------------------- requests


async def post_legacy(access: Access, method: str, params: dict[str, Any], **kwargs: Any) -> Reply:
    headers = {"mcp-protocol-version": LEGACY_VERSION, **kwargs.pop("headers", {})}
    return await call(access, rpc(method, params), headers=headers, **kwargs)


async def post_modern(access: Access, method: str, params: dict[str, Any], **kwargs: Any) -> Reply:
    body = modern_body(method, params, capabilities=DECLARING)
    headers = {**routing_headers(body), **kwargs.pop("headers", {})}
    return await call(access, body, headers=headers, **kwargs)


def legacy_params(method: str, ref: dict[str, str]) -> dict[str, Any] | None:
    """Params of ``method`` naming the objects in ``ref``; ``None`` for methods that take no name."""
    return {
        "tools/call": {"name": ref["tool"], "arguments": {}},
        "resources/read": {"uri": ref["uri"]},
        "resources/subscribe": {"uri": ref["uri"]},
        "prompts/get": {"name": ref["prompt"]},
        "completion/complete": {
            "ref": {"type": "ref/prompt", "name": ref["prompt"]},
            "argument": {"name": "style", "value": ""},
        },
        "tasks/get": {"taskId": ref["task"]},
        "tasks/cancel": {"taskId": ref["task"]},
        "tasks/update": {"taskId": ref["task"], "inputResponses": {}},
    }.get(method)


PLAIN_PARAMS: dict[str, dict[str, Any]] = {
    "initialize": {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    "logging/setLevel": {"level": "info"},
    "resources/unsubscribe": {"uri": "res://whatever"},
    "subscriptions/listen": {"notifications": {"toolsListChanged": True}},
}


def refs_of(side: Side) -> dict[str, str]:
    return {"tool": side.tool, "uri": side.uri, "prompt": side.prompt, "task": side.task_id}


UNKNOWN_REFS = {"tool": UNKNOWN, "uri": f"res://{UNKNOWN}", "prompt": UNKNOWN, "task": UNKNOWN}


def substituted(reply: Reply, names: list[str]) -> tuple[int, Any]:
    text = reply.body.decode()
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, "<NAME>")
    return reply.status, orjson.loads(text) if text.strip() else None


def mentions(reply: Reply, markers: list[str]) -> list[str]:
    text = reply.body.decode()
    return [marker for marker in markers if marker in text]


# ------------------------------------------------------------------------------ another tenant's server


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_another_tenants_server_is_an_unknown_server_for_every_method(sides: Any, era: str) -> None:
    ours, theirs = sides
    methods = LEGACY_METHODS if era == "legacy" else MODERN_METHODS
    post = post_legacy if era == "legacy" else post_modern
    for method in methods:
        params = legacy_params(method, refs_of(theirs)) or PLAIN_PARAMS.get(method, {})
        for token in (ours.full, ours.limited):
            crossing = await post(token, method, params, path=theirs.full.path)
            missing = await post(token, method, params, path="/mcp/no-such-server")
            assert crossing.status == 404, (method, crossing.body)
            assert (crossing.status, crossing.body) == (missing.status, missing.body), method
            assert not mentions(crossing, theirs.markers), method


async def test_get_and_delete_on_another_tenants_server_are_unknown_too(sides: Any) -> None:
    ours, theirs = sides
    for http_method in ("GET", "DELETE"):
        headers = {"mcp-session-id": theirs.session_id}
        crossing = await call(ours.full, method=http_method, path=theirs.full.path, headers=headers)
        missing = await call(ours.full, method=http_method, path="/mcp/no-such-server", headers=headers)
        assert crossing.status == 404
        assert crossing.body == missing.body
    # Their session survived our DELETE attempt.
    alive = await post_legacy(theirs.full, "ping", {}, headers={"mcp-session-id": theirs.session_id})
    assert alive.status == 200 and alive.json()["result"] == {}


async def test_our_token_cannot_speak_for_their_agent(sides: Any) -> None:
    ours, theirs = sides
    query = f"agentId={theirs.full.agent.agent_id}"
    for path in (theirs.full.path, ours.full.path):
        assert (await post_legacy(ours.full, "tools/list", {}, path=path, query=query)).status == 403
        assert (await post_modern(ours.full, "tools/list", {}, path=path, query=query)).status == 403


# ------------------------------------------------------------------------ their names on our own server


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("token", ["full", "limited"])
async def test_their_names_on_our_server_are_unknown_names_for_every_method(sides: Any, era: str, token: str) -> None:
    ours, theirs = sides
    access = getattr(ours, token)
    methods = LEGACY_METHODS if era == "legacy" else MODERN_METHODS
    post = post_legacy if era == "legacy" else post_modern
    session = {}
    if era == "legacy":
        init = await post_legacy(access, "initialize", PLAIN_PARAMS["initialize"])
        session = {"mcp-session-id": init.headers["mcp-session-id"]}
    their_names = [value for value in refs_of(theirs).values()]
    for method in methods:
        if method == "subscriptions/listen":
            continue  # a stream, not an answer: see test_their_catalog_edits_never_reach_our_listeners
        params = legacy_params(method, refs_of(theirs))
        if params is None:
            reply = await post(access, method, PLAIN_PARAMS.get(method, {}), headers=session)
            assert reply.status in (200, 202), (method, reply.body)
            assert not mentions(reply, theirs.markers), (method, reply.body)
            continue
        crossing = await post(access, method, params, headers=session)
        unknown = await post(access, method, legacy_params(method, UNKNOWN_REFS), headers=session)
        assert substituted(crossing, their_names) == substituted(unknown, list(UNKNOWN_REFS.values())), method
        assert "error" in crossing.json(), (method, crossing.body)


async def test_their_session_id_is_an_unknown_session_on_our_server(sides: Any) -> None:
    ours, theirs = sides
    for method in ("POST", "GET", "DELETE"):
        body = rpc("ping", {}) if method == "POST" else None
        theirs_reply = await call(ours.full, body, method=method, headers={"mcp-session-id": theirs.session_id})
        unknown_reply = await call(ours.full, body, method=method, headers={"mcp-session-id": "no-such-session"})
        assert theirs_reply.status == 404, method
        assert theirs_reply.body == unknown_reply.body
    alive = await post_legacy(theirs.full, "ping", {}, headers={"mcp-session-id": theirs.session_id})
    assert alive.status == 200


async def test_same_names_resolve_to_our_own_entries(sides: Any) -> None:
    ours, theirs = sides
    for side in (ours, theirs):
        old = (await post_legacy(side.full, "tools/call", {"name": "common"})).json()["result"]
        new = (await post_modern(side.full, "tools/call", {"name": "common"})).json()["result"]
        assert old["content"][0]["text"] == new["content"][0]["text"] == f"common of {side.prefix}"


async def test_lists_show_only_our_catalog_and_a_limited_token_only_its_grant(sides: Any) -> None:
    ours, theirs = sides
    expected = {
        "full": {
            "tools/list": ["gated_job", "ours_tool", "common"],
            "resources/list": ["res://ours/doc"],
            "resources/templates/list": ["res://ours/items/{id}"],
            "prompts/list": ["ours_prompt"],
        },
        "limited": {
            "tools/list": ["ours_tool"],
            "resources/list": ["res://ours/doc"],
            "resources/templates/list": [],
            "prompts/list": ["ours_prompt"],
        },
    }
    fields = {
        "tools/list": ("tools", "name"),
        "resources/list": ("resources", "uri"),
        "resources/templates/list": ("resourceTemplates", "uriTemplate"),
        "prompts/list": ("prompts", "name"),
    }
    for token, lists in expected.items():
        access = getattr(ours, token)
        for method, names in lists.items():
            key, attribute = fields[method]
            for post in (post_legacy, post_modern):
                reply = await post(access, method, {})
                assert [item[attribute] for item in reply.json()["result"][key]] == names, (token, method, post)
                assert not mentions(reply, theirs.markers)


async def test_a_limited_token_cannot_see_its_agents_task_of_an_ungranted_tool(sides: Any) -> None:
    ours, _theirs = sides
    withheld = await post_modern(ours.limited, "tasks/get", {"taskId": ours.task_id})
    unknown = await post_modern(ours.limited, "tasks/get", {"taskId": UNKNOWN})
    assert substituted(withheld, [ours.task_id]) == substituted(unknown, [UNKNOWN])
    assert (await post_modern(ours.full, "tasks/get", {"taskId": ours.task_id})).json()["result"]["status"] == "working"


async def test_their_catalog_edits_never_reach_our_listeners(sides: Any, orm: Any) -> None:
    from tests.helpers import communicator

    ours, theirs = sides
    body = modern_body("subscriptions/listen", PLAIN_PARAMS["subscriptions/listen"], capabilities=DECLARING)
    comm = communicator(ours.full, body, headers=routing_headers(body))
    await comm.send_input({"type": "http.request", "body": comm.body})
    start = await comm.receive_output(timeout=5)
    assert start["status"] == 200
    await comm.receive_output(timeout=5)  # the acknowledgement
    await orm(Tool.objects.filter(tenant=theirs.full.tenant, name="common").update, description="edited")

    def touch_theirs() -> None:
        ServerTool.objects.get(server=theirs.full.server, tool__name="common").save()

    await orm(touch_theirs)
    assert await comm.receive_nothing(timeout=0.3)

    def touch_ours() -> None:
        # A change of content: an edit that changes nothing publishes nothing, and announces nothing.
        Tool.objects.filter(tenant=ours.full.tenant, name="common").update(description="edited")
        ServerTool.objects.get(server=ours.full.server, tool__name="common").save()

    await orm(touch_ours)
    event = await comm.receive_output(timeout=5)
    assert b"notifications/tools/list_changed" in event["body"]
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
