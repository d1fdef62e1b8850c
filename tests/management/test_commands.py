"""Operator commands: mcp_bootstrap, mcp_issue_token, mcp_revoke_token, mcp_catalog.

Each is run through ``call_command`` and checked against the database and, for tokens, against
``AgentToken.objects.authenticate`` (what the endpoint uses), never against the command's own idea of success.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from mcp_app.models import Agent, AgentToken, McpServer, ServerTool, Tenant

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def bootstrap(*args: str) -> dict[str, Any]:
    return json.loads(run("mcp_bootstrap", "--json", *args)[0])


# mcp_bootstrap ---------------------------------------------------------------------------------------------


def test_bootstrap_creates_everything_and_a_working_token() -> None:
    result = bootstrap("--tenant", "acme", "--server", "orders", "--agent", "bot", "--tool", "echo", "--tool", "add")
    assert result["url"] == "http://127.0.0.1:8000/mcp/orders?agentId=bot"
    token = AgentToken.objects.authenticate(result["token"])
    assert token is not None and token.agent.agent_id == "bot"
    server = McpServer.objects.get(server_id="orders")
    assert server.tenant.slug == "acme"
    assert list(token.servers.all()) == [server]
    assert list(ServerTool.objects.filter(server=server).order_by("position").values_list("tool__name", flat=True)) == [
        "echo",
        "add",
    ]


def test_bootstrap_is_idempotent_and_shows_the_token_once() -> None:
    first = bootstrap("--tenant", "acme", "--tool", "echo")
    second = bootstrap("--tenant", "acme", "--tool", "echo", "--tool", "add")
    assert second["token"] is None
    assert second["token_prefix"] == first["token_prefix"]
    assert second["created"] == ["tool add"]
    assert Tenant.objects.filter(slug="acme").count() == 1
    assert Agent.objects.filter(tenant__slug="acme").count() == 1
    assert AgentToken.objects.filter(agent__tenant__slug="acme").count() == 1
    assert list(
        ServerTool.objects.filter(server__server_id="main").order_by("position").values_list("tool__name", flat=True)
    ) == ["echo", "add"]
    human, _ = run("mcp_bootstrap", "--tenant", "acme")
    assert "Everything already existed." in human
    assert first["token"] not in human


def test_bootstrap_rotate_revokes_the_old_token() -> None:
    first = bootstrap("--tenant", "acme")
    rotated = bootstrap("--tenant", "acme", "--rotate")
    assert rotated["token"] and rotated["token"] != first["token"]
    assert AgentToken.objects.authenticate(first["token"]) is None
    assert AgentToken.objects.authenticate(rotated["token"]) is not None


def test_bootstrap_refuses_unknown_tools_and_foreign_servers(server_factory: Any) -> None:
    with pytest.raises(CommandError, match="no @tool registered as nope"):
        run("mcp_bootstrap", "--tool", "nope")
    assert not Tenant.objects.filter(slug="default").exists()
    server_factory(server_id="taken")
    with pytest.raises(CommandError, match="belongs to another tenant"):
        run("mcp_bootstrap", "--tenant", "acme", "--server", "taken")


# mcp_issue_token / mcp_revoke_token ------------------------------------------------------------------------


@pytest.fixture
def setup(server_factory: Any, agent_factory: Any) -> dict[str, Any]:
    server = server_factory(server_id="orders")
    other = server_factory(tenant=server.tenant, server_id="billing")
    agent = agent_factory(tenant=server.tenant, agent_id="bot")
    stranger = server_factory(server_id="elsewhere")  # another tenant
    return {"tenant": server.tenant.slug, "server": server, "other": other, "agent": agent, "stranger": stranger}


def test_issue_token_prints_a_scoped_token_once(setup: dict[str, Any]) -> None:
    out, err = run("mcp_issue_token", "--tenant", setup["tenant"], "--agent", "bot", "--server", "orders")
    raw = out.strip()
    token = AgentToken.objects.authenticate(raw)
    assert token is not None
    assert list(token.servers.all()) == [setup["server"]]
    assert token.expires_at is None
    assert raw not in err and f"mcp_{token.prefix}_" in err


def test_issue_token_with_expiry_and_json(setup: dict[str, Any]) -> None:
    out, _ = run(
        "mcp_issue_token", "--tenant", setup["tenant"], "--agent", "bot", "--server", "orders",
        "--server", "billing", "--expires-in-days", "1", "--name", "ci", "--json",
    )  # fmt: skip
    data = json.loads(out)
    token = AgentToken.objects.authenticate(data["token"])
    assert token is not None and token.expires_at is not None and token.name == "ci"
    assert sorted(token.servers.values_list("server_id", flat=True)) == ["billing", "orders"]


def test_issue_token_stays_within_the_tenant(setup: dict[str, Any]) -> None:
    with pytest.raises(CommandError, match="no server 'elsewhere'"):
        run("mcp_issue_token", "--tenant", setup["tenant"], "--agent", "bot", "--server", "elsewhere")
    with pytest.raises(CommandError, match="no agent 'bot'"):
        run("mcp_issue_token", "--tenant", setup["stranger"].tenant.slug, "--agent", "bot", "--server", "elsewhere")
    assert AgentToken.objects.count() == 0


def test_revoke_by_prefix(setup: dict[str, Any], token_factory: Any) -> None:
    token, raw = token_factory(agent=setup["agent"], servers=[setup["server"]])
    _keep, keep_raw = token_factory(agent=setup["agent"], servers=[setup["server"]])
    out, _ = run("mcp_revoke_token", "--tenant", setup["tenant"], "--prefix", f"mcp_{token.prefix}_")
    assert out.strip() == "Revoked 1 token(s)."
    assert AgentToken.objects.authenticate(raw) is None
    assert AgentToken.objects.authenticate(keep_raw) is not None


def test_revoke_of_several_needs_all(setup: dict[str, Any], token_factory: Any) -> None:
    raws = [token_factory(agent=setup["agent"])[1] for _ in range(2)]
    with pytest.raises(CommandError, match="2 tokens match"):
        run("mcp_revoke_token", "--tenant", setup["tenant"], "--agent", "bot")
    assert all(AgentToken.objects.authenticate(raw) is not None for raw in raws)
    run("mcp_revoke_token", "--tenant", setup["tenant"], "--agent", "bot", "--all")
    assert all(AgentToken.objects.authenticate(raw) is None for raw in raws)


def test_revoke_never_crosses_tenants(setup: dict[str, Any], token_factory: Any, agent_factory: Any) -> None:
    foreign_agent = agent_factory(tenant=setup["stranger"].tenant, agent_id="bot")
    foreign, raw = token_factory(agent=foreign_agent)
    with pytest.raises(CommandError, match="no unrevoked token matches"):
        run("mcp_revoke_token", "--tenant", setup["tenant"], "--prefix", foreign.prefix)
    assert AgentToken.objects.authenticate(raw) is not None
    with pytest.raises(CommandError, match="name a token prefix"):
        run("mcp_revoke_token", "--tenant", setup["tenant"])


# mcp_catalog -----------------------------------------------------------------------------------------------


def test_catalog_shows_tools_in_order_for_an_agent(
    setup: dict[str, Any], tool_factory: Any, token_factory: Any
) -> None:
    tool_factory(setup["server"], "add", position=1)
    tool_factory(setup["server"], "echo", position=0)
    token_factory(agent=setup["agent"], servers=[setup["server"]])
    out, _ = run("mcp_catalog", "--tenant", setup["tenant"], "--server", "orders", "--agent", "bot", "--json")
    data = json.loads(out)
    assert [tool["name"] for tool in data["tools"]] == ["echo", "add"]
    assert data["tools"][0]["inputSchema"]["properties"]["text"]["type"] == "string"
    human, _ = run("mcp_catalog", "--tenant", setup["tenant"], "--server", "orders")
    assert "Tools (2):" in human and "  echo" in human and "Prompts (0):" in human


def test_catalog_refuses_an_agent_without_access(setup: dict[str, Any], token_factory: Any) -> None:
    token_factory(agent=setup["agent"], servers=[setup["other"]])
    with pytest.raises(CommandError, match="no usable token scoped to 'orders'"):
        run("mcp_catalog", "--tenant", setup["tenant"], "--server", "orders", "--agent", "bot")
    with pytest.raises(CommandError, match="no server 'elsewhere'"):
        run("mcp_catalog", "--tenant", setup["tenant"], "--server", "elsewhere")
