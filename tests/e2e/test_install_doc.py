"""docs/install.md, followed as a new user would: the wheel in a fresh virtualenv, a project that is not mcp_host.

1. Build the wheel from a copy of this repository (``pip wheel --no-deps``).
2. Create a virtualenv **without** system site packages and install ``<wheel>[server]`` there, its declared
   dependencies constrained by ``requirements.lock`` (so a dependency missing from ``pyproject.toml`` fails here),
   plus pytest, pytest-django and pytest-asyncio for step 8 of the document.
3. ``django-admin startproject myproject``, then every marked block of docs/install.md in order:
   ``<!-- run -->`` blocks run line by line in the project, ``<!-- file: path -->`` blocks replace a file,
   ``<!-- append: path -->`` blocks are appended to one.
4. Serve the project with the venv's daphne: the admin's stylesheets and scripts are served (200: the page's
   static-files step), and the project's own tool answers the official Python SDK client, using the URL and
   token that ``mcp_bootstrap`` printed.
5. Run the project's own tests (the document's step 8) with the venv's pytest: the plugin shipped in the wheel;
   no warning in their output (the page's ``pytest.ini`` is complete).

pip reads packages from its cache after the first run; CI can reach PyPI for the first.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import free_port, port_open

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "install.md"
INSTALL_TIMEOUT_SECONDS = 600
STEP_TIMEOUT_SECONDS = 120
WAIT_SECONDS = 20.0
_MARKED = re.compile(r"<!-- (run|file: (?P<file>\S+)|append: (?P<append>\S+)) -->\n```[a-z]*\n(?P<body>.*?)```", re.S)


def _clean_env(venv: Path) -> dict[str, str]:
    """Nothing of this test run's environment (DJANGO_SETTINGS_MODULE, DATABASE_URL, …) leaks into the project."""
    env = {key: os.environ[key] for key in ("HOME", "LANG", "TMPDIR", "PIP_INDEX_URL") if key in os.environ}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(command: list[str] | str, cwd: Path, env: dict[str, str], timeout: float = STEP_TIMEOUT_SECONDS) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, shell=isinstance(command, str)
    )
    if result.returncode != 0:
        pytest.fail(f"{command!r} exited with {result.returncode}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "node_modules", "__pycache__"),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(wheels), "."],
        cwd=source,
        check=True,
        timeout=STEP_TIMEOUT_SECONDS,
    )
    (wheel,) = wheels.glob("mcp_host-*.whl")
    return wheel


def test_install_doc_in_a_fresh_venv(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=STEP_TIMEOUT_SECONDS)
    env = _clean_env(venv)
    python = str(venv / "bin" / "python")
    assert "site-packages" not in _run(
        [python, "-c", "import sys; print(sys.path[-1] if False else '')"], tmp_path, env
    )
    _run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(ROOT / "requirements.lock"),
         f"mcp-host[server] @ {wheel.as_uri()}", "pytest", "pytest-django", "pytest-asyncio"],
        tmp_path, env, timeout=INSTALL_TIMEOUT_SECONDS,
    )  # fmt: skip
    # The venv sees only what the wheel declared: this project's test-only packages are absent.
    _run(
        [python, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('mcp_host') is not None)"], tmp_path, env
    )

    project = tmp_path / "project"
    project.mkdir()
    _run([str(venv / "bin" / "django-admin"), "startproject", "myproject", "."], project, env)

    outputs: list[str] = []
    blocks = list(_MARKED.finditer(DOC.read_text()))
    assert len(blocks) >= 8, "docs/install.md lost its marked blocks"
    for block in blocks:
        body = block["body"]
        if block["file"]:
            target = project / block["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        elif block["append"]:
            with (project / block["append"]).open("a") as handle:
                handle.write("\n" + body)
        else:
            for line in body.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    outputs.append(_run(line, project, env))

    bootstrap = next(output for output in outputs if "MCP URL" in output)
    url = re.search(r"MCP URL : (\S+)", bootstrap)[1]  # type: ignore[index]
    token = re.search(r"Token   : (mcp_\S+)", bootstrap)[1]  # type: ignore[index]
    assert url == "http://127.0.0.1:8000/mcp/shop?agentId=support-bot"

    port = free_port()
    logs = tmp_path / "daphne.log"
    with logs.open("wb") as log:
        daphne = subprocess.Popen(
            [str(venv / "bin" / "daphne"), "-b", "127.0.0.1", "-p", str(port), "myproject.asgi:application"],
            cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not port_open(port):
            if daphne.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the project's daphne did not start:\n{logs.read_text()}")
            try:
                daphne.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        _assert_admin_is_styled(base)
        tools, result = asyncio.run(_call_with_sdk(url.replace("http://127.0.0.1:8000", base), token))
    finally:
        daphne.terminate()
        daphne.wait(timeout=10)
    assert tools == ["order_status"]
    assert result.is_error is False
    assert result.structured_content == {"order_id": "42", "status": "shipped"}

    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECONDS,
    )  # fmt: skip
    # The project's pytest summary must not pass for this run's own: report it under another name.
    summary = tests.stdout.replace(" passed", " passed-in-project")
    assert tests.returncode == 0, f"{summary}\n{tests.stderr}"
    assert re.search(r"\b2 passed-in-project\b", summary), summary
    # The page's pytest.ini is complete: pytest-asyncio's deprecation warning (an unset fixture loop scope) and
    # any other warning would show here.
    assert "warnings summary" not in summary and "Warning" not in summary + tests.stderr, summary


def _assert_admin_is_styled(base: str) -> None:
    """The admin's login page under daphne links its stylesheets and scripts, and every one is served (200):
    the page's static-files step works (without it they are 404 and the admin is unstyled)."""
    page = httpx.get(f"{base}/admin/login/", timeout=10)
    assert page.status_code == 200
    stylesheets = re.findall(r'<link[^>]+rel="stylesheet"[^>]+href="([^"]+)"', page.text) + re.findall(
        r'<link[^>]+href="([^"]+)"[^>]+rel="stylesheet"', page.text
    )
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', page.text)
    assert any(href.endswith(".css") for href in stylesheets), page.text[:2000]
    for href in {*stylesheets, *scripts}:
        asset = httpx.get(href if href.startswith("http") else f"{base}{href}", timeout=10)
        assert asset.status_code == 200, f"{href}: {asset.status_code}"
        if href.endswith(".css"):
            assert asset.headers["content-type"].startswith("text/css")
            assert len(asset.content) > 100


async def _call_with_sdk(url: str, token: str) -> tuple[list[str], object]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        asyncio.timeout(WAIT_SECONDS),
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        tools = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("order_status", {"order_id": "42"})
    return tools, result
