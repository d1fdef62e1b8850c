"""``manage.py mcp_budget set|show|clear``: the operator's budgets from the command line, checked against the rows
they leave and what the usage ledger (rows inserted here) says of this day and month; every mistake a clear
``CommandError`` that changes nothing."""

from __future__ import annotations

import io
import json
import re
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from mcp_app.models import Budget

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp_budget", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def acme(tenant_factory: Any) -> Any:
    return tenant_factory(slug="acme")


def test_set_creates_then_changes_the_operators_budget(acme: Any, agent_factory: Any) -> None:
    out = run("set", "--tenant", "acme", "--calls-per-day", "50", "--cost-per-month", "12.50")
    assert out.startswith("Created the operator's budget of acme.")
    assert "calls per day: 0 of 50 (0%), resets " in out and "cost per month: 0 of 12.5 (0%)" in out
    budget = Budget.objects.get(tenant=acme)
    assert (budget.set_by, budget.agent, budget.calls_per_day, budget.cost_per_month) == (
        "operator",
        None,
        50,
        Decimal("12.5"),
    )

    # Limits not given stay; 'none' clears one; 0 is a limit of zero.
    body = json.loads(
        run("set", "--tenant", "acme", "--calls-per-day", "none", "--tool-seconds-per-day", "0", "--json")
    )
    budget.refresh_from_db()
    assert (budget.calls_per_day, budget.tool_seconds_per_day, budget.cost_per_month) == (None, 0.0, Decimal("12.5"))
    assert body["created"] is False and body["set_by"] == "operator" and body["agent"] is None
    assert body["limits"]["cost_per_month"] == "12.5" and body["limits"]["calls_per_day"] is None
    assert [(u["metric"], u["period"], u["percent"]) for u in body["usage"]] == [
        ("tool_seconds", "day", 100.0),
        ("cost", "month", 0.0),
    ]

    agent = agent_factory(tenant=acme, agent_id="bot")
    out = run("set", "--tenant", "acme", "--agent", "bot", "--calls-per-month", "1000", "--alert-percent", "90")
    assert out.startswith("Created the operator's budget of agent bot of acme.")
    agents = Budget.objects.get(agent=agent)
    assert (agents.set_by, agents.calls_per_month, agents.alert_percent) == ("operator", 1000, 90)
    assert Budget.objects.filter(tenant=acme).count() == 2


def test_set_leaves_the_tenant_admins_budget_alone(acme: Any) -> None:
    theirs = Budget.objects.create(tenant=acme, set_by="tenant", calls_per_day=10)
    run("set", "--tenant", "acme", "--calls-per-day", "500")
    theirs.refresh_from_db()
    assert theirs.calls_per_day == 10
    assert Budget.objects.get(tenant=acme, set_by="operator").calls_per_day == 500


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tenant", "nope", "--calls-per-day", "5"), "no tenant 'nope'"),
        (("--tenant", "acme", "--agent", "ghost", "--calls-per-day", "5"), "no agent 'ghost' in tenant 'acme'"),
        (("--tenant", "acme", "--agent", "globex-bot", "--calls-per-day", "5"), "no agent 'globex-bot' in tenant"),
        (("--tenant", "acme", "--calls-per-day", "-1"), "'-1' is negative"),
        (("--tenant", "acme", "--calls-per-day", "2.5"), "'2.5' is not a number"),
        (("--tenant", "acme", "--calls-per-day", "lots"), "'lots' is not a number (or 'none'"),
        (("--tenant", "acme", "--tool-seconds-per-day", "nan"), "'nan' is not a finite number"),
        (("--tenant", "acme", "--cost-per-day", "inf"), "'inf' is not a finite number"),
        (("--tenant", "acme", "--cost-per-day", "0.0000001"), "cost_per_day: Ensure that there are no more than 6"),
        (("--tenant", "acme", "--alert-percent", "0"), "'0' is not a whole percentage from 1 to 100"),
        (("--tenant", "acme", "--alert-percent", "101"), "'101' is not a whole percentage from 1 to 100"),
    ],
)
def test_set_refuses_mistakes_and_changes_nothing(
    acme: Any, tenant_factory: Any, agent_factory: Any, args: tuple[str, ...], message: str
) -> None:
    agent_factory(tenant=tenant_factory(slug="globex"), agent_id="globex-bot")  # an agent of another tenant
    with pytest.raises(CommandError, match="^(Error: argument [^:]+: )?" + re.escape(message)):
        run("set", *args)
    assert not Budget.objects.exists()


