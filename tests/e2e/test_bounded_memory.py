"""Bounded memory against a real daphne process (issue 19, item 1): client values the server echoes are
bounded (a 4 MB ``progressToken`` is refused with -32602, a 4 KB id with -32600) in both eras; an unread answer
is cut at MAX_PENDING_BYTES; a slow reader gets the end of an answer larger than the kernel's buffers; a slow
consumer's superseded progress notifications are coalesced (latest wins)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from mcp_app.protocol.errors import INVALID_PARAMS, INVALID_REQUEST
from tests.conftest import Access
from tests.helpers import endpoint, modern_body, routing_headers
from tests.helpers import post_headers as headers

from .conftest import daphne_command, database_url, free_port, wait_for_port

pytestmark = pytest.mark.e2e

WAIT = 30.0
FOUR_MB = 4_000_000  # under the 4 MiB body limit: the token itself is what is refused


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


def progress_call(token: str, request_id: int | str = 5) -> dict:
    params = {"name": "progress_demo", "arguments": {"steps": 3}, "_meta": {"progressToken": token}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_a_4_mb_progress_token_is_refused_with_invalid_params(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, live_access)
    refused = await http.post(url, json=progress_call("t" * FOUR_MB), headers=headers(live_access))
    assert refused.headers["content-type"] == "application/json"  # no stream was opened for it
    error = refused.json()
    assert error["id"] == 5 and error["error"]["code"] == INVALID_PARAMS
    assert error["error"]["data"] == {"maxBytes": 1024}
    assert len(refused.content) < 1024  # not echoed
    served = await http.post(url, json=progress_call("t" * 1024), headers=headers(live_access))
    assert "notifications/progress" in served.text


async def test_an_id_too_long_to_echo_is_refused_without_it(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, live_access)
    refused = await http.post(url, json=progress_call("p", request_id="i" * 4096), headers=headers(live_access))
    error = refused.json()
    assert error["id"] is None and error["error"]["code"] == INVALID_REQUEST
    assert len(refused.content) < 1024


async def test_the_bound_holds_on_the_stateless_wire_too(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    body = modern_body(
        "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": "t" * 5000}}
    )
    refused = await http.post(
        endpoint(daphne_url, live_access), json=body, headers={**headers(live_access), **routing_headers(body)}
    )
    error = refused.json()
    assert error["error"]["code"] == INVALID_PARAMS and len(refused.content) < 2048


# Raw sockets against daphne processes of their own: a client that never reads, and one that reads slowly.

BIG_TEXT = 3 * 1024 * 1024  # an answer larger than the kernel's socket buffers with a small receive window


@contextlib.contextmanager
def own_daphne(tmp_path: Path, **settings_env: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    from django.conf import settings
    from django.db import connection

    env = {k: v for k, v in os.environ.items() if k not in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH")}
    env.update({"DJANGO_SETTINGS_MODULE": "tests.e2e.daphne_settings", **settings_env})
    env["DATABASE_URL"] = database_url(connection.settings_dict)
    if not settings.REDIS_URL:
        env.pop("REDIS_URL", None)
        env["MCP_INVALIDATION"] = "database"
    port = free_port()
    log = (tmp_path / "daphne.log").open("wb")
    process = subprocess.Popen(daphne_command(port), cwd=settings.BASE_DIR, env=env, stdout=log, stderr=log)
    try:
        wait_for_port(port, process, "daphne")
        yield port, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def big_answer_request(access: Access, port: int) -> bytes:
    """A small call (so no request body weighs on daphne) whose answer is ``BIG_TEXT`` long, with a progress token
    (so the answer is an SSE stream)."""
    params = {"name": "big_answer", "arguments": {"size": BIG_TEXT}, "_meta": {"progressToken": "p"}}
    return raw_post(access, port, orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))


def small_window_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # before connect: the window stays small
    sock.connect(("127.0.0.1", port))
    return sock


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# glibc gives a freed block back to the system at once only above its mmap threshold, which it raises as blocks are
# freed (up to 32 MiB): then a freed 3 MiB answer stays in the heap and RSS counts it as if alive. A fixed threshold
# makes RSS follow what daphne really holds, so the test measures the bound and not the allocator.
FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def test_clients_that_never_read_keep_daphnes_growth_bounded(
    access_factory: Any, transactional_db: None, tmp_path: Path
) -> None:
    """Rounds of 12 clients that send a call and never read its 3 MiB answer (and never close). The first round
    raises daphne's RSS to its working size; the next three must not raise it by the answers they leave unread:
    each unread answer is dropped at the bound, not kept for a client that never reads."""
    access = access_factory(tools=("big_answer",))
    clients, rounds = 12, 4
    with own_daphne(tmp_path, MCP_MAX_PENDING_BYTES=str(1024 * 1024), **FIXED_MMAP_THRESHOLD) as (port, process):
        held: list[socket.socket] = []
        rss = []
        for _round in range(rounds):
            sockets = [small_window_socket(port) for _ in range(clients)]
            for sock in sockets:
                sock.sendall(big_answer_request(access, port))
            deadline = time.monotonic() + 60
            ended = 0
            for sock in sockets:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                ended += _ended_by_server(sock)
            assert ended == clients  # every unread connection was ended by the server
            held += sockets  # still open on this side: nothing is released by the client going away
            rss.append(rss_bytes(process.pid))
        for sock in held:
            sock.close()
    growth = rss[-1] - rss[0]
    # Kept, the unread answers of rounds 2 to 4 would pin 3 x 12 x 3 MiB = 108 MiB. Left to the garbage collector
    # (an aborted connection's transport sits in a reference cycle with its unsent bytes) they grew daphne by ~20
    # MiB a round. Dropped when the connection is lost, RSS stays flat (131 MiB over 7 rounds): under one round.
    one_round = clients * BIG_TEXT
    assert growth < one_round, f"daphne grew by {growth / 2**20:.1f} MiB over rounds 2 to {rounds}: {rss}"


def _ended_by_server(sock: socket.socket) -> int:
    """Wait (bounded by the socket's timeout) until the server has ended this connection, then 1 (else 0). The
    data read on the way is the server's last word, read only now: it gave up on this client long before."""
    tail = b""
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            tail = (tail + chunk)[-4096:]
    except ConnectionResetError:
        return 1
    except TimeoutError:
        return 0
    return 1


SLOW_ANSWER = 24 * 1024 * 1024  # far more than the kernel's buffers take (tcp_wmem's maximum is 4 MiB here)


def test_a_slow_reader_gets_the_end_of_a_long_answer(
    access_factory: Any, transactional_db: None, tmp_path: Path
) -> None:
    """Idle timeout of 1 s and a 24 MiB answer to a client with a 16 KiB receive buffer reading steadily for far
    longer than that: most of the answer still waits in daphne when the response ends. Twisted would restart its
    idle timer there, close the connection 1 s later and abort it LINGER_SECONDS after that, cutting the reader
    off; here the timer counts inactivity, so the answer is drained to its end."""
    access = access_factory(tools=("big_answer",))
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "big_answer", "arguments": {"size": SLOW_ANSWER}},
        }
    )
    settings = {"MCP_IDLE_TIMEOUT_SECONDS": "1", "MCP_MAX_PENDING_BYTES": str(4 * SLOW_ANSWER)}
    with own_daphne(tmp_path, **settings) as (port, _process):
        sock = small_window_socket(port)
        sock.sendall(raw_post(access, port, body))
        sock.settimeout(WAIT)
        received = bytearray()
        started = time.monotonic()
        with contextlib.suppress(ConnectionResetError):  # the cut, without the fix: asserted below
            while not complete(received):
                chunk = sock.recv(64 * 1024)
                if not chunk:
                    break
                received += chunk
                time.sleep(0.01)  # the slow reader: at most 32 KiB (the window) every 10 ms
        seconds = time.monotonic() - started
        sock.close()
    assert seconds > 3, f"read too fast ({seconds:.1f} s) to outlast the idle timeout and the linger"
    assert complete(received), f"cut after {len(received)} bytes and {seconds:.1f} s"
    assert len(received) > SLOW_ANSWER and b'"id":1,"result"' in received


