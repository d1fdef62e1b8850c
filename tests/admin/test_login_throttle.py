"""The admin login is throttled (issue 19: "the admin login is not throttled either"): django-axes counts failed
``authenticate()`` calls per client address; after ``AXES_FAILURE_LIMIT`` failures the address gets 429, even
with the right password, while other addresses log in. A success resets the count, so tests and people that log
in many times never trip it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client

LOGIN = "/admin/login/?next=/admin/"


def attempt(address: str, username: str, password: str) -> int:
    client = Client(REMOTE_ADDR=address)
    return client.post(LOGIN, {"username": username, "password": password}).status_code


def test_failed_admin_logins_are_throttled_per_address_and_successes_are_not(db: Any, settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast: many logins
    get_user_model().objects.create_superuser("root", "root@example.com", "right-password")
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit + 2):  # many logins in a row: never locked
        assert attempt("192.0.2.1", "root", "right-password") == 302
    statuses = [attempt("192.0.2.2", "root", f"wrong-{n}") for n in range(limit + 2)]
    assert statuses == [200] * (limit - 1) + [429] * 3  # the form again, then locked out
    assert attempt("192.0.2.2", "root", "right-password") == 429
    assert attempt("192.0.2.3", "root", "right-password") == 302
