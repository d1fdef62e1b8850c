"""``manage.py mcp_usage export``: one tenant's month of the usage ledger on stdout, as CSV or JSON, the same rows
and fields as the API; a tenant is required and never mixed with another; bad input is a clear CommandError."""

from __future__ import annotations

import csv
import io
import json
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from mcp_app.limits.export import FIELDS
from mcp_app.models import UsageDay

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp_usage", *args, stdout=out)
    return out.getvalue()


def row(tenant: Any, day: date, tool: str, calls: int, cost: str) -> UsageDay:
    return UsageDay.objects.create(
        tenant=tenant,
        agent_key="bot",
        server_key="orders",
        tool_name=tool,
        day=day,
        calls=calls,
        errors=1,
        tool_seconds=0.5,
        bytes_in=10,
        bytes_out=20,
        cost=Decimal(cost),
    )


@pytest.fixture
def tenants(tenant_factory: Any) -> tuple[Any, Any]:
    acme, globex = tenant_factory(slug="acme"), tenant_factory(slug="globex")
    row(acme, date(2026, 12, 1), "lookup", 4, "1.25")
    row(acme, date(2026, 12, 31), "=cmd()", 1, "0")  # a name a spreadsheet would run: written inert
    row(acme, date(2027, 1, 1), "lookup", 9, "9")
    row(globex, date(2026, 12, 1), "lookup", 50, "5")
    return acme, globex


def test_csv_export_of_one_tenants_month(tenants):
    text = run("export", "--tenant", "acme", "--month", "2026-12", "--format", "csv")
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == list(FIELDS)
    lines = list(reader)
    assert [(line["day"], line["tool"], line["calls"], line["cost"]) for line in lines] == [
        ("2026-12-01", "lookup", "4", "1.250000"),
        ("2026-12-31", "'=cmd()", "1", "0.000000"),
    ]
    assert {line["tenant"] for line in lines} == {"acme"}


def test_json_export_is_the_same_rows(tenants):
    records = json.loads(run("export", "--tenant", "globex", "--month", "2026-12", "--format", "json"))
    assert records == [
        {
            "day": "2026-12-01",
            "tenant": "globex",
            "agent": "bot",
            "server": "orders",
            "tool": "lookup",
            "calls": 50,
            "errors": 1,
            "tool_seconds": 0.5,
            "bytes_in": 10,
            "bytes_out": 20,
            "cost": "5.000000",
        }
    ]
    assert json.loads(run("export", "--tenant", "globex", "--month", "2027-01", "--format", "json")) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tenant", "nobody", "--month", "2026-12"), "no tenant with slug 'nobody'"),
        (("--tenant", "acme", "--month", "2026-13"), "is not a month: use YYYY-MM"),
        (("--tenant", "acme", "--month", "12/2026"), "is not a month: use YYYY-MM"),
        (("--month", "2026-12"), "--tenant"),
        (("--tenant", "acme", "--month", "2026-12", "--format", "xml"), "invalid choice"),
    ],
)
def test_bad_input_is_a_clear_command_error(tenants, args, message):
    with pytest.raises(CommandError, match=message):
        run("export", *args)
