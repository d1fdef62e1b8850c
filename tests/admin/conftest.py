"""Two tenants, Acme and Globex, each with every kind of object and an owner, an admin and a viewer; and a
logged-in Django test client per user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client


@pytest.fixture
def acme(world_factory: Callable[..., Any]) -> Any:
    return world_factory("acme")


@pytest.fixture
def globex(world_factory: Callable[..., Any]) -> Any:
    return world_factory("globex")


@pytest.fixture
def login() -> Callable[[Any], Client]:
    def make(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make
