"""docs/deployment.md is true to the code: its production environment passes ``check --deploy`` with no
warning, and its table names exactly the environment variables the deployment reads.

``check --deploy`` runs in a subprocess (settings are read once per process) with the documented environment,
placeholders filled with random values; the same environment without ``MCP_PRODUCTION`` must fail, so the test
cannot pass by accident.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "deployment.md"
# Where the reference deployment reads its environment.
SOURCES = [ROOT / "manage.py", *sorted((ROOT / "mcp_host").glob("*.py")), *sorted((ROOT / "mcp_app").rglob("*.py"))]
_ENV_READ = re.compile(
    r"""(?:os\.environ(?:\.get|\.setdefault)?\(\s*|os\.environ\[\s*|_env_flag\(\s*|_env_list\(\s*)["']([A-Z][A-Z0-9_]*)["']"""
)


def documented_environment() -> dict[str, str]:
    block = re.search(r"<!-- production-env -->\n```sh\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/deployment.md lost its production environment block"
    fills = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "MCP_METRICS_TOKEN": secrets.token_urlsafe(24),
        "MCP_SECRET_KEYS": secrets.token_urlsafe(32),
    }
    env = {}
    for line in block[1].splitlines():
        name, _, value = line.partition("=")
        env[name] = fills.get(name) or re.sub(r"<[^>]*>", "placeholder", value)
    return env


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The documented metrics directory exists on a deployed host (the process manager creates it), not here.
    env = {**env, "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="mcp-metrics-")}
    base = {key: value for key, value in os.environ.items() if not key.startswith(("MCP_", "SECURE_", "DJANGO_"))}
    for name in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "DATABASE_URL", "REDIS_URL"):
        base.pop(name, None)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_documented_production_environment_passes_check_deploy() -> None:
    env = documented_environment()
    assert env["MCP_PRODUCTION"] == "1"
    result = _check_deploy(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_without_production_defaults_check_deploy_fails() -> None:
    env = documented_environment()
    del env["MCP_PRODUCTION"]
    result = _check_deploy(env)
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr


def test_production_refuses_the_development_secret_key() -> None:
    env = documented_environment()
    del env["SECRET_KEY"]
    result = _check_deploy(env)
    assert result.returncode != 0
    assert "Set SECRET_KEY in production." in result.stderr


def _table_variables() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Environment variables") :]
    return re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, re.M)


def _code_variables() -> set[str]:
    return {name for path in SOURCES for name in _ENV_READ.findall(path.read_text())}


def test_the_table_lists_exactly_what_the_code_reads() -> None:
    documented = _table_variables()
    assert len(documented) == len(set(documented)), "a variable is listed twice"
    read = _code_variables()
    assert {"MCP_PRODUCTION", "MCP_SQLITE_PATH", "DATABASE_URL", "PROMETHEUS_MULTIPROC_DIR"} <= read
    assert sorted(read - set(documented)) == [], "read by the code but missing from docs/deployment.md"
    assert sorted(set(documented) - read) == [], "documented but read nowhere"


def test_the_settings_docstring_names_only_real_variables() -> None:
    import mcp_host.settings

    doc = mcp_host.settings.__doc__ or ""
    named = set(re.findall(r"^([A-Z][A-Z0-9_]+)\s{2,}", doc, re.M))
    assert named, "the settings docstring lists no variable"
    assert named <= _code_variables()
    assert "docs/deployment.md" in doc


@pytest.mark.parametrize("value", ["xml", "JSON "])
def test_an_unknown_log_format_is_refused(value: str) -> None:
    result = _check_deploy({**documented_environment(), "MCP_LOG_FORMAT": value})
    assert result.returncode != 0
    assert "MCP_LOG_FORMAT must be json or console" in result.stderr


def _code_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_router_snippet_is_the_tested_one_of_install_md() -> None:
    """docs/install.md's router runs in CI (tests/e2e/test_install_doc.py); the README's must be the same code."""
    readme = (ROOT / "README.md").read_text()
    install = (ROOT / "docs" / "install.md").read_text()
    readme_block = re.search(r"```python\n# myproject/asgi.py[^\n]*\n(.*?)```", readme, re.S)
    install_block = re.search(r"<!-- file: myproject/asgi.py -->\n```python\n(.*?)```", install, re.S)
    assert readme_block and install_block
    assert _code_lines(readme_block[1]) == _code_lines(install_block[1])
    assert "docs/install.md" in readme


@pytest.mark.parametrize("page", ["README.md", "docs/install.md"])
def test_the_install_commands_hold_no_placeholder_to_fill_in(page: str) -> None:
    """A pasted command runs or stops with a message; ``<owner>`` made pip fail on a URL that cannot exist."""
    text = (ROOT / page).read_text()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in _code_lines(block):
            command = line.split("  #", 1)[0]
            assert not re.search(r"<[a-z][\w -]*>", command), line
