"""The usage ledger in the admin (``admin.ledger``): Globex's members see only Globex's rows in the list and in
"Download CSV" (an Acme row's id is a 404); the CSV holds exactly the rows of the filtered list, header first,
its sums the rows' sums; nobody adds, changes or deletes a row, members of every role view them; the page sits in
the sidebar's Budgets group as "Usage ledger"."""

from __future__ import annotations

import csv
import io
import re
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from mcp_app.limits.export import FIELDS
from mcp_app.models import UsageDay

LIST = reverse("admin:mcp_app_usageday_changelist")
CSV = reverse("admin:mcp_app_usageday_export")
DAY = date(2026, 11, 3)


def rows_of(response: Any) -> list[dict[str, str]]:
    """The CSV download's records, after checking its header and type."""
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    text = b"".join(response.streaming_content).decode()
    lines = text.split("\r\n")
    assert lines[0] == ",".join(FIELDS) and lines[-1] == ""
    return list(csv.DictReader(io.StringIO(text)))


def listed_ids(response: Any) -> set[int]:
    assert response.status_code == 200
    return {int(pk) for pk in re.findall(r"/admin/mcp_app/usageday/(\d+)/change/", response.content.decode())}


@pytest.fixture
def ledger(acme: Any, globex: Any, usage_factory: Any) -> dict[str, list[UsageDay]]:
    g_agent, a_agent = globex.access.agent, acme.access.agent
    globex_rows = [
        usage_factory(
            globex.tenant,
            g_agent,
            DAY,
            tool_name="lookup",
            calls=40,
            errors=2,
            tool_seconds=12.345,
            bytes_in=100,
            bytes_out=2000,
            cost=Decimal("0.750000"),
        ),
        usage_factory(
            globex.tenant,
            g_agent,
            DAY + timedelta(days=1),
            tool_name="lookup",
            calls=7,
            tool_seconds=1.5,
            bytes_in=10,
            bytes_out=30,
            cost=Decimal("0.001200"),
        ),
        usage_factory(
            globex.tenant, None, DAY, tool_name="=cmd", calls=3, errors=3, tool_seconds=0.25, cost=Decimal("2")
        ),
        usage_factory(globex.tenant, g_agent, DAY.replace(month=10), tool_name="search", calls=5, cost=Decimal("1")),
    ]
    acme_rows = [usage_factory(acme.tenant, a_agent, DAY, tool_name="lookup", calls=999, cost=Decimal("9"))]
    return {"globex": globex_rows, "acme": acme_rows}


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_members_see_only_their_tenants_rows_in_the_list_and_the_csv(
    globex: Any, login: Any, ledger: dict[str, list[UsageDay]], role: str
) -> None:
    client = login(globex.users[role])
    assert listed_ids(client.get(LIST)) == {row.pk for row in ledger["globex"]}
    exported = rows_of(client.get(CSV))
    assert {row["tenant"] for row in exported} == {"globex"} and len(exported) == len(ledger["globex"])
    acme_row = ledger["acme"][0]
    assert client.get(reverse("admin:mcp_app_usageday_change", args=[acme_row.pk])).status_code == 404
    # Naming Acme in the filters finds nothing of it (another tenant's rows look like no rows).
    assert rows_of(client.get(CSV, {"tenant": acme_row.tenant_id})) == []
    assert listed_ids(client.get(LIST, {"tenant": acme_row.tenant_id})) == set()


def test_the_list_shows_rounded_seconds_and_cost_without_trailing_zeros(
    globex: Any, login: Any, ledger: dict[str, list[UsageDay]]
) -> None:
    page = login(globex.users["viewer"]).get(LIST, {"day__year": 2026, "day__month": 11, "day__day": 3})
    cells = [
        re.sub(r"<[^>]+>|\s+", " ", row).split()
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page.content.decode(), re.S)
    ]
    lookup = next(row for row in cells if "lookup" in row)
    assert lookup[-6:] == ["40", "2", "12.3", "100", "2000", "0.75"]
    assert "Usage ledger" in page.content.decode()


