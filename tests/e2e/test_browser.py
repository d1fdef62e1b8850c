"""A tenant admin runs their tenant from a real browser, end to end.

Debian's chromium, driven by Playwright, against a real daphne (DEBUG off, static files collected): the Globex
admin logs in and sees the styled admin, creates a static tool, binds it to a server, issues a token limited to
that one tool and reads the raw value once from the page. The official Python SDK client then uses that token:
it lists exactly that tool (the server exposes another one too) and calls it. The call appears in the audit list
and on the usage page.

Chromium missing: skipped, except under ``MCP_REQUIRE_SERVICES=1`` (CI), where it fails (``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_app.models import Agent, McpServer, ServerTool, Tenant, Tool

from .browser import chromium, login
from .conftest import Daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-browser-test-password"
WAIT_SECONDS = 15.0
AUDIT_WAIT_SECONDS = 10.0


@pytest.fixture
def globex(transactional_db: None, member_factory: Any) -> dict[str, Any]:
    """Globex with a server already exposing one tool, an agent, and its admin (a staff user with a password)."""
    tenant = Tenant.objects.create(slug="globex", name="Globex")
    server = McpServer.objects.create(tenant=tenant, server_id="globex-server", name="Globex server")
    other = Tool.objects.create(tenant=tenant, name="other", static_result={"content": [{"type": "text", "text": "x"}]})
    ServerTool.objects.create(server=server, tool=other, position=0)
    agent = Agent.objects.create(tenant=tenant, agent_id="globex-bot", name="Globex bot")
    admin = member_factory((tenant, "admin"), username="globex-admin", password=PASSWORD)
    return {"tenant": tenant, "server": server, "agent": agent, "admin": admin}


def _login(page: Any, base: str) -> None:
    login(page, base, "globex-admin", PASSWORD)


def _assert_added(page: Any) -> None:
    """The save's redirect shows Django's success message (waited for: the next page may still be loading)."""
    from playwright.sync_api import expect

    expect(page.locator("#main")).to_contain_text("was added successfully", timeout=WAIT_SECONDS * 1000)


def _set_json(page: Any, field: str, value: Any) -> None:
    """Type JSON into a field's editor (the posted textarea follows the editor)."""
    page.evaluate(
        "([field, text]) => document.querySelector(`[data-for=id_${field}]`).jsonEditor.setText(text)",
        [field, json.dumps(value)],
    )


def _pick_autocomplete(page: Any, field: str, text: str) -> None:
    page.locator(f"#id_{field} + .select2 .select2-selection").click()
    page.locator(".select2-search__field").fill(text)
    page.locator(".select2-results__option", has_text=text).first.click()


def _choose(page: Any, field: str, label: str) -> None:
    page.select_option(f"#id_{field}_from", label=label)
    page.click(f"#id_{field}_add")


async def _use_token(base: str, raw_token: str) -> tuple[list[str], str]:
    url = f"{base}/mcp/globex-server?agentId=globex-bot"
    async with (
        asyncio.timeout(WAIT_SECONDS),
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {raw_token}"}) as http_client,
    ):
        transport = streamable_http_client(url, http_client=http_client)
        async with Client(transport, mode="legacy", read_timeout_seconds=WAIT_SECONDS) as client:
            listed = await client.list_tools()
            called = await client.call_tool("forecast", {"city": "Springfield"})
    assert called.is_error is False
    return [tool.name for tool in listed.tools], called.content[0].text


def test_a_tenant_admin_runs_their_tenant_from_the_browser(styled_daphne: Daphne, globex: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    executable = chromium()
    base = styled_daphne.url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_default_timeout(WAIT_SECONDS * 1000)
        _login(page, base)

        # The admin is styled: unfold's stylesheet loaded (rules parsed) and applies.
        loaded = page.evaluate(
            """() => [...document.styleSheets].some(
                   (sheet) => (sheet.href || '').includes('/static/unfold/css/styles') && sheet.cssRules.length > 0)"""
        )
        assert loaded, styled_daphne.stderr()
        assert page.evaluate("getComputedStyle(document.body).fontFamily").startswith("Inter")

        # A static tool, in the only tenant (never picked).
        page.goto(f"{base}/admin/mcp_app/tool/add/")
        assert page.locator("#id_tenant").get_attribute("type") == "hidden"
        page.fill("#id_name", "forecast")
        page.fill("#id_description", "Tomorrow's weather.")
        _set_json(page, "input_schema", {"type": "object", "properties": {"city": {"type": "string"}}})
        _set_json(page, "static_result", {"content": [{"type": "text", "text": "sunny"}]})
        page.click("[name=_save]")
        _assert_added(page)

        # Bound to the server, picked by autocomplete.
        page.goto(f"{base}/admin/mcp_app/servertool/add/")
        _pick_autocomplete(page, "server", "globex-server")
        _pick_autocomplete(page, "tool", "forecast")
        page.fill("#id_position", "1")
        page.click("[name=_save]")
        _assert_added(page)

        # A token limited to that one tool, from the agent's page; the raw value is shown once.
        page.goto(f"{base}/admin/mcp_app/agent/{globex['agent'].pk}/change/")
        page.click("text=Issue a token")
        page.fill("#id_name", "browser")
        _choose(page, "servers", str(globex["server"]))
        page.check("#id_limit_to_grant")
        _choose(page, "granted_tools", "forecast (globex)")
        page.click("[name=_save]")
        raw_token = page.locator("#mcp-new-token").inner_text().strip()
        assert raw_token.startswith("mcp_")
        page.reload()
        assert raw_token not in page.content()
        storage = page.context.storage_state()
        browser.close()

    # The official SDK client with that token: exactly the granted tool, and it answers.
    names, text = asyncio.run(_use_token(base, raw_token))
    assert names == ["forecast"]
    assert text == "sunny"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        page = browser.new_context(storage_state=storage).new_page()
        page.set_default_timeout(WAIT_SECONDS * 1000)
        # The audit list: daphne writes its buffer at least every second; poll the page for a bounded time.
        deadline = time.monotonic() + AUDIT_WAIT_SECONDS
        rows = ""
        while time.monotonic() < deadline:
            page.goto(f"{base}/admin/mcp_app/toolcall/?tool=forecast")
            rows = page.locator("#result_list tbody").inner_text() if page.locator("#result_list").count() else ""
            if "forecast" in rows:
                break
        assert "forecast" in rows and "globex-bot" in rows, rows
        # The usage page counts it.
        page.goto(f"{base}/admin/mcp_app/toolcall/usage/")
        row = page.locator("#usage-per-tool tbody tr", has_text="forecast").inner_text().split("\t")
        assert [cell.strip() for cell in row[:3]] == ["forecast", "1", "0"]
        browser.close()
