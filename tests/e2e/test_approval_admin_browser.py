"""A call waiting for a person, end to end (issue 28): a real daphne as in production (DEBUG off, static files
collected), a 2026-07-28 client declaring the tasks extension over HTTP, and Debian's chromium driven by Playwright
at 1,366 px as Globex's tenant admin.

The client calls ``archive_reports`` (a static tool that requires approval) and gets a task at once, ``working``,
waiting for approval. In the admin the sidebar counts one approval waiting (Acme's pending one is neither counted
nor listed); its page shows the agent, the server, the tool and the exact arguments; the admin approves it with a
note and the page says so. The client's ``tasks/get`` then shows the task completed with the tool's result, and
the approval is used, decided by that admin. Screenshots go to ``$MCP_ARTIFACTS_DIR/approval-admin/`` (default
``artifacts/screenshots/``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from mcp_app.models import Approval, Tool
from tests.helpers import (
    DECLARING,
    READ_TIMEOUT_SECONDS,
    endpoint,
    modern_body,
    post_headers,
    routing_headers,
    wait_until_blocking,
)

from .browser import WINDOW, chromium, login, screenshots
from .conftest import Daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-browser-test-password"
WAIT_MS = 20_000
ARGUMENTS = {"folder": "/srv/reports/2026", "older_than_days": 30, "dry_run": False, "tags": ["q1", "<eu>"]}
RESULT = {"content": [{"type": "text", "text": "archived 3 reports"}]}


@pytest.fixture
def world(transactional_db: None, world_factory: Any, member_factory: Any, approval_factory: Any) -> dict[str, Any]:
    acme, globex = world_factory("acme"), world_factory("globex")
    for one in (acme, globex):  # the worlds' own approvals are not this test's
        Approval.objects.filter(tenant=one.tenant).delete()
    tool = Tool.objects.create(
        tenant=globex.tenant,
        name="archive_reports",
        kind=Tool.Kind.STATIC,
        input_schema={"type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]},
        static_result=RESULT,
        requires_approval=True,
    )
    globex.access.server.tool_bindings.create(tool=tool, position=1)
    approval_factory(acme.access.server, acme.access.agent, "drop_table", {"table": "orders"})
    member_factory((globex.tenant, "admin"), username="globex-approver", password=PASSWORD)
    return {"acme": acme, "globex": globex}


def _post(http: httpx.Client, url: str, access: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 request of a client declaring tasks: its JSON-RPC result (200, JSON)."""
    body = modern_body(method, params, capabilities=DECLARING)
    response = http.post(url, json=body, headers={**post_headers(access), **routing_headers(body)})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert "error" not in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def _browser(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])


def test_a_tenant_admin_approves_a_parked_task_in_the_admin(styled_daphne: Daphne, world: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("approval-admin")
    base, globex = styled_daphne.url, world["globex"]
    access = globex.access
    url = endpoint(base, access)
    with httpx.Client(timeout=READ_TIMEOUT_SECONDS) as http:
        created = _post(http, url, access, "tools/call", {"name": "archive_reports", "arguments": ARGUMENTS})
        assert (created["resultType"], created["status"]) == ("task", "working")
        assert created["statusMessage"].startswith("Waiting for approval ")
        task_id = created["taskId"]
        approval_id = int(created["statusMessage"].rsplit(" ", 1)[1])

        with sync_playwright() as playwright:
            browser = _browser(playwright)
            page = browser.new_context(viewport=WINDOW).new_page()
            page.set_default_timeout(WAIT_MS)
            login(page, base, "globex-approver", PASSWORD)

            # The sidebar counts the one approval waiting in Globex; the list shows it, not Acme's.
            response = page.goto(f"{base}/admin/mcp_app/approval/")
            assert response is not None and response.status == 200
            entry = page.locator('a.flex[href="/admin/mcp_app/approval/"]')  # the sidebar's (the breadcrumb's too)
            assert re.sub(r"\s+", " ", entry.inner_text()).strip().endswith("Approvals 1")
            listed = page.locator("#result_list").inner_text()
            assert "archive_reports" in listed and "drop_table" not in listed and "acme" not in listed.lower()
            page.screenshot(path=str(folder / "01-approvals-list.png"), full_page=True)

            # Its page: the agent, the server, the tool and the exact arguments; then the decision.
            with page.expect_navigation():
                page.locator(f'#result_list a[href="/admin/mcp_app/approval/{approval_id}/change/"]').first.click()
            content = page.locator("#content").inner_text()
            for expected in (access.agent.agent_id, access.server.server_id, "archive_reports"):
                assert expected in content, expected
            shown = page.locator("pre.mcp-approval-arguments").inner_text()
            assert json.loads(shown) == ARGUMENTS
            width = int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))
            assert width <= WINDOW["width"]
            page.screenshot(path=str(folder / "02-approval-page.png"), full_page=True)

            page.fill("#mcp-approval-note", "Checked the folder with the team")
            with page.expect_navigation():
                page.click('#mcp-approval-decision button[value="approve"]')
            message = page.locator("#main").inner_text()
            assert f"archive_reports by {access.agent.agent_id} approved: the call runs, once." in message
            assert page.locator("#mcp-approval-decision").count() == 0  # decided once
            page.screenshot(path=str(folder / "03-approved.png"), full_page=True)
            browser.close()

        # The client's task completes with the tool's result.
        def completed() -> dict[str, Any] | None:
            got = _post(http, url, access, "tasks/get", {"taskId": task_id})
            return got if got["status"] == "completed" else None

        done = wait_until_blocking(completed, timeout=WAIT_MS / 1000, what="the approved task to complete")
        assert done["result"]["content"] == RESULT["content"]
        assert done["result"].get("isError") in (None, False)

    approval = Approval.objects.select_related("decided_by").get(pk=approval_id)
    assert (approval.status, approval.decided_by.username, approval.note) == (
        "used",
        "globex-approver",
        "Checked the folder with the team",
    )
    assert approval.arguments == ARGUMENTS and approval.tool_name == "archive_reports"
