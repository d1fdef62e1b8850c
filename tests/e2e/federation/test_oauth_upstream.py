"""An upstream that requires OAuth: mcp-host gets a token with the client credentials its tenant configured.

The upstream (the SDK's ``MCPServer`` as a resource server, beside a minimal authorization server granting
``client_credentials``) answers 401 without a token; mcp-host discovers its authorization server (RFC 9728, RFC
8414) through the SDK's provider, exchanges the credentials, and syncs and calls with the token. Wrong
credentials fail the sync with the reason and import nothing. The client's own token is never sent upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Access
from tests.e2e.conftest import free_port
from tests.federation.upstream_server import UpstreamProcess
from tests.helpers import call, result_of, rpc

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_pool")]

CLIENT = ("mcp-host-tenant", "s3cret-value")


@pytest.fixture
def oauth_upstream(tmp_path: Path) -> Iterator[UpstreamProcess]:
    port = free_port()
    upstream = UpstreamProcess("stateless", port, tmp_path / "oauth-upstream.log", oauth=CLIENT)
    upstream.start()
    yield upstream
    upstream.stop()


def register(access: Access, upstream: UpstreamProcess, secret: str) -> Any:
    from mcp_app.federation.sync import bind, sync_upstream
    from mcp_app.models import Upstream

    registered = Upstream(
        tenant=access.tenant,
        name="protected",
        url=upstream.url,
        prefix="p_",
        oauth_client_id=CLIENT[0],
        oauth_issuer=upstream.base,
    )
    registered.oauth_client_secret = secret
    registered.save()
    report = sync_upstream(registered)
    bind(registered, access.server)
    registered.refresh_from_db()
    return registered, report


def test_the_upstream_refuses_a_request_without_a_token(oauth_upstream: UpstreamProcess) -> None:
    reply = httpx.post(oauth_upstream.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)

    assert reply.status_code == 401


async def test_client_credentials_get_a_token_for_sync_and_calls(
    oauth_upstream: UpstreamProcess, access_factory: Callable[..., Access], allow_loopback: None
) -> None:
    from asgiref.sync import sync_to_async

    access = await sync_to_async(access_factory)(tools=())
    _upstream, report = await sync_to_async(register)(access, oauth_upstream, CLIENT[1])

    assert report.ok, report.error
    assert "p_echo" in report.added
    result = result_of(await call(access, rpc("tools/call", {"name": "p_echo", "arguments": {"text": "authorized"}})))
    assert result["content"][0]["text"] == "authorized"


def test_wrong_client_credentials_fail_the_sync_and_import_nothing(
    oauth_upstream: UpstreamProcess, access_factory: Callable[..., Access], allow_loopback: None
) -> None:
    from mcp_app.models import Tool

    access = access_factory(tools=())
    upstream, report = register(access, oauth_upstream, "wrong")

    assert report.ok is False
    assert upstream.last_sync_error
    assert not Tool.objects.filter(upstream=upstream).exists()
