"""Budgets in the admin, in a real browser at 1,366 px (Debian's chromium driven by Playwright against a daphne as
in production: DEBUG off, static files collected), as Globex's tenant admin and as the operator:

- the usage page's burn-down: one row per budget limit with used / limit, a bar as wide as the share spent (amber
  from the budget's alert share, red when spent) and when the period resets; Acme's usage and budgets never show;
- the budget list, the operator's budget opened read-only, a budget of their own added in the form;
- the usage ledger: Globex's rows only, filtered by tool, and its "Download CSV" the filtered rows;
- the alert list, and a new alert webhook whose signing secret is shown once, in the message after saving;
- as the operator: a new budget is the operator's by default, and the tenant's time zone is editable.

No page is wider than the window. Screenshots go to ``$MCP_ARTIFACTS_DIR/budget-admin/`` (default
``artifacts/screenshots/``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from mcp_app.models import Budget, BudgetAlert, BudgetAlertHook

from .browser import WINDOW, chromium, login, screenshots
from .conftest import Daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-browser-test-password"
WAIT_MS = 20_000
AMBER, RED = "rgb(217, 119, 6)", "rgb(220, 38, 38)"


@pytest.fixture
def budgets(transactional_db: None, world_factory: Any, member_factory: Any, usage_factory: Any) -> dict[str, Any]:
    acme, globex = world_factory("acme"), world_factory("globex")
    agent = globex.access.agent
    ledger_tool = usage_factory(globex.tenant, agent, calls=40, tool_seconds=12.5, cost=Decimal("0.75")).tool_name
    usage_factory(globex.tenant, None, calls=15)
    usage_factory(acme.tenant, acme.access.agent, calls=999)
    operators = Budget.objects.create(
        tenant=globex.tenant, set_by="operator", calls_per_day=50, calls_per_month=2000, cost_per_month=Decimal("10")
    )
    own = Budget.objects.create(
        tenant=globex.tenant, agent=agent, calls_per_day=50, tool_seconds_per_day=100, alert_percent=75
    )
    Budget.objects.create(tenant=acme.tenant, set_by="operator", calls_per_day=1)
    BudgetAlert.objects.create(
        tenant=globex.tenant,
        budget=operators,
        metric="calls",
        period="day",
        period_start=operators.updated_at.date(),
        percent=80,
        used=40,
        limit=50,
        delivery_error="connection refused",
    )
    member_factory((globex.tenant, "admin"), username="globex-staff", password=PASSWORD)
    member_factory(username="operator", password=PASSWORD, is_superuser=True)
    return {"acme": acme, "globex": globex, "operators": operators, "own": own, "ledger_tool": ledger_tool}


def _browser(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])


def _visit(page: Any, url: str, folder: Path, name: str) -> None:
    """Open ``url`` (200), check it fits the window, and keep a screenshot."""
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)
    page.wait_for_load_state("load")
    width = int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))
    assert width <= WINDOW["width"], (url, width)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _bar(page: Any, budget: Budget, metric: str, period: str) -> dict[str, Any]:
    row = page.locator(f'[data-budget="{budget.pk}"] tr[data-metric="{metric}"][data-period="{period}"]')
    return dict(
        row.evaluate(
            """(tr) => {
                const bar = tr.querySelector('.mcp-burn-bar'), fill = bar.querySelector('span');
                return {
                    share: fill.getBoundingClientRect().width / bar.getBoundingClientRect().width,
                    colour: getComputedStyle(fill).backgroundColor,
                    text: tr.innerText,
                };
            }"""
        )
    )


def test_a_tenant_admin_reads_the_burn_down_and_manages_budgets(styled_daphne: Daphne, budgets: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("budget-admin")
    base, globex = styled_daphne.url, budgets["globex"]
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_context(viewport=WINDOW).new_page()
        page.set_default_timeout(WAIT_MS)
        login(page, base, "globex-staff", PASSWORD)

        # -- the burn-down on the usage page ---------------------------------------------------------------------
        _visit(page, f"{base}/admin/mcp_app/toolcall/usage/?tenant={globex.tenant.pk}", folder, "01-usage-burn-down")
        card = page.locator("#usage-budgets")
        assert card.is_visible() and "acme" not in card.inner_text().lower()
        whole = _bar(page, budgets["operators"], "calls", "day")  # 55 of 50: spent
        assert whole["share"] == pytest.approx(1.0, abs=0.01) and whole["colour"] == RED
        assert "55" in whole["text"] and "110%" in whole["text"]
        month = _bar(page, budgets["operators"], "calls", "month")  # 55 of 2000
        assert month["share"] == pytest.approx(0.03, abs=0.01) and month["colour"] not in (AMBER, RED)
        own = _bar(page, budgets["own"], "calls", "day")  # 40 of 50 calls: 80 %, past its 75 % alert share
        assert own["share"] == pytest.approx(0.8, abs=0.01) and own["colour"] == AMBER and "80%" in own["text"]
        seconds = _bar(page, budgets["own"], "tool_seconds", "day")
        assert seconds["share"] == pytest.approx(0.125, abs=0.01) and "12.5" in seconds["text"]
        assert "(in " in own["text"]  # when it resets
        page.locator("#usage-budgets").screenshot(path=str(folder / "02-burn-down-card.png"))

        # -- the budgets: the operator's read-only, one of their own added ---------------------------------------
        _visit(page, f"{base}/admin/mcp_app/budget/", folder, "03-budget-list")
        assert "acme" not in page.locator("#changelist").inner_text().lower()
        _visit(page, f"{base}/admin/mcp_app/budget/{budgets['operators'].pk}/change/", folder, "04-operator-budget")
        assert page.locator("input[name=calls_per_day]").count() == 0
        assert page.locator("button[name=_save]").count() == 0
        assert "Burn-down on the usage page" in page.locator("#content").inner_text()

        _visit(page, f"{base}/admin/mcp_app/budget/add/", folder, "05-budget-add")
        assert page.locator("select[name=set_by]").count() == 0  # the author is not theirs to choose
        page.fill("input[name=calls_per_month]", "1500")
        page.fill("input[name=cost_per_day]", "2.5")
        with page.expect_navigation():
            page.click("button[name=_save]")
        assert "was added successfully" in page.locator("#main").inner_text()
        page.screenshot(path=str(folder / "06-budget-added.png"), full_page=True)

        # -- the usage ledger, filtered, and its CSV -------------------------------------------------------------------
        _visit(page, f"{base}/admin/mcp_app/usageday/", folder, "07-usage-ledger")
        listed = page.locator("#result_list").inner_text()
        assert "999" not in listed and "40" in listed and "12.5" in listed and "0.75" in listed
        assert page.locator('a[href="/admin/mcp_app/usageday/"]', has_text="Usage ledger").count() == 1  # sidebar
        ledger_tool = budgets["ledger_tool"]
        _visit(page, f"{base}/admin/mcp_app/usageday/?tool_name={ledger_tool}", folder, "07b-usage-ledger-filtered")
        with page.expect_download() as download_info:
            page.get_by_text("Download CSV").click()
        download = download_info.value
        assert re.fullmatch(r"usage-globex-\d{4}-\d{2}-\d{2}\.csv", download.suggested_filename)
        lines = Path(download.path()).read_text().splitlines()
        assert lines[0].startswith("day,tenant,agent") and len(lines) == 2 and f",{ledger_tool},40," in lines[1]

        # -- alerts, and the webhook's secret shown once ---------------------------------------------------------
        _visit(page, f"{base}/admin/mcp_app/budgetalert/", folder, "08-alerts")
        assert "connection refused" in page.locator("#changelist").inner_text()
        _visit(page, f"{base}/admin/mcp_app/budgetalerthook/add/", folder, "09-hook-add")
        page.fill("input[name=url]", "https://hooks.example.com/budgets")
        with page.expect_navigation():
            page.click("button[name=_continue]")
        shown = re.search(r"whsec_[\w-]+", page.locator("#main").inner_text())
        assert shown is not None
        page.screenshot(path=str(folder / "10-hook-secret-once.png"), full_page=True)
        page.reload()
        assert shown.group() not in page.content()
        browser.close()

    # What the pages wrote (read after the browser: the ORM is not called from Playwright's event loop).
    added = Budget.objects.get(tenant=globex.tenant, agent=None, set_by="tenant")
    assert (added.calls_per_month, added.cost_per_day) == (1500, Decimal("2.5"))
    assert BudgetAlertHook.objects.get(tenant=globex.tenant).signing_secret() == shown.group()


def test_the_operator_sets_budgets_and_time_zones(styled_daphne: Daphne, budgets: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("budget-admin-operator")
    base, globex = styled_daphne.url, budgets["globex"]
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_context(viewport=WINDOW).new_page()
        page.set_default_timeout(WAIT_MS)
        login(page, base, "operator", PASSWORD)
        _visit(page, f"{base}/admin/mcp_app/budget/add/", folder, "01-operator-budget-add")
        assert page.locator("select[name=set_by]").input_value() == "operator"
        _visit(page, f"{base}/admin/mcp_app/tenant/{globex.tenant.pk}/change/", folder, "02-tenant-time-zone")
        page.fill("input[name=time_zone]", "Europe/Paris")
        with page.expect_navigation():
            page.click("button[name=_continue]")
        assert "was changed successfully" in page.locator("#main").inner_text()
        _visit(page, f"{base}/admin/mcp_app/toolcall/usage/?tenant={globex.tenant.pk}", folder, "03-usage-paris")
        assert "counted in Europe/Paris" in page.locator("#usage-budgets").inner_text()
        browser.close()
    globex.tenant.refresh_from_db()
    assert globex.tenant.time_zone == "Europe/Paris"
