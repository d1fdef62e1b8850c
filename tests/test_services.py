"""The suite really runs on the production services when CI says so (MCP_REQUIRE_SERVICES=1).

Without that flag these tests skip on the embedded defaults; with it, a missing service is a failure.
"""

from __future__ import annotations

import os
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from tests.conftest import REQUIRE_SERVICES

pytestmark = pytest.mark.services


def _require(configured: bool, what: str) -> None:
    if not configured:
        if REQUIRE_SERVICES:
            pytest.fail(f"MCP_REQUIRE_SERVICES=1 but {what} is not configured")
        pytest.skip(f"{what} is not configured (embedded defaults)")


@pytest.mark.django_db
def test_database_is_postgresql():
    _require(bool(os.environ.get("DATABASE_URL")), "DATABASE_URL")
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("select version()")
        assert "PostgreSQL" in cursor.fetchone()[0]


def test_channel_layer_is_redis_and_delivers_across_a_group():
    _require(bool(settings.REDIS_URL), "REDIS_URL")
    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"

    async def round_trip() -> dict:
        channel = await layer.new_channel()
        group = f"test.{uuid.uuid4().hex}"
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "mcp.broadcast", "message": {"ok": True}})
        received = await layer.receive(channel)
        await layer.group_discard(group, channel)
        return received

    assert async_to_sync(round_trip)()["message"] == {"ok": True}


def test_cache_is_redis():
    _require(bool(settings.REDIS_URL), "REDIS_URL")
    key = f"mcp-test-{uuid.uuid4().hex}"
    cache.set(key, "value", 10)
    assert cache.get(key) == "value"
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")
