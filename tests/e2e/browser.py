"""What the browser tests share: Debian's chromium (required under ``MCP_REQUIRE_SERVICES=1``), signing in, a
page server that runs the TypeScript SDK in the browser (``sdk_page_server``), and where screenshots go (the daphne as in production is ``styled_daphne`` in ``conftest.py``).

Screenshots: ``$MCP_ARTIFACTS_DIR`` (default ``artifacts/screenshots/`` in the repository, git-ignored), one folder
per test module; CI keeps the folder as the run's artifacts.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REQUIRE_SERVICES

CHROMIUM = os.environ.get("MCP_CHROMIUM", "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
WINDOW = {"width": 1366, "height": 900}


def chromium() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if path is None:
        message = f"chromium is not installed ({CHROMIUM}); .ci/run installs it with apt-get"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)
    return path


def screenshots(folder: str) -> Path:
    """The folder for one test's screenshots (created, emptied of an earlier run's)."""
    base = Path(os.environ.get("MCP_ARTIFACTS_DIR") or ROOT / "artifacts" / "screenshots")
    path = base / folder
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def login(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("form [type=submit]")
    page.wait_for_url(f"{base}/admin/")


# The bare imports of the TypeScript SDK's browser-side modules (client/auth.js, client/streamableHttp.js and what
# they import), mapped to files of the installed packages (ES modules), and content-type, the one CommonJS one,
# to a wrapper that makes it a module.
SDK_IMPORT_MAP = {
    "zod/v4": "/npm/zod/v4/index.js",
    "pkce-challenge": "/npm/pkce-challenge/dist/index.browser.js",
    "eventsource-parser/stream": "/npm/eventsource-parser/dist/stream.js",
    "content-type": "/commonjs/content-type/index.js",
}


@contextmanager
def sdk_page_server(node_modules: Path, script: Path) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (its own origin) whose pages run ``script`` as an ES module with the
    TypeScript SDK importable in the browser: ``/`` and ``/callback`` the page, ``/sdk/…`` the SDK's
    ``dist/esm``, ``/npm/…`` the other packages. No bundler: the browser resolves ``SDK_IMPORT_MAP``. Yields
    the origin."""
    page = (
        '<!doctype html><meta charset="utf-8"><title>SDK page</title>'
        f'<script type="importmap">{json.dumps({"imports": SDK_IMPORT_MAP})}</script>'
        '<script type="module" src="/page.mjs"></script>'
    ).encode()
    sdk = node_modules / "@modelcontextprotocol" / "sdk" / "dist" / "esm"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            body: bytes | None = None
            kind = "text/javascript"
            if path in ("/", "/callback"):
                body, kind = page, "text/html; charset=utf-8"
            elif path == "/page.mjs":
                body = script.read_bytes()
            elif path.startswith(("/sdk/", "/npm/", "/commonjs/")):
                prefix, _, rest = path[1:].partition("/")
                base = sdk if prefix == "sdk" else node_modules
                file = (base / rest).resolve()
                if file.is_relative_to(base.resolve()) and file.is_file():
                    body = file.read_bytes()
                    if prefix == "commonjs":
                        body = b"const module = { exports: {} }; const exports = module.exports;\n" + body
                        body += b"\nexport default module.exports;\n"
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
