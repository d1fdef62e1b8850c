"""Worker-call quotas in the admin: who may set ``max_worker_calls`` (superusers on tenants, tenant admins on
agents), and the running calls shown on changelists and change pages, read from the quota backend (the local
one, and real Redis when ``REDIS_URL`` is set)."""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from mcp_app.limits import quotas
from mcp_app.models import Agent, Tenant
from tests.conftest import REQUIRE_SERVICES


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mcp_app_{model}_{view}", args=args)


def text(response: Any) -> str:
    """The page's text with tags and runs of whitespace collapsed, to find what an operator reads."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


@pytest.fixture(params=["local", "redis"])
def backend(request: pytest.FixtureRequest, use_backend: Any) -> Any:
    if request.param == "redis":
        if not django_settings.REDIS_URL:
            if REQUIRE_SERVICES:
                pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not configured")
            pytest.skip("needs REDIS_URL")
        prefix = f"mcp:test-quota:{secrets.token_hex(6)}"
        return use_backend("WORKER_QUOTAS", quotas.RedisQuotas(django_settings.REDIS_URL, prefix=prefix))
    return use_backend("WORKER_QUOTAS", quotas.LocalQuotas())


def hold(backend: Any, world: Any, count: int) -> None:
    """``count`` running worker calls of the world's agent (leases taken as the runner takes them)."""
    for index in range(count):
        call_id = f"{world.tenant.slug}-{index}"
        assert asyncio.run(backend.acquire(call_id, world.tenant.pk, world.access.agent.pk, 0, 0, 60.0)) is None


def test_changelists_and_change_pages_show_running_calls_against_the_limit(
    backend: Any, acme: Any, globex: Any, admin_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    Tenant.objects.filter(pk=acme.tenant.pk).update(max_worker_calls=3)
    Agent.objects.filter(pk=acme.access.agent.pk).update(max_worker_calls=0)
    hold(backend, acme, 2)
    reads: list[dict[str, Any]] = []
    running_calls = quotas.running_calls

    def counted(**scopes: Any) -> Any:
        reads.append({scope: list(pks) for scope, pks in scopes.items()})
        return running_calls(**scopes)

    monkeypatch.setattr(quotas, "running_calls", counted)

    page = text(admin_client.get(url("tenant", "changelist")))
    assert "Worker calls running" in page
    assert re.search(r"acme Acme .*2 of 3", page) and re.search(r"globex Globex .*0 of 50", page)
    assert len(reads) == 1, "a changelist reads every row's count in one round trip"
    assert sorted(reads[0]["tenants"]) == sorted([acme.tenant.pk, globex.tenant.pk])

    assert "2 of 3" in text(admin_client.get(url("tenant", "change", acme.tenant.pk)))
    agents = text(admin_client.get(url("agent", "changelist")))
    assert "2 (unlimited)" in agents and "0 of 20" in agents  # acme's agent: own 0; globex's: the setting
    assert "2 (unlimited)" in text(admin_client.get(url("agent", "change", acme.access.agent.pk)))

    quotas.release_call("acme-0")
    assert "1 of 3" in text(admin_client.get(url("tenant", "change", acme.tenant.pk)))


def test_the_pages_render_when_the_quota_backend_is_unreachable(use_backend: Any, acme: Any, admin_client: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    use_backend("WORKER_QUOTAS", quotas.RedisQuotas(f"redis://127.0.0.1:{port}/0"))
    response = admin_client.get(url("tenant", "change", acme.tenant.pk))
    assert response.status_code == 200
    assert "unknown of 50" in text(response)
    assert admin_client.get(url("agent", "changelist")).status_code == 200


def tenant_form(tenant: Tenant, **overrides: Any) -> dict[str, Any]:
    return {
        "name": tenant.name,
        "slug": tenant.slug,
        "is_active": "on",
        "allowed_python_tools": '["*"]',
        "max_worker_calls": "",
        "time_zone": tenant.time_zone,
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        **overrides,
    }


def agent_form(agent: Agent, **overrides: Any) -> dict[str, Any]:
    return {
        "agent_id": agent.agent_id,
        "name": agent.name,
        "is_active": "on",
        "max_worker_calls": "",
        "tokens-TOTAL_FORMS": "0",
        "tokens-INITIAL_FORMS": "0",
        **overrides,
    }


def test_only_superusers_set_a_tenants_limit(acme: Any, login: Any, admin_client: Any) -> None:
    owner = login(acme.users["owner"])
    response = owner.post(url("tenant", "change", acme.tenant.pk), tenant_form(acme.tenant, max_worker_calls="99"))
    assert response.status_code == 302
    assert Tenant.objects.get(pk=acme.tenant.pk).max_worker_calls is None, "an owner cannot raise its own quota"
    page = text(owner.get(url("tenant", "change", acme.tenant.pk)))
    assert "Concurrent worker calls" in page and "0 of 50" in page  # shown, read-only

    response = admin_client.post(
        url("tenant", "change", acme.tenant.pk), tenant_form(acme.tenant, max_worker_calls="4")
    )
    assert response.status_code == 302, text(response)
    assert Tenant.objects.get(pk=acme.tenant.pk).max_worker_calls == 4


def test_tenant_admins_set_their_agents_limit_and_viewers_cannot(acme: Any, globex: Any, login: Any) -> None:
    agent = acme.access.agent
    response = login(acme.users["admin"]).post(
        url("agent", "change", agent.pk), agent_form(agent, max_worker_calls="2")
    )
    assert response.status_code == 302, text(response)
    assert Agent.objects.get(pk=agent.pk).max_worker_calls == 2

    viewer = login(acme.users["viewer"]).post(url("agent", "change", agent.pk), agent_form(agent, max_worker_calls="9"))
    assert viewer.status_code == 403
    outsider = login(globex.users["admin"]).post(
        url("agent", "change", agent.pk), agent_form(agent, max_worker_calls="9")
    )
    assert outsider.status_code == 404  # another tenant's agent is unknown
    assert Agent.objects.get(pk=agent.pk).max_worker_calls == 2
