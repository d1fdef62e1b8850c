"""Shared fixtures: factories for the domain objects (the token factory also returns the raw token)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

# The OAuth flow's fixtures (oauth_world, oauth) for tests/oauth, tests/transport and tests/e2e.
# Real upstream MCP servers (tests/federation/upstream_server.py) and failing endpoints, for every test.
# The project's own pytest plugin (mcp_app.testing: mcp_client, mcp_modern_client, ...), as users enable it.
pytest_plugins = ["tests.oauth_flow", "tests.upstreams", "mcp_app.testing"]

REQUIRE_SERVICES = os.environ.get("MCP_REQUIRE_SERVICES") == "1"
# The test process imports mcp_host.asgi (in-process transport tests): no periodic sweep of records there (it
# would judge the tests' own records). The daphne processes of the end-to-end tests sweep (they drop this).
os.environ["MCP_LIVENESS_SWEEP"] = "0"


def require_redis() -> str:
    """The test Redis (``settings.REDIS_URL``): a test that needs it skips without it, and fails under
    ``MCP_REQUIRE_SERVICES=1`` (CI)."""
    from django.conf import settings

    if not settings.REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not set")
        pytest.skip("needs REDIS_URL")
    return str(settings.REDIS_URL)


@dataclass
class Access:
    """Everything a test needs to call one server as one agent."""

    tenant: Any
    server: Any
    agent: Any
    token: Any
    raw_token: str

    @property
    def path(self) -> str:
        return f"/mcp/{self.server.server_id}"

    @property
    def query(self) -> str:
        return f"agentId={self.agent.agent_id}"

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return [
            (b"authorization", f"Bearer {self.raw_token}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
        ]


@pytest.fixture
def tenant_factory(db: Any) -> Callable[..., Any]:
    from mcp_app.models import Tenant

    counter = iter(range(1, 10_000))

    def make(slug: str | None = None, **fields: Any) -> Tenant:
        slug = slug or f"tenant-{next(counter)}"
        # Tests bind the registered tools freely; the allow-list itself is tested with explicit lists.
        fields.setdefault("allowed_python_tools", ["*"])
        return Tenant.objects.create(slug=slug, name=fields.pop("name", slug.title()), **fields)

    return make


# Server ids are unique across the whole run, not per test: processes outside the test (daphne) cache servers by
# id, and the test database is emptied between tests behind the ORM's back (no signals, so no invalidation).
_server_numbers = itertools.count(1)


@pytest.fixture
def server_factory(tenant_factory: Callable[..., Any]) -> Callable[..., Any]:
    from mcp_app.models import McpServer

    counter = _server_numbers

    def make(tenant: Any = None, server_id: str | None = None, **fields: Any) -> McpServer:
        tenant = tenant or tenant_factory()
        server_id = server_id or f"server-{next(counter)}"
        return McpServer.objects.create(
            tenant=tenant, server_id=server_id, name=fields.pop("name", server_id), **fields
        )

    return make


@pytest.fixture
def agent_factory(tenant_factory: Callable[..., Any]) -> Callable[..., Any]:
    from mcp_app.models import Agent

    counter = iter(range(1, 10_000))

    def make(tenant: Any = None, agent_id: str | None = None, **fields: Any) -> Agent:
        tenant = tenant or tenant_factory()
        agent_id = agent_id or f"agent-{next(counter)}"
        return Agent.objects.create(tenant=tenant, agent_id=agent_id, name=fields.pop("name", agent_id), **fields)

    return make


@pytest.fixture
def token_factory(agent_factory: Callable[..., Any]) -> Callable[..., tuple[Any, str]]:
    from mcp_app.models import AgentToken

    def make(agent: Any = None, servers: list[Any] | None = None, **fields: Any) -> tuple[AgentToken, str]:
        return AgentToken.objects.issue_token(agent or agent_factory(), servers=servers, **fields)

    return make


@pytest.fixture
def tool_factory(db: Any) -> Callable[..., Any]:
    """Create a catalog tool and bind it to a server (python kind by default when the name is registered)."""
    from mcp_app.definitions.registry import registry
    from mcp_app.models import ServerTool, Tool

    def make(
        server: Any, name: str, *, position: int = 0, binding: dict[str, Any] | None = None, **fields: Any
    ) -> Tool:
        if "kind" not in fields:
            fields["kind"] = Tool.Kind.PYTHON if registry.get(name) else Tool.Kind.STATIC
        if fields["kind"] == Tool.Kind.PYTHON:
            fields.setdefault("python_name", name)
        tool = Tool.objects.create(tenant=server.tenant, name=name, **fields)
        ServerTool.objects.create(server=server, tool=tool, position=position, **(binding or {}))
        return tool

    return make


@pytest.fixture
def approval_factory(db: Any) -> Callable[..., Any]:
    """An approval request as a parked call leaves it: ``approval_factory(server, agent, "delete_file",
    {"path": "/x"})``, pending and expiring in an hour unless told (``expires_in`` seconds, any other field)."""
    from datetime import timedelta

    from django.utils import timezone

    from mcp_app.models import Approval
    from mcp_app.protocol.canonical import json_digest

    def make(
        server: Any, agent: Any, tool_name: str, arguments: dict[str, Any], *, expires_in: float = 3600, **fields: Any
    ) -> Approval:
        fields.setdefault("reason", "The tool requires approval.")
        return Approval.objects.create(
            tenant=server.tenant,
            server=server,
            agent=agent,
            tool_name=tool_name,
            arguments=arguments,
            arguments_digest=json_digest(arguments),
            expires_at=timezone.now() + timedelta(seconds=expires_in),
            **fields,
        )

    return make


@pytest.fixture
def oauth_user_of(db: Any) -> Callable[[Any, Any], Any]:
    """``oauth_user_of(agent, user)``: make ``agent`` the OAuth agent acting for ``user`` (as consenting to an
    OAuth client would), so that ``user`` is the calling agent's own person."""
    from oauth2_provider.models import get_application_model

    from mcp_app.models import OAuthAgent

    def make(agent: Any, user: Any) -> Any:
        application = get_application_model().objects.create(
            name=f"client of {agent.agent_id}",
            client_type="public",
            authorization_grant_type="authorization-code",
            redirect_uris="https://client.example/callback",
        )
        return OAuthAgent.objects.create(agent=agent, tenant=agent.tenant, user=user, application=application)

    return make


