"""Agent grants at the wire, in both eras: a token limited to some tools, resources and prompts (or to read-only
tools) lists exactly its grant, and anything outside it answers exactly like a name that does not exist: same
HTTP status, same JSON-RPC code, same message and data shape.

The catalog: tools ``alpha`` (readOnlyHint: true), ``beta`` (no annotations), ``gamma`` (readOnlyHint: false)
and ``gated_job`` (a task-capable python tool, readOnlyHint: true); resources ``res://a``, ``res://b`` and the
template ``res://t/{id}``; prompts ``p1`` and ``p2`` (with completions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from mcp_app.models import AgentToken, Prompt, Resource, ServerPrompt, ServerResource, Tool
from mcp_app.protocol.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND
from tests.conftest import Access
from tests.helpers import DECLARING, call, error_of, modern_call, result_of, rpc, settled

LEGACY_VERSION = "2025-11-25"
TEXT = {"content": [{"type": "text", "text": "ok"}]}


@dataclass
class Granted:
    full: Access
    limited: Access  # alpha, gated_job; res://a and the template; p1
    read_only: Access  # every resource and prompt, read-only tools only
    nothing: Access  # limited to nothing at all
    tools: dict[str, Any]
    resources: dict[str, Any]
    prompts: dict[str, Any]


def build_catalog(access: Access) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    server, tenant = access.server, access.tenant
    from mcp_app.models import ServerTool

    tools = {
        "alpha": Tool.objects.create(
            tenant=tenant, name="alpha", static_result=TEXT, annotations={"readOnlyHint": True}
        ),
        "beta": Tool.objects.create(tenant=tenant, name="beta", static_result=TEXT),
        "gamma": Tool.objects.create(
            tenant=tenant, name="gamma", static_result=TEXT, annotations={"readOnlyHint": False}
        ),
        "gated_job": Tool.objects.create(
            tenant=tenant,
            name="gated_job",
            kind=Tool.Kind.PYTHON,
            python_name="gated_job",
            annotations={"readOnlyHint": True},
        ),
    }
    for position, tool in enumerate(tools.values()):
        ServerTool.objects.create(server=server, tool=tool, position=position)
    resources = {
        "res://a": Resource.objects.create(tenant=tenant, uri="res://a", name="a", text="A"),
        "res://b": Resource.objects.create(tenant=tenant, uri="res://b", name="b", text="B"),
        "res://t/{id}": Resource.objects.create(
            tenant=tenant, uri="res://t/{id}", name="t", is_template=True, text="T {id}"
        ),
    }
    for position, resource in enumerate(resources.values()):
        ServerResource.objects.create(server=server, resource=resource, position=position)
    arguments = [{"name": "style", "required": False, "completions": ["short", "shouty"]}]
    prompts = {
        name: Prompt.objects.create(
            tenant=tenant, name=name, arguments=arguments, messages=[{"role": "user", "content": name}]
        )
        for name in ("p1", "p2")
    }
    for position, prompt in enumerate(prompts.values()):
        ServerPrompt.objects.create(server=server, prompt=prompt, position=position)
    return tools, resources, prompts


def with_token(access: Access, **grant: Any) -> Access:
    token, raw = AgentToken.objects.issue_token(access.agent, servers=[access.server], **grant)
    return Access(tenant=access.tenant, server=access.server, agent=access.agent, token=token, raw_token=raw)


def build_granted(access_factory: Any) -> Granted:
    full = access_factory(tools=())
    tools, resources, prompts = build_catalog(full)
    full.server.refresh_from_db()
    limited = with_token(
        full,
        tools=[tools["alpha"], tools["gated_job"]],
        resources=[resources["res://a"], resources["res://t/{id}"]],
        prompts=[prompts["p1"]],
    )
    read_only = with_token(full, read_only=True)
    nothing = with_token(full, tools=[], resources=[], prompts=[])
    return Granted(full, limited, read_only, nothing, tools, resources, prompts)


@pytest.fixture
async def granted(transactional_db: Any, access_factory: Any, orm: Any) -> Granted:
    return await orm(build_granted, access_factory)


# ------------------------------------------------------------------------------------------- helpers


async def legacy(access: Access, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One session-less handshake-era request; the JSON-RPC response object (HTTP 200 asserted)."""
    reply = await call(access, rpc(method, params or {}), headers={"mcp-protocol-version": LEGACY_VERSION})
    assert reply.status == 200, reply.body
    return reply.json()


