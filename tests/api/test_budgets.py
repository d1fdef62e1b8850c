"""``/api/v1/budgets/``, ``/api/v1/budget-alerts/`` and ``/api/v1/budget-alert-hook/`` as tenant members with
personal API keys, and as a superuser: the tenant admins' own budgets written, the operator's read-only to them
(403 on every write), another tenant's budgets, alerts and hook invisible (404, empty lists) and its agents refused
like missing ones (400); the hook's signing secret in the response that made or rotated it only; the burn-down
figures against rows of the usage ledger inserted here. Also ``Tool.price`` and ``Tenant.time_zone`` on the wire."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from mcp_app.models import Budget, BudgetAlert, BudgetAlertHook

BUDGETS = "/api/v1/budgets/"
ALERTS = "/api/v1/budget-alerts/"
HOOK = "/api/v1/budget-alert-hook/"


@pytest.fixture
def acme(two_tenants: Any) -> Any:
    return two_tenants[0]


@pytest.fixture
def globex(two_tenants: Any) -> Any:
    return two_tenants[1]


@pytest.fixture
def admin(acme: Any, key_client: Any) -> Any:
    return key_client(acme.users["admin"])


@pytest.fixture
def operator_budgets(acme: Any, globex: Any) -> dict[str, Budget]:
    return {
        "acme": Budget.objects.create(tenant=acme.tenant, set_by="operator", calls_per_day=100),
        "globex": Budget.objects.create(tenant=globex.tenant, set_by="operator", calls_per_day=7),
        "globex-own": Budget.objects.create(tenant=globex.tenant, set_by="tenant", calls_per_day=5),
    }


def error_code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_tenant_admins_write_their_own_budgets(acme: Any, admin: Any, usage_factory: Any) -> None:
    usage_factory(acme.tenant, acme.agent, calls=40, tool_seconds=3.0, cost=Decimal("0.5"))
    created = admin.post(
        BUDGETS,
        {"agent": acme.agent.pk, "calls_per_day": 50, "cost_per_month": "2.000000", "set_by": "operator"},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    budget = Budget.objects.get(pk=body["id"])
    # set_by is not theirs to choose: every budget written here is the tenant admins'.
    assert (budget.tenant, budget.agent, budget.set_by) == (acme.tenant, acme.agent, "tenant")
    assert body["set_by"] == "tenant" and body["tenant"] == acme.tenant.pk
    assert [(u["metric"], u["period"], u["used"], u["limit"], u["percent"]) for u in body["usage"]] == [
        ("calls", "day", 40.0, 50.0, 80.0),
        ("cost", "month", 0.5, 2.0, 25.0),
    ]

    url = f"{BUDGETS}{budget.pk}/"
    changed = admin.patch(url, {"calls_per_day": None, "tool_seconds_per_day": 6, "alert_percent": 50}, format="json")
    assert changed.status_code == 200, changed.content
    budget.refresh_from_db()
    assert (budget.calls_per_day, budget.tool_seconds_per_day, budget.alert_percent) == (None, 6.0, 50)
    assert changed.json()["usage"][0] == {
        **changed.json()["usage"][0],
        "metric": "tool_seconds",
        "used": 3.0,
        "percent": 50.0,
    }
    # The scope is fixed: an agent's budget never becomes the tenant's.
    assert admin.patch(url, {"agent": None}, format="json").status_code == 200
    budget.refresh_from_db()
    assert budget.agent == acme.agent

    for bad, field in (
        ({"alert_percent": 0}, "alert_percent"),
        ({"calls_per_day": -1}, "calls_per_day"),
        ({"cost_per_day": "0.0000001"}, "cost_per_day"),
    ):
        refused = admin.patch(url, bad, format="json")
        assert refused.status_code == 400 and field in refused.json()["error"]["fields"], refused.content

    whole = admin.post(BUDGETS, {"calls_per_month": 1000}, format="json")
    assert whole.status_code == 201 and whole.json()["agent"] is None
    again = admin.post(BUDGETS, {"calls_per_month": 5}, format="json")
    assert again.status_code == 400
    assert again.json()["error"]["fields"]["non_field_errors"] == [
        "Your admins already set a budget of the whole tenant: change that one."
    ]
    assert admin.delete(url).status_code == 204
    assert not Budget.objects.filter(pk=budget.pk).exists()


def test_the_operators_budgets_are_read_only_to_tenant_members(
    acme: Any, admin: Any, key_client: Any, operator_budgets: dict[str, Budget], user_factory: Any
) -> None:
    operators = operator_budgets["acme"]
    url = f"{BUDGETS}{operators.pk}/"
    listed = admin.get(BUDGETS).json()["results"]
    assert [(row["id"], row["set_by"]) for row in listed] == [(operators.pk, "operator")]
    assert admin.get(url).status_code == 200

    owner = key_client(acme.users["owner"])
    for client in (admin, owner):
        raised = client.patch(url, {"calls_per_day": 1_000_000}, format="json")
        assert raised.status_code == 403 and error_code(raised) == "permission_denied"
        put = client.put(url, {"calls_per_day": 1_000_000, "alert_percent": 80}, format="json")
        assert put.status_code == 403
        deleted = client.delete(url)
        assert deleted.status_code == 403 and error_code(deleted) == "permission_denied"
    operators.refresh_from_db()
    assert operators.calls_per_day == 100

    superuser = key_client(user_factory(is_superuser=True, is_staff=True))
    assert superuser.patch(url, {"calls_per_day": 200}, format="json").status_code == 200
    operators.refresh_from_db()
    assert operators.calls_per_day == 200
    assert superuser.delete(url).status_code == 204


def test_viewers_read_budgets_and_write_nothing(acme: Any, key_client: Any, operator_budgets: Any) -> None:
    viewer = key_client(acme.users["viewer"])
    own = Budget.objects.create(tenant=acme.tenant, calls_per_day=3)
    assert {row["id"] for row in viewer.get(BUDGETS).json()["results"]} == {own.pk, operator_budgets["acme"].pk}
    assert viewer.post(BUDGETS, {"tenant": acme.tenant.pk, "calls_per_day": 1}, format="json").status_code == 403
    assert viewer.patch(f"{BUDGETS}{own.pk}/", {"calls_per_day": 9}, format="json").status_code == 403
    assert viewer.delete(f"{BUDGETS}{own.pk}/").status_code == 403


def test_another_tenants_budgets_alerts_and_agents_stay_out_of_reach(
    acme: Any, globex: Any, admin: Any, operator_budgets: dict[str, Budget]
) -> None:
    for budget in (operator_budgets["globex"], operator_budgets["globex-own"]):
        url = f"{BUDGETS}{budget.pk}/"
        for response in (admin.get(url), admin.patch(url, {"calls_per_day": 1}, format="json"), admin.delete(url)):
            assert response.status_code == 404 and error_code(response) == "not_found"
    assert admin.get(f"{BUDGETS}?tenant={globex.tenant.pk}").json()["results"] == []
    assert Budget.objects.filter(tenant=globex.tenant).count() == 2

    # An agent of another tenant is refused exactly like one that does not exist.
    foreign = admin.post(BUDGETS, {"agent": globex.agent.pk, "calls_per_day": 1}, format="json")
    missing = admin.post(BUDGETS, {"agent": 987654, "calls_per_day": 1}, format="json")
    assert foreign.status_code == missing.status_code == 400
    assert foreign.json()["error"]["fields"]["agent"] == [
        message.replace("987654", str(globex.agent.pk)) for message in missing.json()["error"]["fields"]["agent"]
    ]
    # Nor can a budget be put into another tenant.
    elsewhere = admin.post(BUDGETS, {"tenant": globex.tenant.pk, "calls_per_day": 1}, format="json")
    assert elsewhere.status_code == 400 and "tenant" in elsewhere.json()["error"]["fields"]
    assert not Budget.objects.filter(tenant=globex.tenant, set_by="tenant", agent=globex.agent).exists()

    mine = BudgetAlert.objects.create(
        tenant=acme.tenant,
        budget=operator_budgets["acme"],
        metric="calls",
        period="day",
        period_start="2026-12-05",
        percent=80,
        used=80,
        limit=100,
    )
    theirs = BudgetAlert.objects.create(
        tenant=globex.tenant,
        budget=operator_budgets["globex"],
        metric="calls",
        period="day",
        period_start="2026-12-05",
        percent=80,
        used=6,
        limit=7,
    )
    listed = admin.get(ALERTS).json()["results"]
    assert [(row["id"], row["metric"], row["used"], row["limit"]) for row in listed] == [(mine.pk, "calls", 80, 100)]
    assert admin.get(f"{ALERTS}{theirs.pk}/").status_code == 404
    assert admin.get(f"{ALERTS}?tenant={globex.tenant.pk}").json()["results"] == []
    assert admin.delete(f"{ALERTS}{mine.pk}/").status_code == 405
    assert admin.post(ALERTS, {}, format="json").status_code == 405


def test_the_alert_hook_shows_its_secret_once(acme: Any, globex: Any, admin: Any, key_client: Any) -> None:
    assert admin.get(HOOK).status_code == 404
    created = admin.put(HOOK, {"url": "https://hooks.example.com/budgets"}, format="json")
    assert created.status_code == 201, created.content
    assert created["Cache-Control"] == "no-store"
    secret = created.json()["signing_secret"]
    hook = BudgetAlertHook.objects.get(tenant=acme.tenant)
    assert secret.startswith("whsec_") and hook.signing_secret() == secret
    assert secret not in hook.signing_secret_encrypted  # stored encrypted only

    shown = admin.get(HOOK)
    assert shown.status_code == 200 and "signing_secret" not in shown.json() and secret not in shown.content.decode()
    assert shown.json() == {**shown.json(), "url": "https://hooks.example.com/budgets", "is_active": True}

    changed = admin.put(HOOK, {"url": "https://hooks.example.com/v2", "is_active": False}, format="json")
    assert changed.status_code == 200 and "signing_secret" not in changed.json()
    hook.refresh_from_db()
    assert (hook.url, hook.is_active, hook.signing_secret()) == ("https://hooks.example.com/v2", False, secret)

    rotated = admin.post(f"{HOOK}rotate/")
    assert rotated.status_code == 200 and rotated["Cache-Control"] == "no-store"
    new_secret = rotated.json()["signing_secret"]
    hook.refresh_from_db()
    assert new_secret != secret and hook.signing_secret() == new_secret

    for bad in ("ftp://hooks.example.com/", "http://169.254.169.254/latest", "https://user:pw@hooks.example.com/"):
        refused = admin.put(HOOK, {"url": bad}, format="json")
        assert refused.status_code == 400 and "url" in refused.json()["error"]["fields"], bad
    hook.refresh_from_db()
    assert hook.url == "https://hooks.example.com/v2"

    viewer = key_client(acme.users["viewer"])
    assert viewer.get(HOOK).json()["url"] == "https://hooks.example.com/v2"
    assert viewer.put(HOOK, {"url": "https://evil.example.com/"}, format="json").status_code == 403
    assert viewer.post(f"{HOOK}rotate/").status_code == 403
    assert viewer.delete(HOOK).status_code == 403

    # Globex's admin neither sees nor changes Acme's hook, and gets its own.
    other = key_client(globex.users["admin"])
    assert other.get(f"{HOOK}?tenant={acme.tenant.pk}").status_code == 404
    assert (
        other.put(f"{HOOK}?tenant={acme.tenant.pk}", {"url": "https://evil.example.com/"}, format="json").status_code
        == 404
    )
    assert other.post(f"{HOOK}rotate/?tenant={acme.tenant.pk}").status_code == 404
    assert other.delete(f"{HOOK}?tenant={acme.tenant.pk}").status_code == 404
    assert other.get(HOOK).status_code == 404  # its own tenant has none
    assert (
        other.put(HOOK, {"url": "https://globex.example.com/", "tenant": acme.tenant.pk}, format="json").status_code
        == 201
    )
    assert BudgetAlertHook.objects.get(tenant=globex.tenant).url == "https://globex.example.com/"
    hook.refresh_from_db()
    assert hook.url == "https://hooks.example.com/v2" and hook.signing_secret() == new_secret

    assert admin.delete(HOOK).status_code == 204
    assert not BudgetAlertHook.objects.filter(tenant=acme.tenant).exists()
    assert admin.get(HOOK).status_code == 404


def test_the_hook_asks_which_tenant_of_a_member_of_several(
    acme: Any, globex: Any, member_factory: Any, key_client: Any
) -> None:
    both = key_client(member_factory((acme.tenant, "admin"), (globex.tenant, "viewer")))
    refused = both.get(HOOK)
    assert refused.status_code == 400 and "tenant" in refused.json()["error"]["fields"]
    assert both.get(f"{HOOK}?tenant=abc").status_code == 400
    made = both.put(f"{HOOK}?tenant={acme.tenant.pk}", {"url": "https://acme.example.com/"}, format="json")
    assert made.status_code == 201
    assert (
        both.put(f"{HOOK}?tenant={globex.tenant.pk}", {"url": "https://x.example.com/"}, format="json").status_code
        == 403
    )
    assert not BudgetAlertHook.objects.filter(tenant=globex.tenant).exists()


def test_price_and_time_zone_on_the_wire(acme: Any, admin: Any) -> None:
    url = f"/api/v1/tools/{acme.tool.pk}/"
    assert admin.patch(url, {"price": "0.0025"}, format="json").status_code == 200
    acme.tool.refresh_from_db()
    assert acme.tool.price == Decimal("0.0025") and admin.get(url).json()["price"] == "0.002500"
    assert admin.patch(url, {"price": "-1"}, format="json").status_code == 400

    tenant_url = f"/api/v1/tenants/{acme.tenant.pk}/"
    assert admin.get(tenant_url).json()["time_zone"] == "UTC"
    assert admin.patch(tenant_url, {"time_zone": "Europe/Paris"}, format="json").status_code == 405


def test_the_schema_documents_the_budget_endpoints(admin: Any) -> None:
    schema = admin.get(reverse("mcp_api:schema") + "?format=json").json()
    paths = schema["paths"]
    assert {"get", "put", "delete"} <= set(paths["/api/v1/budget-alert-hook/"])
    assert "post" in paths["/api/v1/budget-alert-hook/rotate/"]
    assert {"get", "post"} <= set(paths["/api/v1/budgets/"]) and set(paths["/api/v1/budget-alerts/"]) == {"get"}
    put = paths["/api/v1/budget-alert-hook/"]["put"]
    assert {"200", "201", "403"} <= set(put["responses"])
    assert [p["name"] for p in put["parameters"]] == ["tenant"]


def test_budget_endpoints_authenticate_and_throttle_like_the_others(acme: Any, key_client: Any, settings: Any) -> None:
    from rest_framework.test import APIClient

    for path in (BUDGETS, ALERTS, HOOK, f"{HOOK}rotate/"):
        anonymous = APIClient().generic("POST" if path.endswith("rotate/") else "GET", path)
        assert anonymous.status_code == 401 and error_code(anonymous) == "not_authenticated", path
    agent_token = APIClient()
    agent_token.credentials(HTTP_AUTHORIZATION=f"Bearer {acme.raw_token}")
    assert agent_token.get(HOOK).status_code == 401  # agent tokens are for /mcp/ only

    settings.MCP_APP = {**settings.MCP_APP, "API_RATE_PER_KEY": "3/minute"}
    viewer = key_client(acme.users["viewer"])
    assert [viewer.get(path).status_code for path in (BUDGETS, ALERTS, HOOK)] == [200, 200, 404]
    throttled = viewer.get(HOOK)
    assert throttled.status_code == 429 and error_code(throttled) == "throttled"
    assert 1 <= int(throttled["Retry-After"]) <= 60


def _put_together(clients: list[Any], urls: list[str]) -> list[int]:
    """Each client PUTs its URL to the hook at the same moment, from a thread of its own; the statuses."""
    import threading

    from django.db import connections

    barrier = threading.Barrier(len(clients))
    statuses: list[int] = []

    def put(client: Any, url: str) -> None:
        try:
            barrier.wait(timeout=10)
            statuses.append(client.put(HOOK, {"url": url}, format="json").status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=put, args=pair) for pair in zip(clients, urls, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return statuses


def test_racing_puts_create_one_hook_and_change_it(acme: Any, key_client: Any, transactional_db: Any) -> None:
    # Two PUTs at once, with no hook yet: one creates it (201), the other changes it (200); never a 400 or a 500
    # from the one-hook-per-tenant constraint. The threads' connections see committed rows only.
    clients = [key_client(acme.users["admin"]) for _ in range(2)]
    for round_ in range(4):
        BudgetAlertHook.objects.filter(tenant=acme.tenant).delete()
        urls = [f"https://hooks.example.com/r{round_}/{index}" for index in range(len(clients))]
        statuses = _put_together(clients, urls)
        assert sorted(statuses) == [200, 201], statuses
        assert BudgetAlertHook.objects.filter(tenant=acme.tenant).count() == 1
