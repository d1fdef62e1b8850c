"""Access on removal, the way an operator runs it (issue 24): two daphne processes on PostgreSQL and Redis, and
each way an agent, a token, an API key, an OAuth client, a server, a tenant, a tool binding or a grant goes away.

Every removal is made by a third party (this process: the ORM as the admin does, the REST API, ``manage.py``) and
must reach both processes within ``BOUND_SECONDS``: requests answer the documented refusal (401 for credentials,
404 for a server or tenant, ``-32602`` for a tool), an already-open GET stream *ends*, and a withdrawn tool is
announced (``notifications/tools/list_changed``) to the session's open stream. The guarantees are in
docs/reliability.md ("Access on removal").

Without ``REDIS_URL`` the processes follow the database log instead (``DatabaseInvalidation``), and the tests whose
stream must hear another process's broadcast skip (under ``MCP_REQUIRE_SERVICES=1`` they fail instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.test import Client

from tests.conftest import Access
from tests.e2e.conftest import BOUND_SECONDS, CALL, Daphne
from tests.e2e.federation.conftest import (  # noqa: F401  (fixtures used here)
    allow_loopback,
    bearer,
    federate,
    federating_daphne,
    mcp_host_upstream,
    second_federating_daphne,
)
from tests.helpers import (
    data_messages,
    endpoint,
    initialize,
    modern_body,
    needs_shared_layer,
    routing_headers,
    served_then_refused,
    wait_until,
    within_bound,
)
from tests.helpers import post_headers as headers
from tests.oauth_flow import Issued, delete_client, refresh, run_flow

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("shared_log")]

WAIT = 10.0
TOOLS_LIST = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}


def edit(model_name: str, pk: int, **fields: Any) -> None:
    from django.apps import apps

    row = apps.get_model("mcp_app", model_name).objects.get(pk=pk)
    for name, value in fields.items():
        setattr(row, name, value)
    row.save()


def delete(model_name: str, pk: int) -> None:
    from django.apps import apps

    apps.get_model("mcp_app", model_name).objects.get(pk=pk).delete()


def terminate(access: Access) -> None:
    from mcp_app.models import McpSession

    for session in McpSession.objects.filter(agent_id=access.agent.pk):
        session.terminate()


def revoke(access: Access) -> None:
    from mcp_app.models import AgentToken

    AgentToken.objects.get(pk=access.token.pk).revoke()


# What is removed, and what a request on the session answers afterwards (docs/architecture.md, the auth order).
REMOVALS: dict[str, tuple[Callable[[Access], None], int]] = {
    "agent deactivated": (lambda a: edit("Agent", a.agent.pk, is_active=False), 401),
    "agent deleted": (lambda a: delete("Agent", a.agent.pk), 401),
    "token revoked": (revoke, 401),
    "tenant deactivated": (lambda a: edit("Tenant", a.tenant.pk, is_active=False), 404),
    "server disabled": (lambda a: edit("McpServer", a.server.pk, enabled=False), 404),
    "server deleted": (lambda a: delete("McpServer", a.server.pk), 404),
    "session terminated": (terminate, 404),
}


async def open_session(http: httpx.AsyncClient, base: str, access: Access) -> dict[str, str]:
    """Initialize a 2025-11-25 session on ``base``; the headers of requests on it."""
    opened = await http.post(endpoint(base, access), json=initialize({}), headers=headers(access))
    assert opened.status_code == 200, opened.text
    return headers(access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"})


async def until_ready(lines: Any) -> None:
    async with asyncio.timeout(WAIT):
        while (await anext(lines)) != ": ready":
            pass


async def rest_of(lines: Any) -> tuple[float, list[Any]]:
    """Read a stream to its end: when it ended, and the messages it carried meanwhile."""
    seen = [message async for message in data_messages(lines)]
    return time.monotonic(), seen


@contextlib.asynccontextmanager
async def session_streams(
    http: httpx.AsyncClient, bases: tuple[str, ...], access: Access
) -> AsyncIterator[tuple[dict[str, str], list[Any]]]:
    """A session opened on the first process and a GET stream on it held open on each (past ``: ready``): the
    headers of requests on the session, and each stream's lines."""
    on_session = await open_session(http, bases[0], access)
    async with contextlib.AsyncExitStack() as stack:
        streams = []
        for base in bases:
            stream_headers = {**on_session, "Accept": "text/event-stream"}
            response = await stack.enter_async_context(
                http.stream("GET", endpoint(base, access), headers=stream_headers)
            )
            assert response.status_code == 200
            lines = response.aiter_lines()
            await until_ready(lines)
            streams.append(lines)
        yield on_session, streams


