"""Fixtures of the API tests: two tenants, each with every role, an agent, a token and a full catalog."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

ROLES = ("owner", "admin", "viewer")


@dataclass
class TenantWorld:
    """One tenant with one of everything the API shows; its owner, admin and viewer are staff users holding the
    ``MCP tenant staff`` model permissions (so only their tenant role tells them apart)."""

    tenant: Any
    users: dict[str, Any]
    memberships: dict[str, Any]
    server: Any
    agent: Any
    token: Any
    raw_token: str
    tool: Any
    resource: Any
    prompt: Any
    server_tool: Any
    server_resource: Any
    server_prompt: Any
    session: Any
    tool_call: Any
    objects: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Users are made by the dozen here; the production hasher's cost is not what these tests measure."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def throttle_cache(settings: Any) -> str:
    """The API's throttles count in a cache of their own per test: the project's default cache (Redis when
    ``REDIS_URL`` is set) under a fresh key prefix, so no test inherits another's request history (primary keys
    repeat across test databases and runs). The default rates stay in force."""
    alias = "api-throttle-test"
    settings.CACHES = {**settings.CACHES, alias: {**settings.CACHES["default"], "KEY_PREFIX": uuid.uuid4().hex}}
    settings.MCP_APP = {**settings.MCP_APP, "API_THROTTLE_CACHE": alias}
    return alias


@pytest.fixture
def user_factory(db: Any) -> Callable[..., Any]:
    from django.contrib.auth import get_user_model

    counter = iter(range(1, 10_000))

    def make(username: str | None = None, **fields: Any) -> Any:
        username = username or f"user-{next(counter)}"
        return get_user_model().objects.create_user(username=username, password="pw-not-used-123", **fields)

    return make


@pytest.fixture
def key_client(user_factory: Callable[..., Any]) -> Callable[[Any], APIClient]:
    """An API client authenticated as ``user`` with a freshly issued personal API key."""
    from mcp_app.models import ApiKey

    def make(user: Any) -> APIClient:
        _, raw = ApiKey.objects.issue_key(user, name="tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


@pytest.fixture
def world_factory(
    tenant_factory: Callable[..., Any],
    server_factory: Callable[..., Any],
    agent_factory: Callable[..., Any],
    token_factory: Callable[..., Any],
    member_factory: Callable[..., Any],
) -> Callable[[str], TenantWorld]:
    from mcp_app.models import (
        Approval,
        McpSession,
        Prompt,
        Resource,
        ServerPrompt,
        ServerResource,
        ServerTool,
        TenantMembership,
        Tool,
        ToolCall,
    )

    def make(name: str) -> TenantWorld:
        tenant = tenant_factory(slug=name)
        users = {role: member_factory((tenant, role), username=f"{name}-{role}") for role in ROLES}
        memberships = {role: TenantMembership.objects.get(tenant=tenant, user=user) for role, user in users.items()}
        server = server_factory(tenant=tenant, server_id=f"{name}-server")
        agent = agent_factory(tenant=tenant, agent_id=f"{name}-agent")
        token, raw = token_factory(agent=agent, servers=[server], name=f"{name} token")
        tool = Tool.objects.create(
            tenant=tenant,
            name=f"{name}_tool",
            kind=Tool.Kind.STATIC,
            static_result={"content": [{"type": "text", "text": "ok"}]},
        )
        resource = Resource.objects.create(tenant=tenant, uri=f"file:///{name}/readme.md", name="readme", text="hi")
        prompt = Prompt.objects.create(
            tenant=tenant,
            name=f"{name}_prompt",
            messages=[{"role": "user", "content": {"type": "text", "text": "hello"}}],
        )
        server_tool = ServerTool.objects.create(server=server, tool=tool)
        server_resource = ServerResource.objects.create(server=server, resource=resource)
        server_prompt = ServerPrompt.objects.create(server=server, prompt=prompt)
        session, _ = McpSession.objects.open_session(server=server, agent=agent, protocol_version="2025-06-18")
        now = timezone.now()
        tool_call = ToolCall.objects.create(
            tenant=tenant,
            server=server,
            agent=agent,
            server_key=server.server_id,
            agent_key=agent.agent_id,
            token_prefix=token.prefix,
            tool_name=tool.name,
            arguments_digest="0" * 64,
            arguments={"city": "Paris", "api_key": "[redacted]"},
            status=ToolCall.Status.OK,
            started_at=now,
            finished_at=now,
            duration_ms=1.5,
            era="modern",
            protocol_version="2026-07-28",
        )
        approval = Approval.objects.create(
            tenant=tenant,
            server=server,
            agent=agent,
            tool_name=tool.name,
            arguments={"city": "Paris"},
            arguments_digest=hashlib.sha256(b'{"city":"Paris"}').hexdigest(),
            expires_at=now + timedelta(days=1),
        )
        world = TenantWorld(
            tenant=tenant,
            users=users,
            memberships=memberships,
            server=server,
            agent=agent,
            token=token,
            raw_token=raw,
            tool=tool,
            resource=resource,
            prompt=prompt,
            server_tool=server_tool,
            server_resource=server_resource,
            server_prompt=server_prompt,
            session=session,
            tool_call=tool_call,
        )
        world.objects = {
            "tenants": tenant,
            "memberships": memberships["viewer"],
            "servers": server,
            "tools": tool,
            "resources": resource,
            "prompts": prompt,
            "server-tools": server_tool,
            "server-resources": server_resource,
            "server-prompts": server_prompt,
            "agents": agent,
            "tokens": token,
            "sessions": session,
            "tool-calls": tool_call,
            "approvals": approval,
        }
        return world

    return make


@pytest.fixture
def two_tenants(world_factory: Callable[[str], TenantWorld]) -> tuple[TenantWorld, TenantWorld]:
    return world_factory("acme"), world_factory("globex")


# Every tenant-scoped resource list of /api/v1/ (the isolation matrix walks them; the API root lists them).
ENDPOINTS = (
    "tenants",
    "memberships",
    "servers",
    "tools",
    "resources",
    "prompts",
    "server-tools",
    "server-resources",
    "server-prompts",
    "agents",
    "tokens",
    "sessions",
    "tool-calls",
    "approvals",
)