@pytest.fixture
def usage_factory(db: Any) -> Callable[..., Any]:
    """A row of the usage ledger, as its flusher would add it: ``usage_factory(tenant, agent, day, calls=40)``
    (``agent`` None: a row of no agent, e.g. a deleted one's; ``day`` None: today in the tenant's time zone)."""
    import zoneinfo

    from django.utils import timezone

    from mcp_app.models import UsageDay

    tools = iter(range(1, 10_000))

    def make(tenant: Any, agent: Any = None, day: Any = None, **counts: Any) -> Any:
        day = day or timezone.now().astimezone(zoneinfo.ZoneInfo(tenant.time_zone)).date()
        return UsageDay.objects.create(
            tenant=tenant,
            agent=agent,
            agent_key=agent.agent_id if agent is not None else "deleted-agent",
            server_key="server",
            tool_name=counts.pop("tool_name", f"tool-{next(tools)}"),
            day=day,
            **counts,
        )

    return make


@pytest.fixture
def access_factory(
    server_factory: Callable[..., Any],
    agent_factory: Callable[..., Any],
    token_factory: Callable[..., Any],
    tool_factory: Callable[..., Any],
) -> Callable[..., Access]:
    """A server exposing the demo tools, an agent, and a token scoped to the server."""

    def make(tools: tuple[str, ...] = ("echo", "add", "get_time", "progress_demo"), **server_fields: Any) -> Access:
        server = server_factory(**server_fields)
        for position, name in enumerate(tools):
            tool_factory(server, name, position=position)
        agent = agent_factory(tenant=server.tenant)
        token, raw = token_factory(agent=agent, servers=[server])
        server.refresh_from_db()
        return Access(tenant=server.tenant, server=server, agent=agent, token=token, raw_token=raw)

    return make


@pytest.fixture
def agent_access(agent_factory: Callable[..., Any], token_factory: Callable[..., Any]) -> Callable[[Access], Access]:
    """Another agent of ``access``'s tenant, with a token for the same server."""

    def make(access: Access) -> Access:
        agent = agent_factory(tenant=access.tenant)
        token, raw = token_factory(agent=agent, servers=[access.server])
        return Access(tenant=access.tenant, server=access.server, agent=agent, token=token, raw_token=raw)

    return make


@pytest.fixture(autouse=True, scope="session")
def _register_test_tools() -> None:
    import tests.tools  # noqa: F401  (registers the test-only tools)


@pytest.fixture
def use_backend() -> Any:
    """``use_backend(name, backend)``: this test's backend of shared state (``mcp_app.backends.set``), whatever
    the settings; after the test the name is the settings' again (and the test's backend stopped, if it runs a
    thread). Returns ``backend``."""
    from mcp_app.backends import backends

    used: set[str] = set()

    def use(name: str, backend: Any) -> Any:
        backends.set(name, backend)
        used.add(name)
        return backend

    yield use
    for name in used:
        stop = getattr(backends.set(name, None), "stop", None)
        if stop is not None:
            stop()


