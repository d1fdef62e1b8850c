"""Repository hygiene that CI enforces: migrations match the models, and ruff is clean."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_are_in_sync_with_models():
    out = io.StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_ruff_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    check = subprocess.run([str(ruff), "check", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout
    formatted = subprocess.run([str(ruff), "format", "--check", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert formatted.returncode == 0, formatted.stdout
