"""OAuth 2.1 end to end on a real daphne: the official Python SDK's ``OAuthClientProvider`` knows only the URL
``/mcp/demo`` (no agentId, no token). It discovers the protected-resource and authorization-server metadata,
registers itself (RFC 7591), and sends the person to the authorization endpoint, where headless chromium
(Playwright) signs in and consents; then ``tools/list`` and ``tools/call`` in the handshake era and in
2026-07-28. The same with a client ID metadata document served over HTTPS on loopback (a test CA daphne
trusts), and with the TypeScript SDK's OAuth client. Access tokens live 12 seconds on this daphne: once expired, the next connection
refreshes (no browser) and the old token is refused.

Chromium missing: skipped, except under ``MCP_REQUIRE_SERVICES=1`` (CI), where it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from mcp_app.protocol.versions import V2025_11_25, V2026_07_28
from tests.cimd_server import REDIRECT as CIMD_REDIRECT
from tests.cimd_server import CimdServer, cimd_server

from .browser import chromium as _chromium
from .conftest import Daphne, running_daphne

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-oauth-test-password"
REDIRECT = "http://127.0.0.1:47321/callback"
WAIT_SECONDS = 20.0
# Long enough for the first two connections to share one access token on a loaded machine: had the second one
# refreshed it, the first provider would hold a rotated-out refresh token and go back to the browser.
TOKEN_SECONDS = 12


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CimdServer]:
    """Client ID metadata documents over HTTPS on loopback, with a test CA that daphne trusts."""
    with cimd_server(tmp_path_factory.mktemp("cimd")) as server:
        yield server


@pytest.fixture(scope="module")
def oauth_daphne(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, documents: CimdServer
) -> Iterator[Daphne]:
    env = {
        "MCP_OAUTH_ACCESS_TOKEN_SECONDS": str(TOKEN_SECONDS),
        "SSL_CERT_FILE": str(documents.ca_path),
        "MCP_OAUTH_CIMD_ALLOWED_NETWORKS": "127.0.0.1/32",
    }
    with running_daphne(tmp_path_factory, env) as server:
        yield server


@pytest.fixture
def demo(transactional_db: None, access_factory: Any, member_factory: Any) -> Any:
    access = access_factory(server_id="demo")
    member_factory((access.tenant, "viewer"), username="alice", password=PASSWORD, is_staff=False)
    return access


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The person at the browser: signs in as alice and authorizes, once per authorization request."""

    def __init__(self, page: Any, redirect: str = REDIRECT) -> None:
        self.page = page
        self.redirect = redirect
        self.visits = 0
        self.callback: asyncio.Future[str] | None = None

    async def redirect_handler(self, url: str) -> None:
        self.visits += 1
        self.callback = asyncio.get_running_loop().create_future()
        page = self.page

        async def catch(route: Any) -> None:
            if self.callback is not None and not self.callback.done():
                self.callback.set_result(route.request.url)
            await route.fulfill(status=200, body="You can close this window.")

        await page.route(f"{self.redirect}*", catch)
        await page.goto(url)
        if "/oauth/login/" in page.url:
            await page.fill("#id_username", "alice")
            await page.fill("#id_password", PASSWORD)
            await page.click("form button[type=submit], form input[type=submit]")
        await page.wait_for_selector("#authorizationForm")
        assert "Not verified" in await page.content()
        await page.click("[name=allow]")

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.callback is not None
        url = httpx.URL(await asyncio.wait_for(self.callback, WAIT_SECONDS))
        params = url.params
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))


def provider(base: str, storage: MemoryStorage, browser: Browser, **extra: Any) -> OAuthClientProvider:
    metadata = OAuthClientMetadata(
        client_name="SDK e2e",
        redirect_uris=[browser.redirect],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        server_url=f"{base}/mcp/demo",
        client_metadata=metadata,
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
        **extra,
    )


async def use(base: str, auth: OAuthClientProvider, mode: str) -> tuple[str, list[str], str]:
    async with httpx2.AsyncClient(auth=auth, timeout=WAIT_SECONDS) as http_client:
        transport = streamable_http_client(f"{base}/mcp/demo", http_client=http_client)
        async with Client(transport, mode=mode, read_timeout_seconds=WAIT_SECONDS) as client:
            tools = await client.list_tools()
            called = await client.call_tool("echo", {"text": f"hello {mode}"})
            version = client.protocol_version
    return version, [tool.name for tool in tools.tools], called.content[0].text