def test_show_lists_every_budget_with_this_periods_usage(
    tenant_factory: Any, agent_factory: Any, usage_factory: Any
) -> None:
    acme = tenant_factory(slug="acme", time_zone="Pacific/Kiritimati")  # UTC+14: its day is rarely UTC's
    bot = agent_factory(tenant=acme, agent_id="bot")
    usage_factory(acme, bot, calls=40, cost=Decimal("1.5"))
    usage_factory(acme, None, calls=2)
    globex = tenant_factory(slug="globex")
    usage_factory(globex, None, calls=1000)
    Budget.objects.create(tenant=globex, set_by="operator", calls_per_day=1)
    Budget.objects.create(tenant=acme, set_by="operator", calls_per_day=100)
    Budget.objects.create(tenant=acme, agent=bot, set_by="tenant", calls_per_day=50, cost_per_month=Decimal("3"))

    body = json.loads(run("show", "--tenant", "acme", "--json"))
    assert body["tenant"] == "acme" and body["time_zone"] == "Pacific/Kiritimati"
    shown = {(row["agent"], row["set_by"]): row for row in body["budgets"]}
    assert set(shown) == {(None, "operator"), ("bot", "tenant")}
    whole = shown[(None, "operator")]["usage"]
    assert [(u["used"], u["limit"], u["percent"]) for u in whole] == [(42.0, 100.0, 42.0)]
    assert whole[0]["resets_at"].endswith("T00:00:00+14:00")
    bots = {(u["metric"], u["period"]): (u["used"], u["percent"]) for u in shown[("bot", "tenant")]["usage"]}
    assert bots == {("calls", "day"): (40.0, 80.0), ("cost", "month"): (1.5, 50.0)}

    text = run("show", "--tenant", "acme")
    assert "acme: whole tenant, set by operator\n  calls per day: 42 of 100 (42%), resets " in text
    assert "acme: agent bot, set by tenant admins\n  calls per day: 40 of 50 (80%)" in text
    assert "cost per month: 1.5 of 3 (50%)" in text and "globex" not in text
    assert run("show", "--tenant", "globex").count("set by") == 1

    empty = tenant_factory(slug="empty")
    assert run("show", "--tenant", empty.slug) == "No budgets in empty.\n"
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        run("show", "--tenant", "nope")


def test_clear_deletes_only_the_budget_asked_for(acme: Any, agent_factory: Any, tenant_factory: Any) -> None:
    bot = agent_factory(tenant=acme, agent_id="bot")
    whole = Budget.objects.create(tenant=acme, set_by="operator", calls_per_day=1)
    bots = Budget.objects.create(tenant=acme, agent=bot, set_by="operator", calls_per_day=1)
    theirs = Budget.objects.create(tenant=acme, set_by="tenant", calls_per_day=1)
    globex = Budget.objects.create(tenant=tenant_factory(slug="globex"), set_by="operator", calls_per_day=1)

    assert run("clear", "--tenant", "acme", "--agent", "bot") == "Deleted the operator's budget of agent bot of acme.\n"
    assert set(Budget.objects.values_list("pk", flat=True)) == {whole.pk, theirs.pk, globex.pk}
    assert json.loads(run("clear", "--tenant", "acme", "--json")) == {"tenant": "acme", "agent": None, "deleted": 1}
    assert run("clear", "--tenant", "acme") == "No operator's budget of acme.\n"
    assert run("clear", "--tenant", "acme", "--set-by", "tenant") == "Deleted the tenant admins' budget of acme.\n"
    assert list(Budget.objects.values_list("pk", flat=True)) == [globex.pk]
    assert bots.pk not in Budget.objects.values_list("pk", flat=True)
    with pytest.raises(CommandError, match="no agent 'ghost' in tenant 'acme'"):
        run("clear", "--tenant", "acme", "--agent", "ghost")
