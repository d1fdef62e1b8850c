"""What the catalog resolves an entry to, and a runner runs, for the kinds whose definition is not a target already:
a webhook, a resource's stored content, a prompt's stored messages. Plain frozen data, carried by a descriptor
as its opaque ``target`` and run by the executor registered for its type (``runtime.executors``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HttpTarget:
    """A resolved http tool. ``secret_headers`` stays encrypted until a request is sent (and is not in repr)."""

    url: str
    method: str
    headers: tuple[tuple[str, str], ...] = ()
    # None: the operator's default; either way bounded by the operator's maximum when the call is made.
    timeout_seconds: float | None = None
    secret_headers: str = field(default="", repr=False)


@dataclass(frozen=True)
class StaticResourceTarget:
    text: str
    blob: str


@dataclass(frozen=True)
class StaticPromptTarget:
    messages: tuple[dict[str, Any], ...]