@pytest.mark.parametrize("removal", list(REMOVALS))
async def test_a_removal_refuses_requests_and_ends_open_streams_on_every_process(
    removal: str, daphne_url: str, second_daphne: Any, live_access: Access
) -> None:
    remove, status = REMOVALS[removal]
    bases = (daphne_url, second_daphne.url)
    async with httpx.AsyncClient(timeout=WAIT) as http, session_streams(http, bases, live_access) as opened:
        on_session, streams = opened
        for base in bases:  # each process has cached the token, the server, the catalog and the session
            served = await http.post(endpoint(base, live_access), json=CALL, headers=on_session)
            assert served.status_code == 200, served.text
        ends = [asyncio.create_task(rest_of(lines)) for lines in streams]
        await database_sync_to_async(remove)(live_access)
        removed = time.monotonic()

        async def refused(base: str) -> bool:
            reply = await http.post(endpoint(base, live_access), json=CALL, headers=on_session)
            assert reply.status_code in (200, status), reply.text
            return reply.status_code == status

        await within_bound(refused, bases, what=removal)
        _done, still_open = await asyncio.wait(ends, timeout=WAIT)
        for end in still_open:
            end.cancel()
        assert not still_open, f"{removal}: {len(still_open)} open GET stream(s) did not end in {WAIT} s"
        ended = [end.result() for end in ends]
    late = {base: round(at - removed, 2) for base, (at, _) in zip(bases, ended, strict=True)}
    assert max(late.values()) <= BOUND_SECONDS, f"{removal}: open GET streams ended after {late}"


