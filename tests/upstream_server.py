"""A real upstream MCP server for the front doors' tests: the official SDK's ``MCPServer`` in its own process.

Run as ``python -m tests.upstream_server PORT [stateful|stateless] [REQUIRED_AUTHORIZATION]``: tool ``echo``, a
resource ``note://readme`` and a prompt ``greet``, at ``http://127.0.0.1:PORT/mcp``. With
``REQUIRED_AUTHORIZATION``, every request without that ``Authorization`` value is answered 401.
``POST /grow?name=N`` adds a tool ``N`` (what a later sync should pick up).

The ``upstream_server`` fixture (a plugin of ``tests/conftest.py``) starts one per test on a free port, waits
(bounded) for its port, and stops it after.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TOKEN = "Bearer upstream-secret-7f3a"


@dataclass
class UpstreamServer:
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def grow(self, name: str) -> None:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/grow?name={name}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


@pytest.fixture
def upstream_server(settings: object) -> Iterator[UpstreamServer]:
    """A running upstream requiring ``Authorization: TOKEN``; loopback is allow-listed for the test."""
    from tests.e2e.conftest import free_port, wait_for_port

    settings.MCP_APP = {**getattr(settings, "MCP_APP", {}), "HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}  # type: ignore[attr-defined]
    port = free_port()
    root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen([sys.executable, "-m", "tests.upstream_server", str(port), "stateful", TOKEN], cwd=root)
    try:
        wait_for_port(port, process, "the upstream MCP server")
        yield UpstreamServer(port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse

    port = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "stateful"
    required = sys.argv[3] if len(sys.argv) > 3 else ""
    server = MCPServer("test-upstream", version="1.0")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    @server.resource("note://readme")
    def readme() -> str:
        return "read me"

    @server.prompt()
    def greet(who: str) -> str:
        return f"Greet {who}"

    @server.custom_route("/grow", methods=["POST"])
    async def grow(request: Request) -> JSONResponse:
        name = request.query_params["name"]

        def added(text: str = "") -> str:
            return f"{name}: {text}"

        server.add_tool(added, name=name, description=f"Added at run time as {name}.")
        return JSONResponse({"added": name})

    app = server.streamable_http_app(stateless_http=(mode == "stateless"))

    if required:
        inner = app

        async def app(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] == "http" and scope["path"].startswith("/mcp"):
                headers = dict(scope["headers"])
                if headers.get(b"authorization", b"").decode() != required:
                    await PlainTextResponse("unauthorized", status_code=401)(scope, receive, send)
                    return
            await inner(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