async def modern(access: Access, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    return await modern_call(access, method, params or {}, **kwargs)


def names(items: list[dict[str, Any]], key: str = "name") -> list[str]:
    return [item[key] for item in items]


async def lists(access: Access) -> dict[str, list[str]]:
    """What each list method shows, in both eras (asserted equal between eras)."""
    found: dict[str, list[str]] = {}
    for method, field, key in (
        ("tools/list", "tools", "name"),
        ("resources/list", "resources", "uri"),
        ("resources/templates/list", "resourceTemplates", "uriTemplate"),
        ("prompts/list", "prompts", "name"),
    ):
        old = names((await legacy(access, method))["result"][field], key)
        new_result = result_of(await modern(access, method))
        assert new_result["cacheScope"] == "private"  # a per-agent view must never be shared by caches
        assert names(new_result[field], key) == old, method
        found[method] = old
    return found


# --------------------------------------------------------------------------------------------- lists


async def test_each_token_lists_exactly_its_grant_in_both_eras(granted: Granted) -> None:
    assert await lists(granted.full) == {
        "tools/list": ["alpha", "beta", "gamma", "gated_job"],
        "resources/list": ["res://a", "res://b"],
        "resources/templates/list": ["res://t/{id}"],
        "prompts/list": ["p1", "p2"],
    }
    assert await lists(granted.limited) == {
        "tools/list": ["alpha", "gated_job"],
        "resources/list": ["res://a"],
        "resources/templates/list": ["res://t/{id}"],
        "prompts/list": ["p1"],
    }
    assert await lists(granted.read_only) == {
        "tools/list": ["alpha", "gated_job"],  # beta has no annotation, gamma says false
        "resources/list": ["res://a", "res://b"],
        "resources/templates/list": ["res://t/{id}"],
        "prompts/list": ["p1", "p2"],
    }
    assert await lists(granted.nothing) == {
        "tools/list": [],
        "resources/list": [],
        "resources/templates/list": [],
        "prompts/list": [],
    }


async def test_views_of_different_grants_are_never_served_from_one_another(granted: Granted) -> None:
    # Interleave the tokens on one warm process: each sees its own view every time, whoever asked first.
    for _ in range(2):
        for access, expected in (
            (granted.limited, ["alpha", "gated_job"]),
            (granted.full, ["alpha", "beta", "gamma", "gated_job"]),
            (granted.nothing, []),
            (granted.read_only, ["alpha", "gated_job"]),
        ):
            assert names((await legacy(access, "tools/list"))["result"]["tools"]) == expected


async def test_a_grant_edit_takes_effect_on_the_next_request(granted: Granted, orm: Any) -> None:
    assert names((await legacy(granted.limited, "tools/list"))["result"]["tools"]) == ["alpha", "gated_job"]
    await orm(granted.limited.token.granted_tools.add, granted.tools["beta"])
    assert names((await legacy(granted.limited, "tools/list"))["result"]["tools"]) == ["alpha", "beta", "gated_job"]


async def test_a_grant_survives_renaming_the_binding(granted: Granted, orm: Any) -> None:
    from mcp_app.models import ServerTool

    def rename() -> None:
        binding = ServerTool.objects.get(server=granted.full.server, tool=granted.tools["alpha"])
        binding.name_override = "alpha2"
        binding.save()

    await orm(rename)
    assert names((await legacy(granted.limited, "tools/list"))["result"]["tools"]) == ["alpha2", "gated_job"]


# ------------------------------------------------------------------------- outside the grant = unknown


def same_error(withheld: dict[str, Any], unknown: dict[str, Any], withheld_name: str, unknown_name: str) -> None:
    """Two JSON-RPC error objects that differ only by the name they mention."""
    assert withheld["code"] == unknown["code"]
    assert withheld["message"].replace(withheld_name, "X") == unknown["message"].replace(unknown_name, "X")
    assert str(withheld.get("data")).replace(withheld_name, "X") == str(unknown.get("data")).replace(unknown_name, "X")


LOOKUPS = [
    # method, params for a name, the name, the expected handshake-era code, the expected 2026 code
    ("tools/call", lambda n: {"name": n, "arguments": {}}, INVALID_PARAMS, INVALID_PARAMS),
    ("resources/read", lambda n: {"uri": n}, RESOURCE_NOT_FOUND, INVALID_PARAMS),
    ("prompts/get", lambda n: {"name": n}, INVALID_PARAMS, INVALID_PARAMS),
    (
        "completion/complete",
        lambda n: {"ref": {"type": "ref/prompt", "name": n}, "argument": {"name": "style", "value": "s"}},
        INVALID_PARAMS,
        INVALID_PARAMS,
    ),
    (
        "completion/complete",
        lambda n: {"ref": {"type": "ref/resource", "uri": n}, "argument": {"name": "id", "value": ""}},
        INVALID_PARAMS,
        INVALID_PARAMS,
    ),
]
WITHHELD = {
    "tools/call": ("beta", "no-such-tool"),
    "resources/read": ("res://b", "res://nope"),
    "prompts/get": ("p2", "no-such-prompt"),
}


@pytest.mark.parametrize(("method", "params", "legacy_code", "modern_code"), LOOKUPS)
async def test_outside_the_grant_answers_like_an_unknown_name(
    granted: Granted, method: str, params: Any, legacy_code: int, modern_code: int
) -> None:
    kind = params("x")
    if method == "completion/complete":
        withheld, unknown = ("p2", "nope") if kind["ref"]["type"] == "ref/prompt" else ("res://b", "res://nope")
    else:
        withheld, unknown = WITHHELD[method]
    # The full token may use it: the name exists on the server.
    assert "result" in await legacy(granted.full, method, params(withheld))
    old_withheld = (await legacy(granted.limited, method, params(withheld)))["error"]
    old_unknown = (await legacy(granted.limited, method, params(unknown)))["error"]
    assert old_withheld["code"] == legacy_code
    same_error(old_withheld, old_unknown, withheld, unknown)
    new_withheld = error_of(await modern(granted.limited, method, params(withheld)), 400, modern_code)
    new_unknown = error_of(await modern(granted.limited, method, params(unknown)), 400, modern_code)
    same_error(new_withheld, new_unknown, withheld, unknown)


async def test_granted_entries_work_in_both_eras(granted: Granted) -> None:
    for access in (granted.limited,):
        assert (await legacy(access, "tools/call", {"name": "alpha"}))["result"]["content"][0]["text"] == "ok"
        assert result_of(await modern(access, "tools/call", {"name": "alpha"}))["content"][0]["text"] == "ok"
        read = (await legacy(access, "resources/read", {"uri": "res://t/7"}))["result"]
        assert read["contents"][0]["text"] == "T 7"
        assert result_of(await modern(access, "resources/read", {"uri": "res://a"}))["contents"][0]["text"] == "A"
        prompt = result_of(await modern(access, "prompts/get", {"name": "p1"}))
        assert prompt["messages"]
        completion = (
            await legacy(
                access,
                "completion/complete",
                {"ref": {"type": "ref/prompt", "name": "p1"}, "argument": {"name": "style", "value": "sh"}},
            )
        )["result"]["completion"]
        assert completion["values"] == ["short", "shouty"]


async def test_a_read_only_token_cannot_call_a_writing_tool(granted: Granted) -> None:
    for tool in ("beta", "gamma"):
        withheld = (await legacy(granted.read_only, "tools/call", {"name": tool}))["error"]
        unknown = (await legacy(granted.read_only, "tools/call", {"name": "no-such-tool"}))["error"]
        same_error(withheld, unknown, tool, "no-such-tool")
        error_of(await modern(granted.read_only, "tools/call", {"name": tool}), 400, INVALID_PARAMS)
        assert "result" in await legacy(granted.full, "tools/call", {"name": tool})


async def test_subscribing_to_a_withheld_resource_is_unknown(granted: Granted) -> None:
    init = rpc(
        "initialize",
        {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    session = (await call(granted.limited, init)).headers["mcp-session-id"]
    headers = {"mcp-session-id": session}
    withheld = (await call(granted.limited, rpc("resources/subscribe", {"uri": "res://b"}), headers=headers)).json()
    unknown = (await call(granted.limited, rpc("resources/subscribe", {"uri": "res://z"}), headers=headers)).json()
    assert withheld["error"]["code"] == RESOURCE_NOT_FOUND
    same_error(withheld["error"], unknown["error"], "res://b", "res://z")
    granted_reply = (
        await call(granted.limited, rpc("resources/subscribe", {"uri": "res://a"}), headers=headers)
    ).json()
    assert granted_reply["result"] == {}


async def test_tasks_of_withheld_tools_are_unknown(granted: Granted, fresh_gate: Any) -> None:
    # The full token starts a task of gated_job; a token of the same agent without gated_job cannot see it.
    created = result_of(await modern(granted.full, "tools/call", {"name": "gated_job"}, capabilities=DECLARING))
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        extra = {"inputResponses": {}} if method == "tasks/update" else {}
        for access in (granted.nothing,):
            withheld = error_of(
                await modern(access, method, {"taskId": task_id, **extra}, capabilities=DECLARING), 400, INVALID_PARAMS
            )
            unknown = error_of(
                await modern(access, method, {"taskId": "no-such-task", **extra}, capabilities=DECLARING),
                400,
                INVALID_PARAMS,
            )
            same_error(withheld, unknown, task_id, "no-such-task")
    # A token granted gated_job sees (and here cancels) the agent's task.
    seen = result_of(await modern(granted.limited, "tasks/get", {"taskId": task_id}, capabilities=DECLARING))
    assert seen["status"] == "working"
    result_of(await modern(granted.limited, "tasks/cancel", {"taskId": task_id}, capabilities=DECLARING))
    await settled()


def test_grants_are_limited_to_the_agents_tenant(db: Any, access_factory: Any, tenant_factory: Any) -> None:
    access = access_factory(tools=())
    foreign = Tool.objects.create(tenant=tenant_factory(), name="foreign", static_result=TEXT)
    with pytest.raises(ValueError, match="catalog entries of its agent's tenant"):
        AgentToken.objects.issue_token(access.agent, servers=[access.server], tools=[foreign])


def test_an_unlimited_token_costs_no_query_for_its_grant(
    db: Any, access_factory: Any, django_assert_num_queries: Any
) -> None:
    access = access_factory(tools=())
    token = AgentToken.objects.get(pk=access.token.pk)
    with django_assert_num_queries(0):
        assert AgentToken.objects.catalog_grant(token).is_full
    limited, _raw = AgentToken.objects.issue_token(access.agent, tools=[])
    with django_assert_num_queries(3):
        grant = AgentToken.objects.catalog_grant(limited)
    assert grant.tools == frozenset() and grant.resources == frozenset() and not grant.is_full


async def test_listeners_never_hear_of_updates_to_withheld_resources(granted: Granted, orm: Any) -> None:
    from tests.helpers import communicator, modern_body, routing_headers, sse_messages

    uris = ["res://a", "res://b", "res://zzz"]  # granted, withheld, unknown
    body = modern_body("subscriptions/listen", {"notifications": {"resourceSubscriptions": uris}})
    comm = communicator(granted.limited, body, headers=routing_headers(body))
    await comm.send_input({"type": "http.request", "body": comm.body})
    assert (await comm.receive_output(timeout=5))["status"] == 200
    [ack] = sse_messages((await comm.receive_output(timeout=5))["body"])
    # The withheld URI is acknowledged exactly like the unknown one: nothing tells them apart.
    assert ack["params"]["notifications"]["resourceSubscriptions"] == sorted(uris)

    def edit(uri: str) -> None:
        resource = Resource.objects.get(pk=granted.resources[uri].pk)
        resource.text = f"{uri} v2"
        resource.save()

    await orm(edit, "res://b")  # first the withheld one: had it leaked, it would arrive first
    await orm(edit, "res://a")
    [event] = sse_messages((await comm.receive_output(timeout=5))["body"])
    assert event["method"] == "notifications/resources/updated"
    assert event["params"]["uri"] == "res://a"
    assert await comm.receive_nothing(timeout=0.2)
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)


async def test_the_admin_console_sees_the_tokens_grant_and_is_audited(granted: Granted, orm: Any) -> None:
    from mcp_app.models import ToolCall
    from mcp_app.runtime.audit import audit_log
    from mcp_app.transport.console import run_as

    withheld = await run_as(granted.limited.token, granted.full.server, "tools/call", {"name": "beta"})
    assert withheld.response is not None and withheld.response["error"]["code"] == INVALID_PARAMS
    allowed = await run_as(granted.limited.token, granted.full.server, "tools/call", {"name": "alpha"})
    assert allowed.response is not None and allowed.response["result"]["content"][0]["text"] == "ok"
    listed = await run_as(granted.limited.token, granted.full.server, "tools/list", {})
    assert names(listed.response["result"]["tools"]) == ["alpha", "gated_job"]
    assert await orm(audit_log.flush) == 2
    rows = await orm(lambda: list(ToolCall.objects.order_by("id").values_list("tool_name", "status", "token_prefix")))
    prefix = granted.limited.token.prefix
    assert rows == [("beta", "error", prefix), ("alpha", "ok", prefix)]


async def test_handshake_era_tasks_of_withheld_tools_are_unknown(granted: Granted, fresh_gate: Any) -> None:
    # 2025-11-25 experimental tasks: the same rule, on tasks/get, tasks/result, tasks/cancel and tasks/list.
    created = await legacy(granted.full, "tools/call", {"name": "gated_job", "task": {}})
    task_id = created["result"]["task"]["taskId"]
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        withheld = (await legacy(granted.nothing, method, {"taskId": task_id}))["error"]
        unknown = (await legacy(granted.nothing, method, {"taskId": "no-such-task"}))["error"]
        assert withheld["code"] == unknown["code"] == INVALID_PARAMS
        same_error(withheld, unknown, task_id, "no-such-task")
    assert (await legacy(granted.nothing, "tasks/list"))["result"] == {"tasks": []}
    listed = (await legacy(granted.limited, "tasks/list"))["result"]["tasks"]
    assert [(task["taskId"], task["status"]) for task in listed] == [(task_id, "working")]
    cancelled = await legacy(granted.limited, "tasks/cancel", {"taskId": task_id})
    assert cancelled["result"]["status"] == "cancelled"
    await settled()
