"""Real upstream MCP servers on loopback, and upstreams that fail: fixtures for every test that needs one
(a plugin of ``tests/conftest.py``: the federation tests, the front doors' tests, the end-to-end tests).

- ``stateful_upstream`` / ``stateless_upstream`` (session scope): one shared ``UpstreamProcess``
  (``tests/federation/upstream_server.py``) per mode. Shared, so a test must not stop it, and tags its events and
  names the tools it adds uniquely (``unique_tag``).
- ``upstream`` (session scope, parametrized ``stateful``/``stateless``): the shared upstream of each mode in turn.
- ``upstream_server`` (function scope; a start costs 1 to 3 s on a loaded 2-core machine, so prefer the shared
  ones): a factory ``upstream_server(mode) -> UpstreamProcess`` that starts a fresh,
  private upstream on a free port (a test may ``stop()`` and ``start()`` it again on the same port, add tools
  without disturbing others); every upstream it made is stopped at the test's end.
- ``down_url``: an MCP URL on a free 127.0.0.1 port that nobody listens on (connection refused at once).
- ``silent_url``: an MCP URL whose server accepts connections and never answers a byte (for timeouts).
- ``protected_upstream`` (function scope): a private stateful upstream answering 401 to any MCP request without
  ``Authorization: TOKEN`` (what a tenant puts in a secret header), with loopback allow-listed for this test.

Not here: the upstream server itself and its handle (``federation/upstream_server.py``), anything about mcp-host.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import free_port
from tests.federation.upstream_server import MODES, PATH, UpstreamProcess

TOKEN = "Bearer upstream-secret-7f3a"


def start_upstream(mode: str, directory: Path, **options: Any) -> UpstreamProcess:
    port = free_port()
    upstream = UpstreamProcess(mode, port, directory / f"upstream-{mode}-{port}.log", **options)
    upstream.start()
    return upstream


@pytest.fixture(scope="session")
def stateful_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    upstream = start_upstream("stateful", tmp_path_factory.mktemp("upstream"))
    yield upstream
    upstream.stop()


@pytest.fixture(scope="session")
def stateless_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    upstream = start_upstream("stateless", tmp_path_factory.mktemp("upstream"))
    yield upstream
    upstream.stop()


@pytest.fixture(scope="session", params=MODES)
def upstream(request: pytest.FixtureRequest) -> UpstreamProcess:
    shared: UpstreamProcess = request.getfixturevalue(f"{request.param}_upstream")
    return shared


@pytest.fixture
def upstream_server(tmp_path: Path) -> Iterator[Callable[[str], UpstreamProcess]]:
    started: list[UpstreamProcess] = []

    def start(mode: str) -> UpstreamProcess:
        upstream = start_upstream(mode, tmp_path)
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        upstream.stop()


@pytest.fixture
def unique_tag() -> str:
    """A tag (and tool-name suffix) no other test uses, so tests can share an upstream."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def down_url() -> str:
    return f"http://127.0.0.1:{free_port()}{PATH}"


@pytest.fixture
def silent_url() -> Iterator[str]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []

    def accept_forever() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # the listener was closed: the fixture is over
                return
            accepted.append(connection)  # held open, never read from or written to

    thread = threading.Thread(target=accept_forever, name="silent-upstream", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}{PATH}"
    # shutdown() wakes the blocked accept() on Linux; close() alone may not.
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()


@pytest.fixture
def protected_upstream(settings: Any, tmp_path: Path) -> Iterator[UpstreamProcess]:
    settings.MCP_APP = {**settings.MCP_APP, "OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}
    upstream = start_upstream("stateful", tmp_path, authorization=TOKEN)
    yield upstream
    upstream.stop()


# What the harness's upstream offers (tests/federation/upstream_server.py), as mcp-host imports it: tool names in
# the upstream's listing order, resources and templates by URI, prompts by name.
UPSTREAM_TOOLS = ("echo", "add", "slow", "ask_name", "summarize", "ask_directly", "ask_later", "moved", "fail", "grow")
UPSTREAM_RESOURCES = ("note://items/{id}", "note://readme")
UPSTREAM_PROMPTS = ("greet",)


def prefixed(prefix: str, names: tuple[str, ...] = UPSTREAM_TOOLS) -> list[str]:
    """The upstream's names under ``prefix``, sorted (as listings by name show them)."""
    return sorted(f"{prefix}{name}" for name in names)
