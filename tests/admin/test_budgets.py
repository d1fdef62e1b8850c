"""Budgets in the admin: Globex's staff see and change only Globex's budgets, alerts and alert webhook; a tenant
admin adds and edits the tenant's own budgets but cannot raise or delete the operator's (change and delete posts
refused, bulk delete skips them), while a superuser can, and a superuser's new budget is the operator's; the hook's
secret is shown once; ``Tenant.time_zone`` is the operator's; ``Tool.price`` is edited with the tool; and the
usage page draws each budget's burn-down from rows of the usage ledger inserted here (40 of 50 calls: 80 %)."""

from __future__ import annotations

import html
import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from mcp_app.models import Budget, BudgetAlert, BudgetAlertHook, Tenant

LIMITS = ("calls_per_day", "calls_per_month", "tool_seconds_per_day", "tool_seconds_per_month", "cost_per_day")


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mcp_app_{model}_{view}", args=args)


def text(response: Any) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


def form(tenant: Any, agent: Any = None, **values: Any) -> dict[str, Any]:
    """A budget form as posted: every limit empty unless given."""
    data = {"tenant": tenant.pk, "agent": agent.pk if agent is not None else "", "alert_percent": 80}
    return {**data, **dict.fromkeys((*LIMITS, "cost_per_month"), ""), **values}


@pytest.fixture
def budgets(acme: Any, globex: Any) -> dict[str, Budget]:
    return {
        "acme-operator": Budget.objects.create(tenant=acme.tenant, set_by="operator", calls_per_day=11),
        "acme-own": Budget.objects.create(tenant=acme.tenant, set_by="tenant", calls_per_day=12),
        "globex-operator": Budget.objects.create(tenant=globex.tenant, set_by="operator", calls_per_day=50),
        "globex-own": Budget.objects.create(tenant=globex.tenant, set_by="tenant", calls_per_day=40),
    }


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_staff_see_only_their_tenants_budgets_alerts_and_hook(
    acme: Any, globex: Any, login: Any, budgets: dict[str, Budget], role: str
) -> None:
    alerts = {
        world.tenant.slug: BudgetAlert.objects.create(
            tenant=world.tenant,
            budget=budgets[f"{world.tenant.slug}-operator"],
            metric="calls",
            period="day",
            period_start="2026-12-05",
            percent=80,
            used=40,
            limit=50,
        )
        for world in (acme, globex)
    }
    hooks = {}
    for world in (acme, globex):
        hook = BudgetAlertHook(tenant=world.tenant, url=f"https://{world.tenant.slug}.example.com/hook")
        hook.new_signing_secret()
        hook.save()
        hooks[world.tenant.slug] = hook
    client = login(globex.users[role])
    for model, mine, theirs in (
        (
            "budget",
            [budgets["globex-operator"], budgets["globex-own"]],
            [budgets["acme-operator"], budgets["acme-own"]],
        ),
        ("budgetalert", [alerts["globex"]], [alerts["acme"]]),
        ("budgetalerthook", [hooks["globex"]], [hooks["acme"]]),
    ):
        page = client.get(url(model, "changelist"))
        assert page.status_code == 200
        content = page.content.decode()
        assert all(url(model, "change", obj.pk) in content for obj in mine), model
        assert not any(url(model, "change", obj.pk) in content for obj in theirs), model
        assert "acme" not in content.lower()
        for obj in theirs:
            assert client.get(url(model, "change", obj.pk)).status_code == 404
            assert client.post(url(model, "change", obj.pk), {}).status_code == 404
            assert client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 404
    assert Budget.objects.filter(tenant=acme.tenant).count() == 2
    assert BudgetAlertHook.objects.get(tenant=acme.tenant).url == "https://acme.example.com/hook"


