"""What `make run` installs is the runtime only; the tools of `make test`, `make lint` and CI come on top.

In a fresh copy of the repository (no virtualenv yet, as after `git clone`), ``make -n`` shows what each target
would install: `make run` installs ``requirements.txt`` and nothing else, `make test` and `make lint` add
``requirements-dev.txt``. The packages behind ``requirements.txt`` are then followed through their declared
dependencies (the metadata of this environment, which holds the locked versions, markers and extras evaluated):
no test, lint or browser tool is among them, and ``requirements.lock`` pins every one of them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DEV_ONLY = {
    "pytest",
    "pytest-django",
    "pytest-asyncio",
    "mypy",
    "playwright",
    "ruff",
    "hypothesis",
    "schemathesis",
    "import-linter",
    "django-stubs",
    "djangorestframework-stubs",
    "py-spy",
}
# Not among them: ``mcp``, the official SDK, which the runtime uses as the client of upstream MCP servers.


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("make") is None:
        pytest.fail("make is needed (the README's commands are make targets)")
    copy = tmp_path_factory.mktemp("clone") / "mcp-host"
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "node_modules", "__pycache__"),
    )
    return copy


def dry_run(copy: Path, target: str) -> list[str]:
    """The pip commands ``make -n <target>`` would run (make resolves every prerequisite: nothing is installed)."""
    result = subprocess.run(
        ["make", "-n", target, "PYTHON=python3", "NPM_HOME=/nonexistent"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.strip() for line in result.stdout.splitlines() if re.search(r"\bpip install\b", line)]


def requirement_files(command: str) -> list[str]:
    return re.findall(r"-r (\S+)", command)


def read_requirements(path: Path) -> list[Requirement]:
    """The requirements of a file, following its ``-r`` includes."""
    found: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            found += read_requirements(path.parent / line[3:].strip())
        else:
            found.append(Requirement(line))
    return found


def closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution these requirements pull in, by their installed metadata (extras and markers applied)."""
    seen: set[str] = set()
    todo = [(requirement, frozenset(requirement.extras)) for requirement in requirements]
    while todo:
        requirement, extras = todo.pop()
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for declared in metadata.requires(requirement.name) or []:
            dependency = Requirement(declared)
            if dependency.marker is None or any(
                dependency.marker.evaluate({"extra": extra}) for extra in (extras or {""})
            ):
                todo.append((dependency, frozenset(dependency.extras)))
    return {key.split("[", 1)[0] for key in seen}


def test_make_run_installs_the_runtime_file_only(fresh_copy: Path) -> None:
    commands = dry_run(fresh_copy, "run")
    assert any("--upgrade pip" in command for command in commands)
    installs = [command for command in commands if "--upgrade pip" not in command]
    assert len(installs) == 1, installs
    assert requirement_files(installs[0]) == ["requirements.txt"]
    assert "-c requirements.lock" in installs[0]


@pytest.mark.parametrize("target", ["test", "lint"])
def test_make_test_and_lint_add_the_development_file(fresh_copy: Path, target: str) -> None:
    files = [name for command in dry_run(fresh_copy, target) for name in requirement_files(command)]
    assert list(dict.fromkeys(files)) == ["requirements.txt", "requirements-dev.txt"]  # test-embedded: again
    assert all("-c requirements.lock" in command for command in dry_run(fresh_copy, target) if "-r " in command)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make install-dev\b", ci, re.M)


def test_the_runtime_pulls_in_no_test_lint_or_browser_tool() -> None:
    runtime = closure(read_requirements(ROOT / "requirements.txt"))
    assert {"django", "daphne", "djangorestframework", "celery", "whitenoise"} <= runtime
    assert runtime & DEV_ONLY == set()
    development = closure(read_requirements(ROOT / "requirements-dev.txt"))
    assert development >= DEV_ONLY and runtime <= development


def test_the_lock_pins_runtime_and_development_alike() -> None:
    pinned = {
        canonicalize_name(line.split("==", 1)[0])
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    missing = closure(read_requirements(ROOT / "requirements-dev.txt")) - pinned
    assert missing == set(), f"not pinned in requirements.lock (make lock): {sorted(missing)}"
