"""Two daphne processes that have both cached a token, its server, its catalog and a session: each change,
made by a third process (this test, through the ORM, as the admin or a management command would), reaches
both within a second. With ``REDIS_URL`` (PostgreSQL + Redis in CI) the change travels on the Redis stream;
without it, the processes follow the database log (``DatabaseInvalidation``), and so does this test's publisher.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async

from tests.conftest import Access
from tests.e2e.conftest import CALL
from tests.helpers import endpoint, initialize, within_bound
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e


def edit(model_name: str, pk: int, **fields: Any) -> None:
    from django.apps import apps

    row = apps.get_model("mcp_app", model_name).objects.get(pk=pk)
    for name, value in fields.items():
        setattr(row, name, value)
    row.save()


def revoke(access: Access) -> None:
    from mcp_app.models import AgentToken

    AgentToken.objects.get(pk=access.token.pk).revoke()


def expire(access: Access) -> None:
    from django.utils import timezone

    edit("AgentToken", access.token.pk, expires_at=timezone.now() - timedelta(seconds=1))


def unscope(access: Access) -> None:
    from mcp_app.models import AgentToken

    AgentToken.objects.get(pk=access.token.pk).servers.clear()


def unbind_echo(access: Access) -> None:
    from mcp_app.models import ServerTool

    edit("ServerTool", ServerTool.objects.get(server=access.server, tool__name="echo").pk, enabled=False)


def terminate(access: Access) -> None:
    from mcp_app.models import McpSession

    for session in McpSession.objects.filter(agent_id=access.agent.pk):
        session.terminate()


def status_is(expected: int) -> Callable[[httpx.Response], bool]:
    return lambda reply: reply.status_code == expected


def unknown_tool(reply: httpx.Response) -> bool:
    return reply.status_code == 200 and reply.json().get("error", {}).get("code") == -32602


CHANGES: dict[str, tuple[Callable[[Access], None], Callable[[httpx.Response], bool]]] = {
    "token revoked": (revoke, status_is(401)),
    "token expired": (expire, status_is(401)),
    "agent deactivated": (lambda a: edit("Agent", a.agent.pk, is_active=False), status_is(401)),
    "tenant deactivated": (lambda a: edit("Tenant", a.tenant.pk, is_active=False), status_is(404)),
    "server disabled": (lambda a: edit("McpServer", a.server.pk, enabled=False), status_is(404)),
    "server taken out of the token's scope": (unscope, status_is(403)),
    "tool unbound from the catalog": (unbind_echo, unknown_tool),
    "session terminated": (terminate, status_is(404)),
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_a_change_reaches_every_process_within_a_second(
    change: str, daphne_url: str, second_daphne: Any, live_access: Access, shared_log: None
) -> None:
    apply_change, changed = CHANGES[change]
    bases = (daphne_url, second_daphne.url)
    async with httpx.AsyncClient(timeout=5.0) as http:
        opened = await http.post(endpoint(daphne_url, live_access), json=initialize({}), headers=headers(live_access))
        assert opened.status_code == 200
        on_session = headers(
            live_access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        )
        for base in bases:  # each process caches the token, the server, the catalog and the session
            for _ in range(2):
                served = await http.post(endpoint(base, live_access), json=CALL, headers=on_session)
                assert served.status_code == 200 and not changed(served), served.text
        await database_sync_to_async(apply_change)(live_access)

        async def seen(base: str) -> bool:
            return changed(await http.post(endpoint(base, live_access), json=CALL, headers=on_session))

        await within_bound(seen, bases, what=change)