def test_a_tenant_admin_writes_only_the_tenants_own_budgets(
    globex: Any, login: Any, budgets: dict[str, Budget]
) -> None:
    client = login(globex.users["admin"])
    operators, own = budgets["globex-operator"], budgets["globex-own"]

    # The operator's budget: shown read-only, neither raised nor deleted, by form or by bulk action.
    page = client.get(url("budget", "change", operators.pk))
    assert page.status_code == 200 and 'name="calls_per_day"' not in page.content.decode()
    assert "Burn-down on the usage page" in page.content.decode()
    raised = client.post(url("budget", "change", operators.pk), form(globex.tenant, calls_per_day=1_000_000))
    assert raised.status_code == 403
    assert client.post(url("budget", "delete", operators.pk), {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": [operators.pk, own.pk], "post": "yes"}
    assert client.post(url("budget", "changelist"), bulk).status_code == 302
    operators.refresh_from_db()
    assert operators.calls_per_day == 50
    assert not Budget.objects.filter(pk=own.pk).exists()  # theirs went, the operator's stayed

    # Their own: added (always set by the tenant, whatever is posted), changed, one per scope.
    added = client.post(url("budget", "add"), form(globex.tenant, calls_per_day=30, set_by="operator"))
    assert added.status_code == 302, text(added)
    new = Budget.objects.get(tenant=globex.tenant, set_by="tenant")
    assert (new.agent, new.calls_per_day) == (None, 30)
    again = client.post(url("budget", "add"), form(globex.tenant, calls_per_day=20))
    assert again.status_code == 200
    assert "The tenant's admins already set a budget of the whole tenant: change that one." in text(again)
    agent = globex.access.agent
    assert client.post(url("budget", "add"), form(globex.tenant, agent, calls_per_month=900)).status_code == 302
    changed = client.post(url("budget", "change", new.pk), form(globex.tenant, calls_per_day=25, alert_percent=90))
    assert changed.status_code == 302, text(changed)
    new.refresh_from_db()
    assert (new.calls_per_day, new.alert_percent, new.set_by) == (25, 90, "tenant")


def test_an_agent_of_another_tenant_is_not_offered(acme: Any, globex: Any, login: Any) -> None:
    client = login(globex.users["admin"])
    page = client.get(url("budget", "add")).content.decode()
    assert f'value="{globex.access.agent.pk}"' in page and f'value="{acme.access.agent.pk}"' not in page
    refused = client.post(url("budget", "add"), form(globex.tenant, acme.access.agent, calls_per_day=1))
    assert refused.status_code == 200 and "Select a valid choice" in text(refused)
    assert not Budget.objects.exists()


def test_superusers_change_everything_and_their_budgets_are_the_operators(
    globex: Any, admin_client: Any, budgets: dict[str, Budget]
) -> None:
    operators = budgets["globex-operator"]
    add = admin_client.get(url("budget", "add")).content.decode()
    assert re.search(r'<option value="operator" selected>', add)
    raised = admin_client.post(
        url("budget", "change", operators.pk), form(globex.tenant, calls_per_day=500, set_by="operator")
    )
    assert raised.status_code == 302, text(raised)
    operators.refresh_from_db()
    assert operators.calls_per_day == 500
    added = admin_client.post(
        url("budget", "add"), form(globex.tenant, globex.access.agent, calls_per_day=5, set_by="operator")
    )
    assert added.status_code == 302, text(added)
    assert Budget.objects.get(agent=globex.access.agent).set_by == "operator"
    assert admin_client.post(url("budget", "delete", operators.pk), {"post": "yes"}).status_code == 302
    assert not Budget.objects.filter(pk=operators.pk).exists()


def test_alerts_are_read_only(globex: Any, login: Any, admin_client: Any, budgets: dict[str, Budget]) -> None:
    alert = BudgetAlert.objects.create(
        tenant=globex.tenant,
        budget=budgets["globex-own"],
        metric="cost",
        period="month",
        period_start="2026-12-01",
        percent=80,
        used=8,
        limit=10,
    )
    for client in (login(globex.users["admin"]), admin_client):
        assert client.get(url("budgetalert", "add")).status_code == 403
        assert client.post(url("budgetalert", "delete", alert.pk), {"post": "yes"}).status_code == 403
        page = client.get(url("budgetalert", "change", alert.pk)).content.decode()
        assert 'name="used"' not in page and "_save" not in page
    assert BudgetAlert.objects.filter(pk=alert.pk, used=8).exists()


def test_the_hooks_secret_is_shown_once(globex: Any, login: Any) -> None:
    client = login(globex.users["admin"])
    added = client.post(
        url("budgetalerthook", "add"),
        {"tenant": globex.tenant.pk, "url": "https://hooks.example.com/b", "is_active": "on"},
        follow=True,
    )
    assert added.status_code == 200
    hook = BudgetAlertHook.objects.get(tenant=globex.tenant)
    secret = hook.signing_secret()
    shown = [str(message) for message in get_messages(added.wsgi_request)] + [text(added)]
    assert any(secret in message for message in shown)
    page = client.get(url("budgetalerthook", "change", hook.pk)).content.decode()
    assert secret not in page and hook.signing_secret_encrypted not in page
    assert "shown once" in page

    refused = client.post(
        url("budgetalerthook", "change", hook.pk), {"url": "http://127.0.0.1:8080/", "is_active": "on"}
    )
    assert refused.status_code == 200 and "loopback" in text(refused).lower()

    rotated = client.post(
        url("budgetalerthook", "changelist"),
        {"action": "rotate_secrets", "_selected_action": [hook.pk]},
        follow=True,
    )
    hook.refresh_from_db()
    assert hook.signing_secret() != secret and hook.signing_secret() in text(rotated)
    viewer = login(globex.users["viewer"])
    before = hook.signing_secret()
    viewer.post(url("budgetalerthook", "changelist"), {"action": "rotate_secrets", "_selected_action": [hook.pk]})
    hook.refresh_from_db()
    assert hook.signing_secret() == before


def test_time_zone_is_the_operators_and_price_the_tools(globex: Any, login: Any, admin_client: Any) -> None:
    owner = login(globex.users["owner"])
    page = owner.get(url("tenant", "change", globex.tenant.pk)).content.decode()
    assert 'name="time_zone"' not in page and "UTC" in page
    owner.post(url("tenant", "change", globex.tenant.pk), {"name": "Globex", "time_zone": "Asia/Tokyo"})
    assert Tenant.objects.get(pk=globex.tenant.pk).time_zone == "UTC"

    operator_page = admin_client.get(url("tenant", "change", globex.tenant.pk)).content.decode()
    assert 'name="time_zone"' in operator_page

    tool = globex["tool"]
    admin = login(globex.users["admin"])
    assert 'name="price"' in admin.get(url("tool", "change", tool.pk)).content.decode()


def test_the_usage_page_draws_each_budgets_burn_down(
    acme: Any, globex: Any, login: Any, usage_factory: Any, budgets: dict[str, Budget]
) -> None:
    agent = globex.access.agent
    usage_factory(globex.tenant, agent, calls=40, cost=Decimal("0.75"))
    usage_factory(globex.tenant, None, calls=5)
    usage_factory(acme.tenant, acme.access.agent, calls=999)
    Budget.objects.filter(pk=budgets["globex-own"].pk).update(
        agent=agent, calls_per_day=50, cost_per_month=Decimal("3")
    )
    client = login(globex.users["viewer"])
    page = client.get(url("toolcall", "usage") + f"?tenant={globex.tenant.pk}")
    assert page.status_code == 200
    content = page.content.decode()
    rows = re.findall(r'data-budget="(\d+)"', content)
    assert [int(pk) for pk in rows] == [budgets["globex-operator"].pk, budgets["globex-own"].pk]

    def line(budget: Budget, metric: str, period: str) -> str:
        block = content.split(f'data-budget="{budget.pk}"')[1].split("</tbody>")[0]
        return re.sub(r"\s+", " ", block.split(f'data-metric="{metric}" data-period="{period}"')[1].split("</tr>")[0])

    whole = line(budgets["globex-operator"], "calls", "day")
    assert '"num mcp-burn-used">45<' in whole and '"num mcp-burn-limit">50<' in whole
    assert 'aria-valuenow="90"' in whole and "mcp-burn-warn" in whole and ">90%<" in whole
    own = line(budgets["globex-own"], "calls", "day")
    assert '"num mcp-burn-used">40<' in own and 'aria-valuenow="80"' in own and ">80%<" in own
    cost = line(budgets["globex-own"], "cost", "month")
    assert '"num mcp-burn-used">0.75<' in cost and 'aria-valuenow="25"' in cost and "mcp-burn-warn" not in cost
    assert "Operator" in content and "Tenant admins" in content and "counted in UTC" in text(page)
    assert "999" not in content  # Acme's usage never counts here

    assert client.get(url("toolcall", "usage") + f"?tenant={acme.tenant.pk}").status_code == 404
    Budget.objects.filter(tenant=globex.tenant).delete()
    empty = client.get(url("toolcall", "usage") + f"?tenant={globex.tenant.pk}")
    assert "No budgets: nothing bounds this tenant" in text(empty)
