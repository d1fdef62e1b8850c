"""Catalog versions in the admin, in a real browser at 1,366 px (Debian's chromium driven by Playwright against a
daphne as in production: DEBUG off, static files collected), as Globex's tenant admin; Acme's server exists too
and never shows:

- the server's page links to its catalog versions; the versions page shows the served version and the draft,
  their digests, and the held upstream change that publishing approves;
- the diff of the draft against the served version: the changed tool's description, old beside new;
- the held upstream changes list and one change with its diff, whose link publishes the server's draft: the
  confirmation page shows the diff and what it approves, and with a note, the message names the new version, now
  the one served;
- rolling back to the first version from its confirmation page.

No page is wider than the window. Screenshots go to ``$MCP_ARTIFACTS_DIR/catalog-versions/`` (default
``artifacts/screenshots/``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mcp_app.catalog.versions import publish
from mcp_app.models import CatalogChange, CatalogVersion, McpServer

from .browser import WINDOW, chromium, login, screenshots
from .conftest import Daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-browser-test-password"
WAIT_MS = 20_000
FIRST, SECOND = "Looks things up.", "Looks things up, fast."


@pytest.fixture
def catalog(transactional_db: None, world_factory: Any, member_factory: Any) -> dict[str, Any]:
    acme, globex = world_factory("acme"), world_factory("globex")
    server = globex["mcpserver"]
    McpServer.objects.filter(pk=server.pk).update(review_edits=True)
    CatalogChange.objects.filter(server=server).delete()  # the world's record: the change below is the only one
    tool = globex["tool"]
    tool.description = FIRST
    tool.save()
    first = publish(McpServer.objects.get(pk=server.pk), note="reviewed by hand")
    tool.refresh_from_db()
    tool.description = SECOND
    tool.save()
    held = CatalogChange.objects.create(
        tenant=globex.tenant,
        server=server,
        upstream=globex["upstream"],
        list_name="tools",
        key="globex_search",
        change=CatalogChange.Change.CHANGED,
        old={"name": "globex_search", "description": "Search.", "inputSchema": {"type": "object"}},
        new={
            "name": "globex_search",
            "description": "Search, and mail the results.",
            "inputSchema": {"type": "object"},
        },
    )
    member_factory((globex.tenant, "admin"), username="globex-staff", password=PASSWORD)
    return {"acme": acme, "globex": globex, "server": server, "tool": tool, "first": first, "held": held}


def _browser(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])


def _fits(page: Any, folder: Path, name: str) -> None:
    """The page fits the window, and a screenshot of it is kept."""
    page.wait_for_load_state("load")
    width = int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))
    assert width <= WINDOW["width"], (page.url, width)
    assert "acme" not in page.locator("#content").inner_text().lower()
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _visit(page: Any, url: str, folder: Path, name: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)
    _fits(page, folder, name)


def _field_values(page: Any, field: str) -> list[str]:
    return [text.strip() for text in page.locator(f'tr[data-field="{field}"] pre').all_inner_texts()]


def test_a_tenant_admin_reviews_publishes_and_rolls_back(styled_daphne: Daphne, catalog: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("catalog-versions")
    base, server, first = styled_daphne.url, catalog["server"], catalog["first"]
    versions_path = f"/admin/mcp_app/mcpserver/{server.pk}/versions/"
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_context(viewport=WINDOW).new_page()
        page.set_default_timeout(WAIT_MS)
        login(page, base, "globex-staff", PASSWORD)

        # -- from the server's page to its versions ------------------------------------------------------------
        _visit(page, f"{base}/admin/mcp_app/mcpserver/{server.pk}/change/", folder, "01-server")
        assert page.locator("input[name=review_edits]").is_checked()
        with page.expect_navigation():
            page.locator(f'a[href="{versions_path}"]', has_text="Catalog versions").click()  # the object tool
        assert page.url == f"{base}{versions_path}"
        _fits(page, folder, "02-versions-draft-differs")
        draft = page.locator("#catalog-draft").inner_text()
        assert f"Differs from version {first.number}, which is served now." in draft
        served = page.locator(f'#catalog-versions tr[data-version="{first.number}"]').inner_text()
        assert first.digest[:12] in served and "served" in served and "reviewed by hand" in served
        assert "globex_search" in page.locator("#catalog-held").inner_text()

        # -- the diff: the description, old beside new ---------------------------------------------------------
        with page.expect_navigation():
            page.get_by_role("link", name=re.compile(r"^Diff v\d+ → draft$")).click()
        _fits(page, folder, "03-diff-served-to-draft")
        assert "0 added, 0 removed, 1 changed" in page.locator("#diff-summary").inner_text()
        assert _field_values(page, "description") == [f'"{FIRST}"', f'"{SECOND}"']

        # -- the held upstream change, its diff, and approving it: publishing the server's draft ------------------
        _visit(page, f"{base}/admin/mcp_app/catalogchange/", folder, "04-held-changes")
        assert "globex_search" in page.locator("#result_list").inner_text()
        _visit(page, f"{base}/admin/mcp_app/catalogchange/{catalog['held'].pk}/change/", folder, "05-held-change")
        assert _field_values(page, "description") == ['"Search."', '"Search, and mail the results."']
        with page.expect_navigation():
            page.get_by_role("link", name="Publish the draft of globex-server").click()
        _fits(page, folder, "06-publish-confirm")
        assert "This approves 1 held upstream change." in page.locator("#diff-summary").inner_text()
        assert _field_values(page, "description") == [f'"{FIRST}"', f'"{SECOND}"']
        page.fill("input[name=note]", "faster lookups")
        with page.expect_navigation():
            page.get_by_role("button", name="Publish").click()
        assert page.url == f"{base}{versions_path}"
        message = page.locator("#main").inner_text()
        published = re.search(r"Published version (\d+) of globex-server\.", message)
        assert published is not None, message
        second = int(published.group(1))
        assert f"Published: version {second} serves exactly this." in page.locator("#catalog-draft").inner_text()
        assert "faster lookups" in page.locator(f'#catalog-versions tr[data-version="{second}"]').inner_text()
        _fits(page, folder, "07-published")

        # -- roll back to the first version --------------------------------------------------------------------
        with page.expect_navigation():
            page.get_by_role("link", name=f"roll back to v{first.number}…").click()
        _fits(page, folder, "08-rollback-confirm")
        assert _field_values(page, "description") == [f'"{SECOND}"', f'"{FIRST}"']
        with page.expect_navigation():
            page.get_by_role("button", name=f"Roll back to version {first.number}").click()
        message = page.locator("#main").inner_text()
        assert f"Rolled back globex-server to version {first.number}" in message
        _fits(page, folder, "09-rolled-back")

        browser.close()

    # What the pages did (read after the browser: the ORM is not called from Playwright's event loop).
    made = CatalogVersion.objects.get(server=server, number=second)
    assert (made.note, made.created_by.username) == ("faster lookups", "globex-staff")
    served_now = McpServer.objects.get(pk=server.pk).published_version
    assert (served_now.source, served_now.rolled_back_to, served_now.digest) == ("rollback", first.number, first.digest)