@pytest.fixture
def fresh_gate() -> Any:
    import tests.tools

    tests.tools.gate = tests.tools.Gate()
    return tests.tools


@pytest.fixture(autouse=True)
def _fresh_catalog_cache() -> Any:
    """Test databases reuse primary keys after rollbacks; never let one test see another's resolved catalog or
    cached identities, nor write another's last-used stamps."""
    from mcp_app.caching import identity, writebehind
    from mcp_app.catalog.resolver import clear_cache

    clear_cache()
    identity.clear()
    yield
    writebehind.discard()  # this test's rows go with its database


@pytest.fixture(autouse=True, scope="session")
def _flush_beside_live_processes() -> Any:
    """Transactional tests end with a flush (one ``TRUNCATE`` of every table) while the daphne and worker processes
    of the end-to-end tests still serve the test database: an audit flush there can deadlock with the
    ``TRUNCATE`` (PostgreSQL then aborts one of the two), and on a slow disk the ``TRUNCATE`` can outlast the
    product's ``statement_timeout``. So the flush runs without that timeout and is retried after a deadlock; any
    other failure still fails the test."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush
    from django.db import OperationalError, connections

    handle = flush.Command.handle

    def patient(self: Any, **options: Any) -> Any:
        connection = connections[options["database"]]
        postgres = connection.vendor == "postgresql"
        for attempt in itertools.count(1):
            if postgres:
                with connection.cursor() as cursor:
                    cursor.execute("SET statement_timeout = 0")
            try:
                return handle(self, **options)
            except CommandError as failed:
                if attempt == 3 or not isinstance(failed.__cause__, OperationalError):
                    raise
            finally:
                if postgres and connection.connection is not None:
                    with connection.cursor() as cursor:
                        cursor.execute("RESET statement_timeout")
        return None

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush.Command, "handle", patient)
        yield


@pytest.fixture(autouse=True)
def _manual_audit_flush() -> Any:
    """The audit buffer is flushed by hand in tests (a background thread could not see a test's transaction);
    tests of the flusher itself start it. Nothing buffered leaks from one test into the next, nor what the budget
    meter buffered (written to counters no other test reads, or at exit to a database that is gone)."""
    from mcp_app.limits.budget_meter import meter
    from mcp_app.runtime.audit import audit_log

    audit_log.autostart = False
    audit_log.clear()
    meter.clear()
    yield audit_log
    audit_log.clear()
    meter.clear()


@pytest.fixture
def member_factory(db: Any) -> Callable[..., Any]:
    """A user and, for each ``(tenant, role)`` given, a membership; no group and no model permission: the role
    alone is what the admin and the API go by (and a membership makes its user staff)."""
    from django.contrib.auth import get_user_model

    from mcp_app.models import TenantMembership

    counter = iter(range(1, 10_000))

    def make(*memberships: tuple[Any, str], username: str | None = None, **fields: Any) -> Any:
        username = username or f"member-{next(counter)}"
        fields.setdefault("is_staff", True)
        # No password unless asked for: hashing one costs more than the rest of a test (tests use force_login).
        user = get_user_model().objects.create_user(username=username, password=fields.pop("password", None), **fields)
        for tenant, role in memberships:
            TenantMembership.objects.create(tenant=tenant, user=user, role=role)
        return user

    return make


def catalog_records(server: Any, upstream: Any) -> dict[str, Any]:
    """A catalog version of ``server`` (a record: not the one it serves) and a change ``upstream`` made, held
    on it: rows as the versions' verbs and the sync write them, for the isolation matrices."""
    from mcp_app.models import CatalogChange, CatalogVersion

    number = (server.catalog_versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    definition = {"name": f"{upstream.prefix}search", "inputSchema": {"type": "object"}}
    version = CatalogVersion.objects.create(
        tenant=server.tenant, server=server, number=number, digest="0" * 64, entries=[], note="a record"
    )
    change = CatalogChange.objects.create(
        tenant=server.tenant,
        server=server,
        upstream=upstream,
        list_name="tools",
        key=definition["name"],
        change=CatalogChange.Change.ADDED,
        new=definition,
    )
    return {"mcp_app.catalogversion": version, "mcp_app.catalogchange": change}


def hold_upstream_change(server: Any, upstream: Any, before: str, after: str) -> Any:
    """An upstream tool on ``server``, published with the description ``before``; then its upstream says ``after``:
    the sync's two writes, the row's new definition and the ``CatalogChange`` that holds it (returned)."""
    from mcp_app.catalog.versions import publish
    from mcp_app.models import CatalogChange, ServerTool, Tool

    name = f"{upstream.prefix}search"
    tool = Tool.objects.create(
        tenant=server.tenant,
        name=name,
        kind=Tool.Kind.UPSTREAM,
        upstream=upstream,
        remote_name="search",
        description=before,
        input_schema={"type": "object"},
    )
    ServerTool.objects.create(server=server, tool=tool)
    version = publish(type(server).objects.get(pk=server.pk), note="the upstream as first read")
    (old,) = (entry["definition"] for entry in version.entries if entry["definition"]["name"] == name)
    Tool.objects.filter(pk=tool.pk).update(description=after)
    return CatalogChange.objects.create(
        tenant=server.tenant,
        server=server,
        upstream=upstream,
        list_name="tools",
        key=name,
        ref=tool.pk,
        change=CatalogChange.Change.CHANGED,
        old=old,
        new={**old, "description": after},
    )


@dataclass
class World:
    """One tenant with one object of every tenant-owned model, keyed by model label, and its people: an owner,
    an admin and a viewer (members by their role alone), plus the raw value of its token."""

    tenant: Any
    objects: dict[str, Any]
    users: dict[str, Any]
    raw_token: str
    access: Access

    def __getitem__(self, label: str) -> Any:
        return self.objects[label if "." in label else f"mcp_app.{label}"]


@pytest.fixture
def world_factory(access_factory: Callable[..., Access], member_factory: Callable[..., Any]) -> Callable[..., World]:
    """``world_factory("acme")``: a tenant with a server exposing a static tool, a resource and a prompt, an
    agent with a token, a session, a task, an upstream (never synced) bound to the server, a pending approval, and
    owner/admin/viewer members (usernames ``<slug>-<role>``)."""
    from mcp_app.models import (
        Approval,
        McpSession,
        Prompt,
        Resource,
        ServerPrompt,
        ServerResource,
        Tenant,
        ToolTask,
        Upstream,
        UpstreamBinding,
    )

    def make(slug: str) -> World:
        tenant = Tenant.objects.create(slug=slug, name=slug.title(), allowed_python_tools=["*"])
        access = access_factory(
            tools=(f"{slug}-lookup",), tenant=tenant, server_id=f"{slug}-server", name=f"{slug}-server"
        )
        tool = access.server.tool_bindings.get().tool
        tool.static_result = {"content": [{"type": "text", "text": f"{slug} says hi"}]}
        tool.save()
        resource = Resource.objects.create(tenant=tenant, uri=f"file:///{slug}.txt", name=f"{slug}-readme", text="hi")
        prompt = Prompt.objects.create(
            tenant=tenant,
            name=f"{slug}-greet",
            messages=[{"role": "user", "content": {"type": "text", "text": "Hello"}}],
        )
        session, _ = McpSession.objects.open_session(
            server=access.server, agent=access.agent, protocol_version="2025-11-25"
        )
        task = ToolTask.objects.create_task(
            server=access.server, agent=access.agent, tool_name=tool.name, arguments={}, ttl_ms=600_000
        )
        users = {
            role: member_factory((tenant, role), username=f"{slug}-{role}") for role in ("owner", "admin", "viewer")
        }
        upstream = Upstream.objects.create(
            tenant=tenant, name=f"{slug}-upstream", url=f"https://mcp.{slug}.example/mcp", prefix=f"{slug}_"
        )
        objects = {
            "mcp_app.tenant": tenant,
            "mcp_app.tenantmembership": users["viewer"].mcp_memberships.get(),
            "mcp_app.mcpserver": access.server,
            "mcp_app.agent": access.agent,
            "mcp_app.agenttoken": access.token,
            "mcp_app.tool": tool,
            "mcp_app.servertool": access.server.tool_bindings.get(),
            "mcp_app.resource": resource,
            "mcp_app.serverresource": ServerResource.objects.create(server=access.server, resource=resource),
            "mcp_app.prompt": prompt,
            "mcp_app.serverprompt": ServerPrompt.objects.create(server=access.server, prompt=prompt),
            "mcp_app.mcpsession": session,
            "mcp_app.tooltask": task,
            "mcp_app.upstream": upstream,
            "mcp_app.upstreambinding": UpstreamBinding.objects.create(upstream=upstream, server=access.server),
            "mcp_app.approval": Approval.objects.create(
                tenant=tenant,
                server=access.server,
                agent=access.agent,
                tool_name=tool.name,
                arguments={"city": "Paris"},
                arguments_digest="0" * 64,
                expires_at=task.expires_at,
            ),
            **catalog_records(access.server, upstream),
        }
        return World(tenant=tenant, objects=objects, users=users, raw_token=access.raw_token, access=access)

    return make
