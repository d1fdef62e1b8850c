"""The OAuth sign-in and consent pages in a real browser, as a person meets them: Debian's chromium driven by
Playwright against a daphne as in production (DEBUG off, static files collected).

An application registers itself ("Claude", stating https://claude.ai) with a loopback redirect and sends the
browser to the authorization endpoint: the sign-in page; a person who is not a member of the server's tenant
signs in and is refused, with a way back to the client (``access_denied``, ``state``, ``iss``); they switch
account to a member, who sees the consent page (where the answer goes, and the loopback warning), authorizes, and
the browser reaches the client's redirect with ``code``, ``state`` and ``iss``; then the member's consents page.

Each page must load unfold's stylesheet and be drawn with it (input borders visible, the main button filled): a
screenshot of each goes to ``$MCP_ARTIFACTS_DIR/oauth-pages/`` (default ``artifacts/screenshots/``).
Chromium missing: skipped, except under ``MCP_REQUIRE_SERVICES=1`` (CI), where it fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.oauth_flow import REDIRECT, pkce

from .browser import WINDOW, chromium, screenshots
from .conftest import Daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-oauth-pages-password"
WAIT_MS = 20_000
TRANSPARENT = "rgba(0, 0, 0, 0)"


@pytest.fixture
def people(transactional_db: None, access_factory: Any, member_factory: Any) -> dict[str, Any]:
    access = access_factory()
    member_factory((access.tenant, "viewer"), username="member", password=PASSWORD, is_staff=False)
    member_factory(username="outsider", password=PASSWORD, is_staff=False)
    return {"server": access.server}


def _shot(page: Any, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _assert_themed(page: Any, main_button: str | None) -> None:
    """unfold's stylesheet loaded and applied: visible borders on every text input, the main button filled."""
    loaded = page.evaluate(
        """() => [...document.styleSheets].some(
            (sheet) => (sheet.href || '').endsWith('/unfold/css/styles.css') && sheet.cssRules.length > 100)"""
    )
    assert loaded, f"{page.url}: unfold's stylesheet did not load"
    assert page.locator("#unfold-theme-colors").count() == 1, f"{page.url}: drawn without the theme's colours"
    borders = page.evaluate(
        """() => [...document.querySelectorAll('input[type=text], input[type=password]')]
            .filter((input) => input.offsetParent !== null)
            .map((input) => { const style = getComputedStyle(input);
                              return [input.name, style.borderTopStyle, style.borderTopWidth]; })"""
    )
    for name, style, width in borders:
        assert style != "none" and width != "0px", f"{page.url}: input {name} has no visible border"
    if main_button is None:
        return
    button = page.locator(main_button).first
    assert button.is_visible(), f"{page.url}: no {main_button}"
    background = button.evaluate("(element) => getComputedStyle(element).backgroundColor")
    assert background != TRANSPARENT, f"{page.url}: {main_button} is drawn as plain text"


def _sign_in(page: Any, username: str) -> None:
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.click("#login-form [type=submit]")


def test_the_sign_in_consent_refused_and_consents_pages(styled_daphne: Daphne, people: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    folder = screenshots("oauth-pages")
    base = styled_daphne.url
    server = people["server"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        context = browser.new_context(viewport=WINDOW)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        registered = page.request.post(
            f"{base}/oauth/register/",
            data={
                "client_name": "Claude",
                "client_uri": "https://claude.ai",
                "redirect_uris": [REDIRECT],
                "token_endpoint_auth_method": "none",
            },
        )
        assert registered.status == 201, registered.text()
        params = {
            "response_type": "code",
            "client_id": registered.json()["client_id"],
            "redirect_uri": REDIRECT,
            "code_challenge": pkce()[1],
            "code_challenge_method": "S256",
            "state": "br0wser-state",
            "scope": "mcp",
            "resource": f"{base}/mcp/{server.server_id}",
        }

        # -- sign-in: the authorization request asks for it --------------------------------------------------------
        page.goto(f"{base}/oauth/authorize/?{urlencode(params)}")
        assert urlsplit(page.url).path == "/oauth/login/"
        _assert_themed(page, "#login-form [type=submit]")
        _shot(page, folder, "1-sign-in")

        # -- refused: not a member; a way back to the client, and a way to switch account -------------------------
        _sign_in(page, "outsider")
        assert "not a member" in page.locator("body").inner_text()
        _assert_themed(page, "button[form=switch-account]")
        back = page.get_by_role("link", name="Back to Claude").get_attribute("href")
        assert back is not None and back.startswith(f"{REDIRECT}?")
        denied = parse_qs(urlsplit(back).query)
        assert (denied["error"], denied["state"], denied["iss"]) == (["access_denied"], ["br0wser-state"], [base])
        _shot(page, folder, "2-refused")

        # -- switch account: back to the same request, signed in as a member: the consent page -------------------
        with page.expect_navigation():
            page.click("button[form=switch-account]")
        assert urlsplit(page.url).path == "/oauth/login/"
        _sign_in(page, "member")
        assert urlsplit(page.url).path == "/oauth/authorize/"
        _assert_themed(page, "[name=allow]")
        assert page.locator("#signed-in-as").inner_text() == "member"
        destination = page.locator("#redirect-destination").inner_text()
        assert "127.0.0.1:33333" in destination and "this device" in destination
        _shot(page, folder, "3-consent")
        page.check("input[name=grant][value=chosen]")
        page.locator("input[name=tools]").first.wait_for(state="visible")  # the lists show for "chosen"
        _shot(page, folder, "3-consent-chosen")
        page.check("input[name=grant][value=all]")

        # Nothing listens on the client's loopback port: the browser answers for the client.
        page.route(f"{REDIRECT}*", lambda route: route.fulfill(status=200, body="You can close this window."))
        page.click("[name=allow]")
        page.wait_for_url(f"{REDIRECT}?*")
        answer = parse_qs(urlsplit(page.url).query)
        assert answer["code"]
        assert (answer["state"], answer["iss"]) == (["br0wser-state"], [base])

        # -- the person's consents -------------------------------------------------------------------------------
        page.goto(f"{base}/oauth/consents/")
        _assert_themed(page, "#consents button[type=submit]")
        assert "Claude" in page.locator("#consents").inner_text()
        _shot(page, folder, "4-consents")

        # -- a request that cannot be answered to the client (its redirect URI is not registered) ---------------
        page.goto(f"{base}/oauth/authorize/?{urlencode({**params, 'redirect_uri': 'https://elsewhere.example/cb'})}")
        assert "invalid" in page.locator("body").inner_text().lower()
        _assert_themed(page, None)
        _shot(page, folder, "5-invalid-request")
        browser.close()
