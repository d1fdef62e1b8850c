"""The admin as a platform team sees it, in a real browser at 1,366 px: Debian's chromium driven by Playwright
against a daphne as in production (DEBUG off, static files collected).

A tenant's staff member (an admin of Globex; Acme's data exists too and never shows):

- the dashboard: both Chart.js charts drawn, every day of the period on the time axis, Globex's figures only;
- a tool of each kind (Python, static, http) edited: each page shows only its kind's fields, the Python tool its
  derived schema; the add page switches fields with the chosen kind;
- "Try it" on the ``countdown`` demo tool: the form built from its schema, the server preselected, progress
  shown live while the call runs; meanwhile the task list shows the running countdown with its progress, start
  and elapsed time, refreshing on its own;

a call starting while the dashboard is open shows in its running table and its "Running calls" card without a
reload, and "Try it" says it finished once the answer arrived;

and a walk of every admin page (changelist, add and change page of every registered model, plus the dashboard,
usage and "Try it") as an operator, checking that none is wider than the 1,366 px window.

Screenshots of every page go to ``$MCP_ARTIFACTS_DIR/<test>/`` (default ``artifacts/screenshots/``). With
``REDIS_URL`` the countdown runs on a real Celery worker (``celery_worker``); without it, in daphne's process.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.utils import timezone

from mcp_app.models import ApiKey, ServerTool, Tool, ToolCall, Webhook
from tests.helpers import running_worker_call

from .browser import WINDOW, chromium, login, screenshots
from .conftest import Daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-browser-test-password"
WAIT_MS = 20_000
PERIOD_DAYS = 30


def _calls(access: Any, tool: str, days_ago: int, count: int, status: str = "ok") -> set[Any]:
    """Record ``count`` calls ``days_ago`` days back, a minute apart; return the dates they fall on."""
    now = timezone.now()
    calls = ToolCall.objects.bulk_create(
        ToolCall(
            tenant=access.tenant,
            server=access.server,
            agent=access.agent,
            server_key=access.server.server_id,
            agent_key=access.agent.agent_id,
            token_prefix=access.token.prefix,
            tool_name=tool,
            arguments_digest="0" * 64,
            arguments={},
            status=status,
            started_at=now - timedelta(days=days_ago, minutes=index),
            finished_at=now - timedelta(days=days_ago, minutes=index),
            duration_ms=5.0 + 10 * index,
            era="legacy",
            protocol_version="2025-11-25",
        )
        for index in range(count)
    )
    return {timezone.localtime(call.started_at).date() for call in calls}


@pytest.fixture
def worlds(
    transactional_db: None, world_factory: Any, member_factory: Any, usage_factory: Any, settings: Any, request: Any
) -> Any:
    if settings.REDIS_URL:
        request.getfixturevalue("celery_worker")  # countdown runs on a worker
    acme, globex = world_factory("acme"), world_factory("globex")
    server = globex.access.server
    python = Tool.objects.create(tenant=globex.tenant, name="countdown", kind="python", python_name="countdown")
    http = Tool.objects.create(tenant=globex.tenant, name="notify", kind="http")
    Webhook.objects.create(tool=http, url="https://hooks.example.com/notify")
    ServerTool.objects.create(server=server, tool=python, position=5)
    ServerTool.objects.create(server=server, tool=http, position=6)
    ok_days = _calls(globex.access, "globex-lookup", 0, 6) | _calls(globex.access, "countdown", 9, 4)
    _calls(globex.access, "globex-lookup", 2, 3, status="error")
    _calls(acme.access, "acme-lookup", 1, 5)
    usage_factory(globex.tenant, globex.access.agent, calls=6, tool_seconds=0.4)  # the ledger's pages in the walk
    staff = member_factory((globex.tenant, "admin"), username="globex-staff", password=PASSWORD)
    operator = member_factory(username="operator", password=PASSWORD, is_superuser=True)
    ApiKey.objects.issue_key(operator, name="ci")
    return {
        "acme": acme,
        "globex": globex,
        "globex_ok_days": ok_days,
        "python": python,
        "http": http,
        "staff": staff,
        "operator": operator,
    }


def _browser(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])


def _width(page: Any) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def _shot(page: Any, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _save(page: Any) -> None:
    """Save and continue editing; the next page says it was saved."""
    with page.expect_navigation():
        page.click("button[name=_continue]")
    page.wait_for_load_state("load")
    assert "was changed successfully" in page.locator("#main").inner_text()


def _visible(page: Any, selector: str) -> bool:
    locator = page.locator(selector)
    return locator.count() > 0 and locator.first.is_visible()


def test_a_tenants_staff_walks_the_new_admin(styled_daphne: Daphne, worlds: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("admin-walk")
    base = styled_daphne.url
    globex = worlds["globex"]
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        context = browser.new_context(viewport=WINDOW)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        login(page, base, "globex-staff", PASSWORD)

        # -- the dashboard: two Chart.js charts, every day of the period, Globex's figures only ------------------
        page.goto(f"{base}/admin/?days={PERIOD_DAYS}")
        page.wait_for_function("document.querySelectorAll('canvas.chart').length === 2")
        page.wait_for_function(
            "[...document.querySelectorAll('canvas.chart')].every((c) => window.Chart && Chart.getChart(c))"
        )
        labels = page.evaluate("Chart.getChart(document.querySelector('#mcp-chart-calls canvas')).data.labels")
        assert len(labels) == PERIOD_DAYS and labels[-1] == timezone.now().date().isoformat()
        totals = page.evaluate(
            "Chart.getChart(document.querySelector('#mcp-chart-calls canvas')).data.datasets.map((d) => d.data)"
        )
        assert sum(totals[0]) == 10 and sum(totals[1]) == 3  # ok and error calls of Globex, zeros elsewhere
        # The seeded calls reach a few minutes back, so near midnight one day's calls straddle two dates.
        assert totals[0].count(0) == PERIOD_DAYS - len(worlds["globex_ok_days"])
        tools = page.evaluate("Chart.getChart(document.querySelector('#mcp-chart-durations canvas')).data.labels")
        assert sorted(tools) == ["countdown", "globex-lookup"]
        text = page.locator("#mcp-dashboard").inner_text()
        assert "acme" not in text.lower()
        assert page.locator("#mcp-kpi-calls").inner_text().strip() == "13"
        _shot(page, folder, "01-dashboard")

        # -- a tool of each kind: only its fields -----------------------------------------------------------------
        static, python, http = globex["mcp_app.tool"], worlds["python"], worlds["http"]
        page.goto(f"{base}/admin/mcp_app/tool/{python.pk}/change/")
        assert _visible(page, "#id_python_name")
        assert not _visible(page, "[data-for=id_static_result]") and not _visible(page, "[data-for=id_input_schema]")
        assert page.locator("pre.mcp-derived-schema").first.inner_text().count('"steps"') == 1
        assert page.locator(".mcp-webhook-inline").count() == 0
        page.fill("#id_title", "Countdown on a worker")
        _shot(page, folder, "02-tool-python")
        _save(page)

        page.goto(f"{base}/admin/mcp_app/tool/{static.pk}/change/")
        for field in ("static_result", "static_error", "static_cases", "input_schema"):
            assert _visible(page, f"[data-for=id_{field}]"), field
        assert page.locator(".jsoneditor").count() >= 4  # JSON in an editor, not a textarea of "null"
        assert not _visible(page, "#id_python_name") and page.locator(".mcp-webhook-inline").count() == 0
        page.evaluate(
            "document.querySelector('[data-for=id_static_result]').jsonEditor.setText("
            '\'{"content": [{"type": "text", "text": "edited in the browser"}]}\')'
        )
        _shot(page, folder, "03-tool-static")
        _save(page)
        saved = json.loads(page.locator("#id_static_result").input_value())  # the page as stored, reloaded
        assert saved == {"content": [{"type": "text", "text": "edited in the browser"}]}

        page.goto(f"{base}/admin/mcp_app/tool/{http.pk}/change/")
        assert _visible(page, ".mcp-webhook-inline") and _visible(page, "input[name$='-url']")
        assert not _visible(page, "#id_python_name") and not _visible(page, "[data-for=id_static_result]")
        page.fill("#id_title", "Notify the team")
        _shot(page, folder, "04-tool-http")
        _save(page)

        # The add page: the chosen kind decides which fields show.
        page.goto(f"{base}/admin/mcp_app/tool/add/")
        page.select_option("#id_kind", "python")
        page.wait_for_function("!document.querySelector('[data-for=id_static_result]').checkVisibility()")
        assert _visible(page, "#id_python_name") and not _visible(page, ".mcp-webhook-inline")
        page.select_option("#id_kind", "http")
        page.wait_for_function("document.querySelector('.mcp-webhook-inline').checkVisibility()")
        assert not _visible(page, "#id_python_name") and not _visible(page, "[data-for=id_static_result]")
        _shot(page, folder, "05-tool-add-http")

        # -- "Try it" on countdown: the generated form, the server preselected, live progress ------------------
        page.goto(f"{base}/admin/mcp_app/tool/{python.pk}/try/")
        assert page.locator("#id_server").input_value() == str(globex.access.server.pk)
        assert _visible(page, "#id_arg__steps") and _visible(page, "#id_arg__interval_ms")
        page.fill("#id_arg__steps", "15")
        page.fill("#id_arg__interval_ms", "1000")
        _shot(page, folder, "06-try-it-form")
        page.click("button[name=_run]")
        page.wait_for_selector("#mcp-try-it-live-progress[data-percent]")
        assert page.get_attribute("#mcp-try-it-live", "data-state") == "running"  # progress before the end
        _shot(page, folder, "07-try-it-live-progress")

        # Meanwhile, the task list: the running countdown with its progress, start and elapsed time.
        tasks = context.new_page()
        tasks.set_default_timeout(WAIT_MS)
        tasks.goto(f"{base}/admin/mcp_app/tooltask/")
        # The fragment refreshes itself (no reload here): wait for a row with a percentage the worker recorded.
        row = tasks.wait_for_function(
            """() => {
                const row = [...document.querySelectorAll('#mcp-running tr')].find(
                    (tr) => tr.innerText.includes('countdown')
                        && Number(tr.querySelector('[data-percent]')?.dataset.percent) > 0);
                return row ? row.innerText : null;
            }"""
        ).json_value()
        assert re.search(r"\d+ %", row) and "to go" in row, row
        assert re.search(r"\d+ s", row), row  # elapsed
        assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", row), row  # started
        assert "acme" not in tasks.locator("#mcp-running").inner_text().lower()
        _shot(tasks, folder, "08-task-list-running")

        page.wait_for_selector("#mcp-try-it-live[data-state=done]", timeout=60_000)
        assert '"structuredContent"' in page.locator("#mcp-try-it-result").inner_text()
        assert page.locator("#mcp-try-it-live-steps li").count() >= 15
        _shot(page, folder, "09-try-it-done")
        browser.close()


def _admin_pages(worlds: dict[str, Any]) -> list[tuple[str, str]]:
    """Every changelist, add page and one change page of every registered model, plus the custom pages."""
    pages = [("dashboard", "/admin/"), ("usage", f"/admin/mcp_app/toolcall/usage/?tenant={worlds['globex'].tenant.pk}")]
    pages.append(("try-it", f"/admin/mcp_app/tool/{worlds['python'].pk}/try/"))
    server = f"/admin/mcp_app/mcpserver/{worlds['globex'].access.server.pk}"
    pages += [("catalog-versions", f"{server}/versions/"), ("catalog-diff", f"{server}/versions/diff/")]
    pages.append(("catalog-publish", f"{server}/versions/publish/"))
    for model in admin.site._registry:
        opts = model._meta
        prefix = f"/admin/{opts.app_label}/{opts.model_name}"
        pages.append((f"{opts.model_name}-list", f"{prefix}/"))
        pages.append((f"{opts.model_name}-add", f"{prefix}/add/"))  # 403 where nobody adds (records)
        obj = model._default_manager.order_by("pk").last()
        if obj is not None:
            pages.append((f"{opts.model_name}-change", f"{prefix}/{obj.pk}/change/"))
    return pages


def test_no_admin_page_is_wider_than_the_window(styled_daphne: Daphne, worlds: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("admin-widths")
    base = styled_daphne.url
    pages = _admin_pages(worlds)
    assert len(pages) > 40
    too_wide = []
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_context(viewport=WINDOW).new_page()
        page.set_default_timeout(WAIT_MS)
        login(page, base, "operator", PASSWORD)
        for name, path in pages:
            response = page.goto(base + path)
            assert response is not None, path
            if path.endswith("/add/") and response.status == 403:
                continue  # records nobody adds by hand (sessions, tasks, tool calls)
            assert response.status == 200, (path, response.status)
            page.wait_for_load_state("load")
            width = _width(page)
            _shot(page, folder, name)
            if width > WINDOW["width"]:
                too_wide.append((path, width))
        browser.close()
    assert too_wide == []


@pytest.fixture
def echo_desk(transactional_db: None, access_factory: Any, member_factory: Any) -> Any:
    """A tenant whose server exposes ``echo`` (run inline), and an admin of it who signs in with a password."""
    access = access_factory(tools=("echo",))
    member_factory((access.tenant, "admin"), username="echo-staff", password=PASSWORD)
    return access


def test_the_dashboard_cards_and_try_it_follow_the_calls_live(styled_daphne: Daphne, echo_desk: Any) -> None:
    """The cards refresh with the running table (no reload), and "Try it" stops saying running… once answered."""
    from playwright.sync_api import sync_playwright

    def start_a_call() -> None:
        running_worker_call(echo_desk, "live_countdown")

    tool = Tool.objects.get(tenant=echo_desk.tenant, name="echo")
    base = styled_daphne.url
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_context(viewport=WINDOW).new_page()
        page.set_default_timeout(WAIT_MS)
        login(page, base, "echo-staff", PASSWORD)
        page.goto(f"{base}/admin/")
        assert page.locator("#mcp-kpi-running").inner_text().strip() == "0"
        assert "Nothing running." in page.locator("#mcp-running").inner_text()
        # The ORM refuses Playwright's thread (it runs an event loop): the call starts from another thread.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(start_a_call).result(timeout=30)
        page.wait_for_function(
            """() => document.querySelector('#mcp-running').innerText.includes('live_countdown')
                && document.querySelector('#mcp-kpi-running').textContent.trim() === '1'"""
        )

        page.goto(f"{base}/admin/mcp_app/tool/{tool.pk}/try/")
        page.fill("#id_arg__text", "live and done")
        page.click("button[name=_run]")
        page.wait_for_selector("#mcp-try-it-live[data-state=done]")
        assert "live and done" in page.locator("#mcp-try-it-result").inner_text()
        assert page.locator("#mcp-try-it-live-text").inner_text().strip() == "finished"
        browser.close()