async def test_the_python_sdk_connects_with_oauth_in_both_eras(oauth_daphne: Daphne, demo: Any) -> None:
    from playwright.async_api import async_playwright

    executable = _chromium()
    base = oauth_daphne.url
    storage = MemoryStorage()
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        page = await chromium.new_page()
        page.set_default_timeout(WAIT_SECONDS * 1000)
        browser = Browser(page)
        async with asyncio.timeout(WAIT_SECONDS * 3):
            first = provider(base, storage, browser)
            legacy = await use(base, first, "legacy")
            modern = await use(base, provider(base, storage, browser), "auto")
        await chromium.close()
    assert legacy[0] == V2025_11_25 and modern[0] == V2026_07_28
    assert "echo" in legacy[1] and legacy[1] == modern[1]
    assert (legacy[2], modern[2]) == ("hello legacy", "hello auto")
    assert browser.visits == 1, oauth_daphne.stderr()  # the second connection reused the tokens
    assert storage.client is not None and storage.client.client_id  # registered dynamically

    # Once the access token has expired, the next connection refreshes it (no browser) and the old one is refused.
    assert storage.tokens is not None
    old = storage.tokens.access_token
    deadline = time.monotonic() + TOKEN_SECONDS + 5
    async with httpx.AsyncClient(timeout=5.0) as http:
        headers = {"Authorization": f"Bearer {old}", "Accept": "application/json, text/event-stream"}
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        while (reply := await http.post(f"{base}/mcp/demo", json=ping, headers=headers)).status_code == 200:
            assert time.monotonic() < deadline, "the access token never expired"
            await asyncio.sleep(0.2)
        assert reply.status_code == 401
        assert 'error="invalid_token"' in reply.headers["www-authenticate"]
        assert (
            f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp/demo"'
            in reply.headers["www-authenticate"]
        )
    # The provider counts the token's lifetime from when it received it, a moment after the server issued it:
    # until it too sees the token expired, it would present it and, refused, start over in the browser.
    while first.context.is_token_valid():
        assert time.monotonic() < deadline + 5, "the provider never saw its token expire"
        await asyncio.sleep(0.05)
    async with asyncio.timeout(WAIT_SECONDS):
        again = await use(base, first, "legacy")  # the provider that obtained the token knows when it expires
    assert again[2] == "hello legacy"
    assert browser.visits == 1
    assert storage.tokens.access_token != old


async def test_the_python_sdk_connects_with_a_client_id_metadata_document(
    oauth_daphne: Daphne, demo: Any, documents: CimdServer
) -> None:
    """No registration: the client's id is the HTTPS URL of its metadata document, which mcp-host fetches."""
    from playwright.async_api import async_playwright

    executable = _chromium()
    base = oauth_daphne.url
    storage = MemoryStorage()
    client_id = documents.url("client", "sdk")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        page = await chromium.new_page()
        page.set_default_timeout(WAIT_SECONDS * 1000)
        browser = Browser(page, redirect=CIMD_REDIRECT)
        async with asyncio.timeout(WAIT_SECONDS * 2):
            legacy = await use(base, provider(base, storage, browser, client_metadata_url=client_id), "legacy")
            modern = await use(base, provider(base, storage, browser, client_metadata_url=client_id), "auto")
        await chromium.close()
    assert (legacy[0], modern[0]) == (V2025_11_25, V2026_07_28), oauth_daphne.stderr()[-3000:]
    assert (legacy[2], modern[2]) == ("hello legacy", "hello auto")
    assert storage.client is not None and storage.client.client_id == client_id
    assert "/client/sdk.json" in documents.fetched


