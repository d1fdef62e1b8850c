"""``GET /api/v1/usage/``: a tenant's usage ledger as JSON pages or one CSV download; an API key of one tenant
never sees another's rows; the filters narrow by period, agent, server and tool; CSV sums equal the ledger's."""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Sum

from mcp_app.limits.export import FIELDS
from mcp_app.models import UsageDay

pytestmark = pytest.mark.django_db

URL = "/api/v1/usage/"


def add_usage(world: Any, day: date, tool: str = "", agent: str = "", **fields: Any) -> UsageDay:
    values = {"calls": 3, "errors": 1, "tool_seconds": 1.25, "bytes_in": 30, "bytes_out": 90, "cost": Decimal("0.75")}
    return UsageDay.objects.create(
        tenant=world.tenant,
        agent=world.agent,
        server=world.server,
        agent_key=agent or world.agent.agent_id,
        server_key=world.server.server_id,
        tool_name=tool or world.tool.name,
        day=day,
        **{**values, **fields},
    )


@pytest.fixture
def ledgers(two_tenants: Any) -> Any:
    acme, globex = two_tenants
    add_usage(acme, date(2026, 11, 30))
    add_usage(acme, date(2026, 12, 1), calls=5, cost=Decimal("1.5"))
    add_usage(acme, date(2026, 12, 31), tool="other_tool", calls=7, errors=0)
    add_usage(acme, date(2026, 12, 15), agent="gone-agent", calls=2)  # a deleted agent's row, kept by its key
    add_usage(globex, date(2026, 12, 2), calls=100)
    return acme, globex


def csv_rows(response: Any) -> tuple[list[str], list[dict[str, str]]]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    reader = csv.DictReader(io.StringIO(body.decode()))
    return list(reader.fieldnames or []), list(reader)


def test_a_tenants_key_lists_only_its_tenants_rows(ledgers, key_client):
    acme, globex = ledgers
    for world, calls in ((acme, [7, 2, 5, 3]), (globex, [100])):
        response = key_client(world.users["viewer"]).get(URL)
        assert response.status_code == 200
        body = response.json()
        assert body["count"] == len(calls)
        assert [row["calls"] for row in body["results"]] == calls  # newest day first
        assert {row["tenant"] for row in body["results"]} == {world.tenant.slug}
    # Naming the other tenant changes nothing: an empty page, never its rows.
    response = key_client(acme.users["owner"]).get(URL, {"tenant": globex.tenant.pk})
    assert response.json()["count"] == 0
    response = key_client(acme.users["owner"]).get(URL, {"tenant_slug": globex.tenant.slug, "format": "csv"})
    assert csv_rows(response)[1] == []


def test_a_row_reads_the_same_in_json_and_csv(ledgers, key_client):
    acme, _ = ledgers
    client = key_client(acme.users["viewer"])
    [row] = client.get(URL, {"since": "2026-12-01", "until": "2026-12-01"}).json()["results"]
    assert row == {
        "day": "2026-12-01",
        "tenant": acme.tenant.slug,
        "agent": acme.agent.agent_id,
        "server": acme.server.server_id,
        "tool": acme.tool.name,
        "calls": 5,
        "errors": 1,
        "tool_seconds": 1.25,
        "bytes_in": 30,
        "bytes_out": 90,
        "cost": "1.500000",
    }
    response = client.get(URL, {"since": "2026-12-01", "until": "2026-12-01", "format": "csv"})
    header, [line] = csv_rows(response)
    assert header == list(FIELDS)
    assert line == {key: str(value) for key, value in row.items()}


@pytest.mark.parametrize("how", ["query", "accept"])
def test_csv_holds_every_matching_row_and_its_sums_equal_the_ledgers(ledgers, key_client, how):
    acme, _ = ledgers
    client = key_client(acme.users["viewer"])
    extra = {"HTTP_ACCEPT": "text/csv"} if how == "accept" else {}
    params = {"month": "2026-12", "page_size": 1, **({"format": "csv"} if how == "query" else {})}
    response = client.get(URL, params, **extra)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="usage.csv"'
    header, lines = csv_rows(response)
    assert header == list(FIELDS)
    assert len(lines) == 3  # unpaginated: the month's rows, November's left out
    stored = UsageDay.objects.filter(tenant=acme.tenant, day__gte=date(2026, 12, 1)).aggregate(
        calls=Sum("calls"), errors=Sum("errors"), cost=Sum("cost"), tool_seconds=Sum("tool_seconds")
    )
    assert sum(int(line["calls"]) for line in lines) == stored["calls"] == 14
    assert sum(int(line["errors"]) for line in lines) == stored["errors"]
    assert sum(Decimal(line["cost"]) for line in lines) == stored["cost"]
    assert sum(float(line["tool_seconds"]) for line in lines) == pytest.approx(stored["tool_seconds"])


def test_filters_narrow_by_period_agent_server_and_tool(ledgers, key_client):
    acme, _ = ledgers
    client = key_client(acme.users["viewer"])

    def days(**params: Any) -> list[str]:
        response = client.get(URL, params)
        assert response.status_code == 200, response.content
        return sorted(row["day"] for row in response.json()["results"])

    assert days(month="2026-11") == ["2026-11-30"]
    assert days(since="2026-12-15") == ["2026-12-15", "2026-12-31"]
    assert days(until="2026-12-01") == ["2026-11-30", "2026-12-01"]
    assert days(agent="gone-agent") == ["2026-12-15"]
    assert days(tool="other_tool") == ["2026-12-31"]
    assert days(server=acme.server.server_id, month="2026-12") == ["2026-12-01", "2026-12-15", "2026-12-31"]
    assert days(server="no-such-server") == []


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "december", "2026-12-01"])
def test_a_bad_month_is_a_validation_error(ledgers, key_client, month):
    acme, _ = ledgers
    response = key_client(acme.users["viewer"]).get(URL, {"month": month})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"


def test_the_ledger_is_read_only_and_anonymous_callers_are_refused(ledgers, key_client, client):
    acme, _ = ledgers
    owner = key_client(acme.users["owner"])
    assert owner.post(URL, {"calls": 1}, format="json").status_code == 405
    assert client.get(URL).status_code in (401, 403)
    response = client.get(URL, {"format": "csv"})
    assert response.status_code in (401, 403)
    assert response.content.decode().splitlines()[0] == "code,message"


def test_the_schema_documents_the_usage_export(db, client):
    schema = client.get("/api/schema/?format=json").json()
    listing = schema["paths"]["/api/v1/usage/"]["get"]
    parameters = {parameter["name"] for parameter in listing["parameters"]}
    assert {"since", "until", "month", "agent", "server", "tool", "page", "page_size"} <= parameters
    assert set(listing["responses"]["200"]["content"]) == {"application/json", "text/csv"}