async def test_a_removal_ends_subscriptions_listen_streams_on_every_process(
    daphne_url: str, second_daphne: Any, live_access: Access
) -> None:
    """The 2026-07-28 stream (``subscriptions/listen``) ends like a GET stream."""
    bases = (daphne_url, second_daphne.url)
    body = modern_body("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id="listen-1")
    listen_headers = {**headers(live_access), **routing_headers(body)}
    async with httpx.AsyncClient(timeout=WAIT) as http, contextlib.AsyncExitStack() as stack:
        streams = []
        for base in bases:
            response = await stack.enter_async_context(
                http.stream("POST", endpoint(base, live_access), json=body, headers=listen_headers)
            )
            assert response.status_code == 200
            messages = data_messages(response.aiter_lines())
            async with asyncio.timeout(WAIT):
                await anext(messages)  # the acknowledgement: the stream is live
            streams.append(messages)
        await database_sync_to_async(edit)("Agent", live_access.agent.pk, is_active=False)
        deactivated = time.monotonic()

        async def end_of(messages: Any) -> float:
            async for _message in messages:
                pass
            return time.monotonic() - deactivated

        ends = [asyncio.create_task(end_of(messages)) for messages in streams]
        _done, still_open = await asyncio.wait(ends, timeout=WAIT)
        for end in still_open:
            end.cancel()
    assert not still_open, f"{len(still_open)} listen stream(s) did not end in {WAIT} s"
    late = [end.result() for end in ends]
    assert max(late) <= BOUND_SECONDS, late


async def tool_gone(http: httpx.AsyncClient, url: str, headers: dict[str, str], call: dict[str, Any]) -> bool:
    """Whether the tool that ``call`` calls is gone at ``url``: absent from ``tools/list``, and a call to it an
    unknown tool (``-32602``, never a 5xx)."""
    listed = await http.post(url, json=TOOLS_LIST, headers=headers)
    called = await http.post(url, json=call, headers=headers)
    assert listed.status_code == 200 and called.status_code == 200, (listed.text, called.text)
    names = {tool["name"] for tool in listed.json()["result"]["tools"]}
    return call["params"]["name"] not in names and called.json().get("error", {}).get("code") == -32602


def withdraw_echo_from_grant(access: Access) -> None:
    from django.db import transaction

    from mcp_app.models import AgentToken, Tool

    with transaction.atomic():
        token = AgentToken.objects.get(pk=access.token.pk)
        token.limit_to_grant = True
        token.save()
        token.granted_tools.set(Tool.objects.filter(tenant=access.tenant).exclude(name="echo"))


def unbind_echo(access: Access) -> None:
    from mcp_app.models import ServerTool

    edit("ServerTool", ServerTool.objects.get(server=access.server, tool__name="echo").pk, enabled=False)


WITHDRAWALS: dict[str, Callable[[Access], None]] = {
    "tool unbound from the server": unbind_echo,
    "tool withdrawn from the token's grant": withdraw_echo_from_grant,
}


@pytest.mark.parametrize("withdrawal", list(WITHDRAWALS))
async def test_a_withdrawn_tool_is_announced_hidden_and_refused_on_every_process(
    withdrawal: str, daphne_url: str, second_daphne: Any, live_access: Access
) -> None:
    needs_shared_layer()
    bases = (daphne_url, second_daphne.url)
    async with httpx.AsyncClient(timeout=WAIT) as http, session_streams(http, bases, live_access) as opened:
        on_session, streams = opened
        for base in bases:
            listed = await http.post(endpoint(base, live_access), json=TOOLS_LIST, headers=on_session)
            assert "echo" in {tool["name"] for tool in listed.json()["result"]["tools"]}
        await database_sync_to_async(WITHDRAWALS[withdrawal])(live_access)
        withdrawn = time.monotonic()

        async def hidden_and_refused(base: str) -> bool:
            return await tool_gone(http, endpoint(base, live_access), on_session, CALL)

        await within_bound(hidden_and_refused, bases, what=withdrawal)
        heard = []
        async with asyncio.timeout(WAIT):
            for lines in streams:
                heard.append((await anext(data_messages(lines)), time.monotonic() - withdrawn))
    for message, after in heard:
        assert message == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        assert after <= BOUND_SECONDS, heard


# Agent tokens and API keys: rotated (a successor issued, the old one revoked) the way an operator does it.


@pytest.fixture
def owner_key(live_access: Access, member_factory: Callable[..., Any]) -> tuple[Any, str, str]:
    """An owner of the tenant with two API keys: (user, the key that acts, a second key)."""
    from mcp_app.models import ApiKey

    owner = member_factory((live_access.tenant, "owner"))
    _key, acting = ApiKey.objects.issue_key(owner, name="acting")
    _other, second = ApiKey.objects.issue_key(owner, name="second")
    return owner, acting, second


async def revoke_by_api(base: str, access: Access, key: str) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        revoked = await http.post(
            f"{base}/api/v1/tokens/{access.token.pk}/revoke/", headers={"Authorization": f"Bearer {key}"}
        )
    assert revoked.status_code == 200, revoked.text


async def revoke_by_command(base: str, access: Access, key: str) -> None:
    await database_sync_to_async(call_command)(
        "mcp_revoke_token", tenant=access.tenant.slug, prefix=access.token.prefix, stdout=None
    )


ROTATIONS: dict[str, Callable[[str, Access, str], Awaitable[None]]] = {
    "REST API": revoke_by_api,
    "manage.py mcp_revoke_token": revoke_by_command,
}


@pytest.mark.parametrize("verb", list(ROTATIONS))
async def test_a_rotated_token_is_refused_and_its_successor_served_on_every_process(
    verb: str, daphne_url: str, second_daphne: Any, live_access: Access, owner_key: tuple[Any, str, str]
) -> None:
    from mcp_app.models import AgentToken

    bases = (daphne_url, second_daphne.url)
    _token, successor = await database_sync_to_async(AgentToken.objects.issue_token)(
        live_access.agent, servers=[live_access.server], name="successor"
    )
    new = {**headers(live_access), "Authorization": f"Bearer {successor}", "MCP-Protocol-Version": "2025-11-25"}
    old = headers(live_access, **{"MCP-Protocol-Version": "2025-11-25"})
    async with httpx.AsyncClient(timeout=WAIT) as http:
        for base in bases:
            assert (await http.post(endpoint(base, live_access), json=CALL, headers=old)).status_code == 200
        await ROTATIONS[verb](daphne_url, live_access, owner_key[1])

        async def old_refused(base: str) -> bool:
            reply = await http.post(endpoint(base, live_access), json=CALL, headers=old)
            if reply.status_code == 401:
                assert 'error="invalid_token"' in reply.headers["www-authenticate"]
            return reply.status_code == 401

        await within_bound(old_refused, bases, what=f"token revoked through the {verb}")
        for base in bases:
            served = await http.post(endpoint(base, live_access), json=CALL, headers=new)
            assert served.status_code == 200 and served.json()["result"]["content"][0]["text"] == "x", served.text


async def test_a_revoked_api_key_is_refused_on_every_process(
    daphne_url: str, second_daphne: Any, owner_key: tuple[Any, str, str]
) -> None:
    from mcp_app.models import ApiKey

    _owner, acting, second = owner_key
    bases = (daphne_url, second_daphne.url)
    prefix = second.split("_")[1]
    async with httpx.AsyncClient(timeout=WAIT) as http:
        for base in bases:
            listed = await http.get(f"{base}/api/v1/tenants/", headers={"Authorization": f"Bearer {second}"})
            assert listed.status_code == 200, listed.text
        pk = await database_sync_to_async(lambda: ApiKey.objects.get(prefix=prefix).pk)()
        revoked = await http.post(
            f"{daphne_url}/api/v1/api-keys/{pk}/revoke/", headers={"Authorization": f"Bearer {acting}"}
        )
        assert revoked.status_code == 200, revoked.text

        async def refused(base: str) -> bool:
            reply = await http.get(f"{base}/api/v1/tenants/", headers={"Authorization": f"Bearer {second}"})
            return reply.status_code == 401

        await within_bound(refused, bases, what="API key revoked")
        for base in bases:
            still = await http.get(f"{base}/api/v1/tenants/", headers={"Authorization": f"Bearer {acting}"})
            assert still.status_code == 200, still.text


# OAuth clients: deleting one refuses its access tokens (tests/e2e/test_oauth_invalidation.py) and its refresh
# tokens; rotating a confidential client's secret refuses the old secret.


async def test_a_deleted_oauth_client_s_access_and_refresh_tokens_are_refused(
    daphne_url: str, second_daphne: Any, oauth: Issued
) -> None:
    bases = (daphne_url, second_daphne.url)
    await served_then_refused(oauth, bases, lambda: delete_client(oauth), what="OAuth client deleted")
    refreshed = await database_sync_to_async(refresh)(Client(), oauth, resource=None)
    assert refreshed.status_code in (400, 401), refreshed.content
    assert refreshed.json()["error"] in ("invalid_client", "invalid_grant")


# Upstreams: disabled or deleted, their tools leave every process's catalog, a call is an unknown tool (never a
# 5xx), and every process closes its pooled connection (the upstream, mcp-host itself here, counts its sessions).

UP_CALL = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "up_echo", "arguments": {"text": "u"}}}