def test_the_typescript_sdk_connects_with_oauth(oauth_daphne: Daphne, demo: Any) -> None:
    """``ts_oauth_client.mjs``: the TypeScript SDK's OAuth client (dynamic registration, PKCE, resource); this
    test is the person at the browser (headless chromium) and hands the redirect back to it."""
    from playwright.sync_api import sync_playwright

    from .node_tools import any_node, package_dir

    executable = _chromium()
    node, sdk = any_node(), package_dir("@modelcontextprotocol/sdk")
    redirect = "http://127.0.0.1:47323/callback"
    env = {
        **os.environ,
        "MCP_TS_SDK_DIR": str(sdk),
        "MCP_URL": f"{oauth_daphne.url}/mcp/demo",
        "MCP_REDIRECT": redirect,
    }
    script = Path(__file__).with_name("ts_oauth_client.mjs")
    process = subprocess.Popen(
        [node, str(script)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        first = json.loads(process.stdout.readline() or "{}")
        assert "authorize" in first, process.stderr.read() if process.stderr else ""
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
            page = chromium.new_page()
            page.set_default_timeout(WAIT_SECONDS * 1000)
            seen: list[str] = []

            def catch(route: Any) -> None:
                seen.append(route.request.url)
                route.fulfill(status=200, body="done")

            page.route(f"{redirect}*", catch)
            page.goto(first["authorize"])
            page.fill("#id_username", "alice")
            page.fill("#id_password", PASSWORD)
            page.click("form button[type=submit], form input[type=submit]")
            page.wait_for_selector("#authorizationForm")
            page.click("[name=allow]")
            deadline = time.monotonic() + WAIT_SECONDS
            while not seen:
                assert time.monotonic() < deadline, "no redirect back to the client"
                page.wait_for_timeout(50)
            chromium.close()
        assert "iss=" in seen[0]
        process.stdin.write(seen[0] + "\n")
        process.stdin.flush()
        out, err = process.communicate(timeout=WAIT_SECONDS * 2)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])["result"]
    assert result["text"] == "hello typescript"
    assert "echo" in result["tools"]
    assert result["authorizations"] == 1 and result["clientId"]


def test_the_typescript_sdk_in_a_browser_page_connects_with_oauth(
    oauth_daphne: Daphne, transactional_db: None, access_factory: Any, member_factory: Any
) -> None:
    """``ts_oauth_page.mjs``: the TypeScript SDK's OAuth client running in a chromium page, as the MCP Inspector
    does, on an origin that is not mcp-host's. Every step is a CORS request the browser checks: the MCP
    endpoint's 401 (WWW-Authenticate exposed), the metadata (preflighted: the SDK sends MCP-Protocol-Version),
    registration, token, then the session. The server lists the page's origin, as docs/oauth.md asks (a server
    id of its own: daphne has never seen it, so it reads the origin from the database)."""
    from playwright.sync_api import sync_playwright

    from .browser import sdk_page_server
    from .node_tools import package_dir

    executable = _chromium()
    node_modules = package_dir("@modelcontextprotocol/sdk").parents[1]
    script = Path(__file__).with_name("ts_oauth_page.mjs")
    with sdk_page_server(node_modules, script) as origin:
        access = access_factory(server_id=f"browser-{secrets.token_hex(4)}", allowed_origins=[origin])
        member_factory((access.tenant, "viewer"), username="alice", password=PASSWORD, is_staff=False)
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
            page = chromium.new_page()
            page.set_default_timeout(WAIT_SECONDS * 1000)
            failures: list[str] = []
            page.on("console", lambda message: failures.append(message.text) if message.type == "error" else None)
            page.goto(f"{origin}/?server={oauth_daphne.url}/mcp/{access.server.server_id}")
            try:
                page.wait_for_url("**/oauth/login/**")  # the 401, discovery and registration went through CORS
            except Exception:
                pytest.fail(f"{page.evaluate('() => window.mcpResult')} {failures}")
            page.fill("#id_username", "alice")
            page.fill("#id_password", PASSWORD)
            page.click("form button[type=submit], form input[type=submit]")
            page.wait_for_selector("#authorizationForm")
            page.click("[name=allow]")
            page.wait_for_url(f"{origin}/callback?**")
            result = page.wait_for_function("() => window.mcpResult").json_value()
            chromium.close()
    assert "error" not in result, (result, failures)
    assert result["text"] == "hello browser"
    assert result["outcome"] == "AUTHORIZED" and result["clientId"]
