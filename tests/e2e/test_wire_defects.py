"""Small wire defects found from the outside (issue 19, item 7), each checked against a real daphne process:
same-origin requests, an ``Origin`` with a path, the id on a NUL refusal, a sum JSON cannot carry, and (on
whatever backend the run has) an edit from another process seen without a restart.

Edge refusals that never reach the application (a body over the limit, TLS bytes, a bare-LF request line) are in
``test_edge_limits_wire.py``; the id on a 503 during a Redis outage is in ``test_redis_outage.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mcp_app.protocol.errors import INVALID_REQUEST
from tests.conftest import Access
from tests.e2e.conftest import daphne_command, database_url, free_port, wait_for_port
from tests.helpers import endpoint
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

WAIT = 10.0
SEEN_WITHIN_SECONDS = 5.0


def call(name: str, arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


async def test_a_same_origin_request_is_served_without_being_listed(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    assert not live_access.server.allowed_origins  # nothing listed: only same-origin can pass
    url = endpoint(daphne_url, live_access)
    port = httpx.URL(daphne_url).port
    same = await http.post(url, json=call("echo", {"text": "x"}), headers=headers(live_access, Origin=daphne_url))
    assert same.status_code == 200, same.text
    assert same.headers["access-control-allow-origin"] == f"http://127.0.0.1:{port}"
    other_port = await http.post(
        url, json=call("echo", {"text": "x"}), headers=headers(live_access, Origin=f"http://127.0.0.1:{port + 1}")
    )
    assert other_port.status_code == 403
    other_host = await http.post(
        url, json=call("echo", {"text": "x"}), headers=headers(live_access, Origin=f"http://localhost:{port}")
    )
    assert other_host.status_code == 403  # Host says 127.0.0.1: localhost is another origin


@pytest.fixture
def listing_access(transactional_db: None, access_factory: Any) -> Access:
    return access_factory(allowed_origins=["https://app.example"])


@pytest.mark.parametrize("suffix", ["/", "/evil", "/?x=1", "#frag"])
async def test_an_origin_with_a_path_is_refused_and_never_echoed(
    daphne_url: str, listing_access: Access, http: httpx.AsyncClient, suffix: str
) -> None:
    access = listing_access
    url = endpoint(daphne_url, access)
    listed = await http.post(
        url, json=call("echo", {"text": "x"}), headers=headers(access, Origin="https://app.example")
    )
    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == "https://app.example"
    for origin in (f"https://app.example{suffix}", f"{daphne_url}{suffix}"):
        refused = await http.post(url, json=call("echo", {"text": "x"}), headers=headers(access, Origin=origin))
        assert refused.status_code == 403, (origin, refused.status_code)
        assert "access-control-allow-origin" not in refused.headers
        assert all(suffix not in value for value in refused.headers.values() if "example" in value or "127" in value)
        preflight = await http.options(
            url,
            headers={"Origin": origin, "Access-Control-Request-Method": "POST", "Host": httpx.URL(url).netloc.decode()},
        )
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


async def test_the_nul_refusal_answers_the_request_by_its_id(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    body = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\\u0000b"}}}'
    reply = await http.post(endpoint(daphne_url, live_access), content=body, headers=headers(live_access))
    assert reply.status_code == 400
    error = reply.json()
    assert error["id"] == 7 and error["error"]["code"] == INVALID_REQUEST
    assert "NUL" in error["error"]["message"]


async def test_a_sum_json_cannot_carry_is_an_error_result_not_a_null_against_the_schema(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, live_access)
    overflow = (await http.post(url, json=call("add", {"a": 1e308, "b": 1e308}), headers=headers(live_access))).json()
    assert overflow["result"]["isError"] is True
    assert "structuredContent" not in overflow["result"]
    assert "finite" in overflow["result"]["content"][0]["text"]
    fine = (await http.post(url, json=call("add", {"a": 1e308, "b": -1e308}), headers=headers(live_access))).json()
    assert fine["result"]["structuredContent"] == {"result": 0.0}


def _unbind_echo_from_a_shell(env: dict[str, str], server_id: str) -> None:
    """``manage.py shell -c``: an edit made by another process, as an operator's script would."""
    from django.conf import settings

    code = (
        "from mcp_app.models import ServerTool\n"
        f"binding = ServerTool.objects.get(server__server_id={server_id!r}, tool__name='echo')\n"
        "binding.enabled = False\n"
        "binding.save()\n"
    )
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=settings.BASE_DIR,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


def test_an_edit_from_another_process_is_seen_without_a_restart(
    transactional_db: None, live_access: Access, tmp_path: Any
) -> None:
    """daphne and ``manage.py`` with the deployment's own defaults (no ``MCP_INVALIDATION``): on the embedded
    default they follow the database's log, with ``REDIS_URL`` the Redis stream."""
    from django.conf import settings
    from django.db import connection

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH", "MCP_INVALIDATION", "DJANGO_SETTINGS_MODULE")
    }
    env["DATABASE_URL"] = database_url(connection.settings_dict)
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    else:
        env.pop("REDIS_URL", None)
    port = free_port()
    log = (tmp_path / "daphne.log").open("wb")
    process = subprocess.Popen(daphne_command(port), cwd=settings.BASE_DIR, env=env, stdout=log, stderr=log)
    try:
        wait_for_port(port, process, "daphne")
        url = endpoint(f"http://127.0.0.1:{port}", live_access)
        with httpx.Client(timeout=WAIT) as http:
            for _ in range(2):  # cached now: the token, the server, its catalog
                served = http.post(url, json=call("echo", {"text": "x"}), headers=headers(live_access))
                assert served.json()["result"]["content"] == [{"type": "text", "text": "x"}]
            _unbind_echo_from_a_shell(env, live_access.server.server_id)
            deadline = time.monotonic() + SEEN_WITHIN_SECONDS
            while True:
                reply = http.post(url, json=call("echo", {"text": "x"}), headers=headers(live_access)).json()
                if "error" in reply or reply["result"].get("isError"):
                    break
                assert time.monotonic() < deadline, "the edit made by manage.py shell never reached daphne"
                time.sleep(0.05)  # the poll interval of a bounded wait (the deadline above), not a timing
    finally:
        process.terminate()
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