def disable_upstream(upstream: Any) -> None:
    upstream.enabled = False
    upstream.save()


UPSTREAM_REMOVALS: dict[str, Callable[[Any], None]] = {
    "upstream disabled": disable_upstream,
    "upstream deleted": lambda upstream: upstream.delete(),
}


@pytest.mark.parametrize("removal", list(UPSTREAM_REMOVALS))
async def test_a_removed_upstream_leaves_every_catalog_and_its_pooled_sessions_close(
    removal: str,
    daphne_url: str,
    federating_daphne: Daphne,  # noqa: F811  (the federation fixtures, imported above)
    second_federating_daphne: Daphne,  # noqa: F811  (the federation fixtures, imported above)
    mcp_host_upstream: Access,  # noqa: F811  (the federation fixtures, imported above)
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],  # noqa: F811  (the federation fixtures, imported above)
) -> None:
    from mcp_app.models import McpSession

    def build() -> tuple[Access, Any]:
        access = access_factory(tools=())
        url = f"{daphne_url}{mcp_host_upstream.path}?{mcp_host_upstream.query}"
        return access, federate(access, url, secret=bearer(mcp_host_upstream))

    access, upstream = await database_sync_to_async(build)()
    live_sessions = database_sync_to_async(
        McpSession.objects.filter(server=mcp_host_upstream.server, terminated_at__isnull=True).count
    )
    bases = (federating_daphne.url, second_federating_daphne.url)
    before = await live_sessions()
    plain = headers(access, **{"MCP-Protocol-Version": "2025-11-25"})
    async with httpx.AsyncClient(timeout=WAIT) as http:
        for base in bases:  # each process opens (and pools) one connection to the upstream
            served = await http.post(endpoint(base, access), json=UP_CALL, headers=plain)
            assert served.status_code == 200 and served.json()["result"]["content"][0]["text"] == "u", served.text
        assert await live_sessions() - before == len(bases)
        await database_sync_to_async(UPSTREAM_REMOVALS[removal])(upstream)

        async def gone(base: str) -> bool:
            return await tool_gone(http, endpoint(base, access), plain, UP_CALL)

        await within_bound(gone, bases, what=removal)

    async def closed() -> bool:
        return await live_sessions() == before

    # The bound above is the refusal's; closing a pooled session is the pool's clean-up after it (a DELETE to the
    # upstream daphne, which writes its row), so it gets the bound plus a loaded machine's margin: what this
    # asserts is that no session is left open, not how fast a second process answers.
    await wait_until(closed, timeout=BOUND_SECONDS + 5, what=f"{removal}: pooled upstream sessions closed")


def rotate_secret(issued: Issued) -> None:
    from oauth2_provider.models import Application

    client = Application.objects.get(client_id=issued.client_id)
    client.client_secret = "a-new-secret-of-the-operator-5d1e"
    client.save()


async def test_rotating_a_confidential_client_s_secret_refuses_its_tokens(
    daphne_url: str, second_daphne: Any, oauth_world: Any
) -> None:
    access, user = oauth_world
    issued = await database_sync_to_async(
        lambda: run_flow(Client(), user, access.server, auth_method="client_secret_post")
    )()
    assert issued.client_secret
    bases = (daphne_url, second_daphne.url)
    await served_then_refused(issued, bases, lambda: rotate_secret(issued), what="OAuth client secret rotated")

    def refresh_with(secret: str) -> Any:
        return refresh(Client(), issued, resource=None, client_secret=secret)

    with_old = await database_sync_to_async(refresh_with)(issued.client_secret)
    with_new = await database_sync_to_async(refresh_with)("a-new-secret-of-the-operator-5d1e")
    assert with_old.status_code == 401 and with_old.json()["error"] == "invalid_client", with_old.content
    assert with_new.status_code == 400 and with_new.json()["error"] == "invalid_grant", with_new.content
