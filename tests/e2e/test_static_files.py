"""The admin's static files through a real daphne: after ``collectstatic`` with DEBUG off (production), and
straight from the apps with DEBUG on (a fresh checkout). Before WhiteNoise, ``/static/admin/css/base.css`` was
a 404 under daphne and the admin had no styling at all. The stylesheet checked is the admin theme's (django-unfold)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import running_daphne

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# The admin's theme is django-unfold: its login page and every admin page link unfold's stylesheet (Django's
# admin/css/base.css is still collected, but no longer linked).
STYLESHEET = "/static/unfold/css/styles.css"


def _collectstatic(target: Path) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env={**_base_env(), "STATIC_ROOT": str(target)},
        check=True,
        timeout=120,
    )


def _base_env() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "DEBUG"}


def _fetch(base_url: str, path: str) -> httpx.Response:
    return httpx.get(base_url + path, timeout=10)


def test_admin_stylesheet_is_served_with_debug_off_after_collectstatic(django_db_setup, tmp_path_factory):
    static_root = tmp_path_factory.mktemp("static")
    _collectstatic(static_root)
    with running_daphne(tmp_path_factory, {"DEBUG": "0", "STATIC_ROOT": str(static_root)}) as server:
        response = _fetch(server.url, STYLESHEET)
        assert response.status_code == 200, server.stderr()
        assert response.headers["content-type"].startswith("text/css")
        assert response.text == (static_root / "unfold/css/styles.css").read_text()
        assert _fetch(server.url, "/static/unfold/css/no-such-file.css").status_code == 404
        # The login page links the stylesheet it is served.
        login = _fetch(server.url, "/admin/login/")
        assert login.status_code == 200
        assert f'href="{STYLESHEET}"' in login.text


def test_admin_stylesheet_is_served_with_debug_on_without_collectstatic(django_db_setup, tmp_path_factory):
    empty = tmp_path_factory.mktemp("no-static")
    with running_daphne(tmp_path_factory, {"DEBUG": "1", "STATIC_ROOT": str(empty)}) as server:
        response = _fetch(server.url, STYLESHEET)
        assert response.status_code == 200, server.stderr()
        assert response.headers["content-type"].startswith("text/css")
        import unfold

        assert response.text == (Path(unfold.__file__).parent / "static/unfold/css/styles.css").read_text()
