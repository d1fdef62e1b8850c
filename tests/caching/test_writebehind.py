"""Last-used stamps and session activity: queued on the request path, written by a background thread, bounded,
never moved backwards."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from mcp_app.caching import identity, writebehind
from mcp_app.models import AgentToken
from tests.helpers import wait_until_blocking
from tests.request_path import wait_caches_ready


def entry_of(token: AgentToken) -> identity.TokenEntry:
    identity.clear()
    entry = identity.token(token.digest, load=True)
    assert entry is not None
    return entry


@pytest.fixture
def quick_writer(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 0.05}


def test_the_background_thread_writes_what_the_path_queued(transactional_db: None, token_factory, quick_writer):
    token, _raw = token_factory()
    now = timezone.now()
    writebehind.token_used(entry_of(token), now)
    writebehind._wake.set()  # the thread may be waiting out a longer interval from an earlier test
    wait_until_blocking(
        lambda: AgentToken.objects.get(pk=token.pk).last_used_at is not None,
        what="the write-behind thread writing the stamp",
    )
    assert AgentToken.objects.get(pk=token.pk).last_used_at == now


def test_a_stamp_is_queued_at_most_once_per_interval(db: None, token_factory):
    token, _raw = token_factory()
    entry = entry_of(token)
    now = timezone.now()
    writebehind.token_used(entry, now)
    writebehind.token_used(entry, now + timedelta(seconds=30))  # TOKEN_LAST_USED_INTERVAL_SECONDS is 60
    assert writebehind.flush() == 1
    writebehind.token_used(entry, now + timedelta(seconds=61))
    assert writebehind.pending() == 1


def test_stamps_only_move_forward(db: None, token_factory):
    token, _raw = token_factory()
    later = timezone.now() + timedelta(hours=1)
    AgentToken.objects.filter(pk=token.pk).update(last_used_at=later)  # another process wrote a newer one
    entry = entry_of(token)
    entry.last_used_at = None
    writebehind.token_used(entry, timezone.now())
    writebehind.flush()
    assert AgentToken.objects.get(pk=token.pk).last_used_at == later


def test_the_queue_is_bounded(db: None, token_factory, settings: Any):
    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_MAX_PENDING": 1, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}
    first, second = (entry_of(token_factory()[0]) for _ in range(2))
    dropped = writebehind.dropped
    writebehind.token_used(first, timezone.now())
    writebehind.token_used(second, timezone.now())
    assert writebehind.pending() == 1
    assert writebehind.dropped == dropped + 1


def test_an_entry_past_its_maximum_age_is_loaded_again(db: None, token_factory, monkeypatch, settings: Any):
    token, _raw = token_factory()
    wait_caches_ready()
    assert identity.token(token.digest, load=True) is not None
    assert identity.token(token.digest, load=False) is not None
    age = float(settings.MCP_APP.get("IDENTITY_CACHE_MAX_AGE_SECONDS", 300))
    real = time.monotonic
    monkeypatch.setattr(identity.time, "monotonic", lambda: real() + age + 1)
    with pytest.raises(identity.CacheMiss):
        identity.token(token.digest, load=False)