def test_the_csv_is_the_filtered_list_and_its_sums_are_the_rows(
    globex: Any, login: Any, ledger: dict[str, list[UsageDay]]
) -> None:
    client = login(globex.users["viewer"])
    everything = rows_of(client.get(CSV))
    rows = ledger["globex"]
    assert sum(int(r["calls"]) for r in everything) == sum(row.calls for row in rows) == 55
    assert sum(int(r["errors"]) for r in everything) == sum(row.errors for row in rows) == 5
    assert sum(Decimal(r["cost"]) for r in everything) == sum(row.cost for row in rows) == Decimal("3.7512")
    assert sum(float(r["tool_seconds"]) for r in everything) == pytest.approx(sum(r.tool_seconds for r in rows))
    assert sum(int(r["bytes_out"]) for r in everything) == 2030
    assert [r["day"] for r in everything] == sorted(r["day"] for r in everything)  # limits.export.ordered
    assert next(r for r in everything if r["agent"] == "deleted-agent")["tool"] == "'=cmd"  # never a formula

    for params, expected in (
        ({"tool_name": "lookup"}, [rows[0], rows[1]]),
        ({"day__year": 2026, "day__month": 11}, rows[:3]),
        ({"day__year": 2026, "day__month": 11, "day__day": 3}, [rows[0], rows[2]]),
        ({"agent_key": "deleted-agent"}, [rows[2]]),
        ({"q": "search"}, [rows[3]]),
    ):
        assert listed_ids(client.get(LIST, params)) == {row.pk for row in expected}, params
        exported = rows_of(client.get(CSV, params))
        assert sorted((r["day"], r["tool"], int(r["calls"])) for r in exported) == sorted(
            (row.day.isoformat(), "'=cmd" if row.tool_name == "=cmd" else row.tool_name, row.calls) for row in expected
        ), params


def test_the_download_is_named_for_the_tenant_and_offered_on_the_page(
    acme: Any, globex: Any, login: Any, admin_client: Any, ledger: dict[str, list[UsageDay]]
) -> None:
    today = timezone.localdate().isoformat()
    response = login(globex.users["viewer"]).get(CSV)
    assert response["Content-Disposition"] == f'attachment; filename="usage-globex-{today}.csv"'
    everything = admin_client.get(CSV)
    assert everything["Content-Disposition"] == f'attachment; filename="usage-all-{today}.csv"'
    assert {r["tenant"] for r in rows_of(everything)} == {"acme", "globex"}
    chosen = admin_client.get(CSV, {"tenant": acme.tenant.pk})
    assert chosen["Content-Disposition"] == f'attachment; filename="usage-acme-{today}.csv"'
    assert [r["calls"] for r in rows_of(chosen)] == ["999"]
    page = admin_client.get(LIST, {"tool_name": "lookup", "q": "look"}).content.decode()
    assert f'href="{CSV}?tool_name=lookup&amp;q=look"' in page
    assert "Download CSV" in page
    assert admin_client.get(CSV, {"no_such_field": "1"}).status_code == 400


def test_nobody_adds_changes_or_deletes_a_row(
    globex: Any, login: Any, admin_client: Any, ledger: dict[str, list[UsageDay]]
) -> None:
    row = ledger["globex"][0]
    change = reverse("admin:mcp_app_usageday_change", args=[row.pk])
    delete = reverse("admin:mcp_app_usageday_delete", args=[row.pk])
    for client in (login(globex.users["owner"]), admin_client):
        assert client.get(reverse("admin:mcp_app_usageday_add")).status_code == 403
        assert client.get(change).status_code == 200  # the view page
        assert client.post(change, {"calls": 1}).status_code == 403
        assert client.post(delete, {"post": "yes"}).status_code == 403
        bulk = client.post(LIST, {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"})
        assert bulk.status_code in (200, 302)
    row.refresh_from_db()
    assert row.calls == 40
    page = login(globex.users["viewer"]).get(change)
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()


def test_the_sidebar_offers_the_ledger_under_budgets(globex: Any, login: Any) -> None:
    page = login(globex.users["viewer"]).get(reverse("admin:index")).content.decode()
    nav = page[page.index("<nav") :]
    budgets = nav[nav.index("Budgets") :]
    assert re.search(rf'href="{LIST}".*?Usage ledger', budgets, re.S)


def test_no_one_outside_a_tenant_reads_the_ledger(client: Any, member_factory: Any) -> None:
    assert client.get(CSV).status_code == 302  # to the login page
    client.force_login(member_factory(username="stranger", is_staff=True))
    assert client.get(CSV).status_code == 403
