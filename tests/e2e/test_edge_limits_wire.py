"""What daphne answers before the application, on raw sockets: 414, 431, 400 for a body over the limit without
reading it, 408 for a client that trickles, 400 for two Host headers or an HTTP/1.1 request without one, 400 at
once for bytes that are not HTTP (TLS) or a bare-LF request line. The daphne here runs with a
one-second request deadline."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator

import orjson
import pytest

from tests.e2e.conftest import daphne_command, database_url, free_port, wait_for_port

# The daphne of ``edge`` serves requests from the test database: have pytest-django create it even when only
# these tests run (it sets up only the databases that the selected tests declare).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

DEADLINE_SECONDS = 1.0
WAIT = 10.0


@pytest.fixture(scope="module")
def edge(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    from django.conf import settings
    from django.db import connection

    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH", "REDIS_URL")},
        "DJANGO_SETTINGS_MODULE": "mcp_host.settings",
        "DATABASE_URL": database_url(connection.settings_dict),
        "MCP_REQUEST_DEADLINE_SECONDS": str(DEADLINE_SECONDS),
    }
    log = (tmp_path_factory.mktemp("edge") / "daphne.log").open("wb")
    process = subprocess.Popen(daphne_command(port), cwd=settings.BASE_DIR, env=env, stdout=log, stderr=log)
    try:
        wait_for_port(port, process, "daphne")
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def exchange(port: int, *parts: bytes, pause: float = 0.0) -> tuple[int, bytes, float]:
    """Send ``parts`` (pausing between them), read the answer until the server closes; (status, body, seconds
    until the first byte of the answer)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        try:
            for part in parts:
                sock.sendall(part)
                if pause:
                    time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before everything was sent: what a limit should do
        answer = b""
        first_byte = None
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            first_byte = first_byte or time.monotonic()
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")) else 0
    return status, body, (first_byte or time.monotonic()) - started


def request(target: str = "/mcp/x", *, headers: bytes = b"Host: 127.0.0.1\r\n", body: bytes = b"") -> bytes:
    return f"POST {target} HTTP/1.1\r\n".encode() + headers + b"content-type: application/json\r\n\r\n" + body


def assert_json_rpc_error(body: bytes) -> None:
    error = orjson.loads(body)
    assert error["jsonrpc"] == "2.0" and error["id"] is None and error["error"]["code"] == -32600


def test_an_oversized_request_line_is_414(edge: int) -> None:
    status, body, _ = exchange(edge, request("/mcp/x?" + "a" * 9000))
    assert status == 414
    assert_json_rpc_error(body)


def test_a_request_line_over_twisteds_own_line_limit_is_414_too(edge: int) -> None:
    status, _body, _ = exchange(edge, request("/mcp/x?" + "a" * 20_000))
    assert status == 414


def test_oversized_headers_are_431(edge: int) -> None:
    many = b"".join(b"x-filler-%d: %s\r\n" % (n, b"v" * 1000) for n in range(20))
    status, body, _ = exchange(edge, request(headers=b"Host: 127.0.0.1\r\n" + many))
    assert status == 431
    assert_json_rpc_error(body)


def test_a_declared_100_mb_body_is_400_before_any_of_it_is_sent(edge: int) -> None:
    head = request(headers=b"Host: 127.0.0.1\r\ncontent-length: 104857600\r\n")
    status, body, seconds = exchange(edge, head)
    assert status == 400  # seed 000's contract: 400 with -32600
    assert_json_rpc_error(body)
    assert "exceeds" in orjson.loads(body)["error"]["message"]
    assert seconds < DEADLINE_SECONDS  # answered on the headers, not after a deadline


def test_a_chunked_body_is_cut_off_at_the_limit(edge: int) -> None:
    head = request(headers=b"Host: 127.0.0.1\r\ntransfer-encoding: chunked\r\n")
    chunk = b"%x\r\n%s\r\n" % (1024 * 1024, b" " * (1024 * 1024))
    status, body, _ = exchange(edge, head, *([chunk] * 8))  # 8 MiB offered against the 4 MiB limit
    assert status == 400
    assert_json_rpc_error(body)