def complete(response: bytes | bytearray) -> bool:
    """The whole response is in: as many body bytes as its Content-Length says, or a chunked body's last chunk
    (a call that stays silent for SSE_OPEN_AFTER_SECONDS gets a stream, else a JSON answer)."""
    head, found, _body = bytes(response[:4096]).partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(response) - len(head) - 4 >= int(line.split(b":")[1])
    return response.endswith(b"\r\n0\r\n\r\n")


def raw_post(access: Access, port: int, body: bytes) -> bytes:
    head = (
        f"POST /mcp/{access.server.server_id}?{access.query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {access.raw_token}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


FLOOD_STEPS = 20_000  # x ~1.1 KB: ~22 MB of progress, far more than the kernel's buffers and MAX_PENDING_BYTES


def flood_request(access: Access, port: int) -> bytes:
    arguments = {"steps": FLOOD_STEPS, "pad": 1000}
    params = {"name": "progress_flood", "arguments": arguments, "_meta": {"progressToken": "flood"}}
    return raw_post(access, port, orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))


def test_a_slow_consumer_gets_the_latest_progress_and_the_answer(
    access_factory: Any, transactional_db: None, tmp_path: Path
) -> None:
    """A tool reports progress 20,000 times (~22 MB) to a client reading at ~1 MB/s. Queued whole, the backlog
    would pass MAX_PENDING_BYTES (8 MiB) and the connection be ended before the answer; coalesced, each
    progress still unsent is replaced by the newer one: the client gets far fewer, the last of them the latest,
    then the answer."""
    access = access_factory(tools=("progress_flood",))
    with own_daphne(tmp_path) as (port, _process):
        sock = small_window_socket(port)
        sock.sendall(flood_request(access, port))
        sock.settimeout(WAIT * 4)
        received = bytearray()
        while not received.endswith(b"\r\n0\r\n\r\n"):
            chunk = sock.recv(64 * 1024)
            if not chunk:
                break
            received += chunk
            time.sleep(0.05)  # the slow consumer: at most ~1.3 MB/s
        sock.close()
    data = bytes(received)
    assert b"MAX_PENDING_BYTES" not in data, "the slow consumer was cut off"
    assert data.endswith(b"\r\n0\r\n\r\n"), f"cut after {len(data)} bytes"
    messages = [orjson.loads(line[6:]) for line in _unchunk(data).split(b"\n") if line.startswith(b"data: {")]
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert messages[-1]["id"] == 1 and messages[-1]["result"]["content"][0]["text"] == f"flooded {FLOOD_STEPS}"
    assert progress == sorted(progress), "progress went backwards"
    assert progress[-1] == FLOOD_STEPS, "the latest progress was lost"
    assert len(progress) < FLOOD_STEPS // 2, f"{len(progress)} of {FLOOD_STEPS} progress events: not coalesced"


def _unchunk(data: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 response (head included in ``data``)."""
    _head, _, rest = data.partition(b"\r\n\r\n")
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2 :]
    return body
