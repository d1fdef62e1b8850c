"""Open streams that re-check their access: who is watching, which invalidations concern whom, what changed.

An open stream (a ``Streams`` of ``subscriptions/listen``, an idle GET stream of ``transport.fanout``) registers
with ``watch`` under its ``tags`` (``stream_tags``); an invalidation from any thread calls the ``wake`` of every
stream whose tags it names, which re-checks its access on its own event loop. ``changed_lists`` tells which lists a
re-checked grant shows differently, for the stream to announce.

Not here: the re-check itself (``auth.Credentials.recheck``), what a stream does when it is refused.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol

from .. import invalidation
from .auth import AccessGrant
from .sessions import DatabaseSession

# The stream's access checked again, as on a new request: the grant, or ``None`` when it is refused now.
Recheck = Callable[[], Awaitable[AccessGrant | None]]


class Watcher(Protocol):
    """An open stream that re-checks its access when an invalidation names one of its ``tags``."""

    tags: tuple[str, ...]

    def wake(self) -> None:
        """Re-check soon (called from any thread)."""


_watching: weakref.WeakSet[Watcher] = weakref.WeakSet()
_watching_lock = threading.Lock()


def watch(stream: Watcher) -> None:
    with _watching_lock:
        _watching.add(stream)


def unwatch(stream: Watcher) -> None:
    with _watching_lock:
        _watching.discard(stream)


def _heard(keys: frozenset[str] | None) -> None:
    """An invalidation (from any thread): wake the open streams it concerns, on their own event loops."""
    with _watching_lock:
        streams = list(_watching)
    for stream in streams:
        if keys is None or not keys.isdisjoint(stream.tags):
            stream.wake()


invalidation.register(_heard)


def stream_tags(grant: AccessGrant, session: DatabaseSession | None) -> tuple[str, ...]:
    """The invalidation keys that concern a stream (a tuple: smaller than a set, and matched by ``isdisjoint``)."""
    token = grant.token
    tags = _grant_tags(token.pk, token.agent_pk, token.tenant_pk, grant.server.pk)
    return tags if session is None else (*tags, f"session:{session.pk}")


@functools.lru_cache(maxsize=1024)
def _grant_tags(token_pk: int, agent_pk: int, tenant_pk: int, server_pk: int) -> tuple[str, ...]:
    # The same strings for every stream of one token on one server (an idle stream is kept small).
    return (f"token:{token_pk}", f"agent:{agent_pk}", f"tenant:{tenant_pk}", f"server:{server_pk}")


def changed_lists(before: AccessGrant, after: AccessGrant) -> list[str]:
    """The lists (``tools``, ``prompts``, ``resources``) whose entries differ between two grants of one catalog
    version: the caller's grant changed. (A new catalog version was announced to the server's streams already.)"""
    if before.server.catalog_version != after.server.catalog_version:
        return []
    old, new = before.catalog, after.catalog
    changed = {
        "tools": {d.name for d in old.tools} != {d.name for d in new.tools},
        "prompts": {d.name for d in old.prompts} != {d.name for d in new.prompts},
        "resources": {d.uri for d in (*old.resources, *old.templates)}
        != {d.uri for d in (*new.resources, *new.templates)},
    }
    return [kind for kind, differs in changed.items() if differs]