def test_a_client_trickling_its_request_is_cut_off_at_the_deadline(edge: int) -> None:
    raw = request(headers=b"Host: 127.0.0.1\r\ncontent-length: 2\r\n", body=b"{}")
    status, body, seconds = exchange(edge, *[raw[i : i + 4] for i in range(0, len(raw), 4)], pause=0.1)
    assert status == 408
    assert_json_rpc_error(body)
    assert seconds < DEADLINE_SECONDS + 5


def test_two_host_headers_are_400(edge: int) -> None:
    status, body, _ = exchange(edge, request(headers=b"Host: 127.0.0.1\r\nHost: evil.example\r\n"))
    assert status == 400
    assert b"exactly one Host" in body


def test_http_1_1_without_host_is_400_but_http_1_0_is_served(edge: int) -> None:
    status, body, _ = exchange(edge, request(headers=b""))
    assert status == 400
    assert b"Host header" in body
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    old, old_body, _ = exchange(
        edge,
        b"POST /mcp/x?agentId=a HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(ping), ping),
    )
    assert old == 401, old_body  # reached the application, which asks for a token


# A TLS 1.2 ClientHello's first bytes: a handshake record (0x16), version 3.1, then the hello itself.
TLS_CLIENT_HELLO = bytes.fromhex("16030100f5010000f10303") + bytes(range(32)) + b"\x00\x00\x02\x13\x01\x01\x00"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"POST /mcp/x HTTP/1.1\nHost: 127.0.0.1\n\n", id="bare-LF request line"),
        pytest.param(b"POST /mcp/x HTTP/1.1\r\nHost: 127.0.0.1\ncontent-length: 2\n\n{}", id="bare-LF header"),
        pytest.param(TLS_CLIENT_HELLO, id="TLS ClientHello"),
        pytest.param(b"\x00\x01\x02binary", id="binary"),
    ],
)
def test_bytes_that_cannot_become_a_request_are_400_at_once(edge: int, raw: bytes) -> None:
    status, body, seconds = exchange(edge, raw)
    assert status == 400
    assert_json_rpc_error(body)
    assert seconds < DEADLINE_SECONDS  # not the 408 of the deadline


def test_a_request_split_between_cr_and_lf_is_still_served(edge: int) -> None:
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    raw = request(headers=b"Host: 127.0.0.1\r\nconnection: close\r\ncontent-length: %d\r\n" % len(ping), body=ping)
    cut = raw.index(b"\r\n") + 1
    status, body, _ = exchange(edge, raw[:cut], raw[cut:], pause=0.05)
    # The application answered (it asks for a token first, even without agentId): the edge let it through.
    assert status == 401 and b"Authorization: Bearer" in body


def test_the_deadline_counts_from_each_requests_first_byte_on_a_kept_alive_connection(edge: int) -> None:
    # One timer per connection, pushed back by each request. Each request trickles in over about 0.4 s; the second
    # starts 0.3 s after the first one's answer, so the first one's deadline (1 s after its first byte) falls while
    # the second is still arriving, well within the second's own: the second must be served, not cut with a 408.
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    head = b"Host: 127.0.0.1\r\ncontent-length: %d\r\n" % len(ping)
    answers = []
    with socket.create_connection(("127.0.0.1", edge), timeout=WAIT) as sock:
        for closing in (False, True):
            raw = request(headers=head + (b"connection: close\r\n" if closing else b""), body=ping)
            piece = len(raw) // 4 + 1
            for i in range(0, len(raw), piece):
                time.sleep(0.1)
                sock.sendall(raw[i : i + piece])
            answer = b""
            while not answer.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of a chunked answer
                chunk = sock.recv(65536)
                assert chunk, f"closed early: {answer!r}"
                answer += chunk
            answers.append(int(answer.split(b" ", 2)[1]))
            time.sleep(0.3 * DEADLINE_SECONDS)
    assert answers == [401, 401]  # the application answered both (no token): neither was cut off with a 408
