"""How a running call reports back on its request's response: progress and log notifications.

``ProgressReporter`` sends ``notifications/progress`` when the client asked with a token; ``LogReporter`` sends
``notifications/message`` at or above the client's log level. Both send through an ``Emit``; ``discard`` where
nothing can be streamed back. Not here: where the notification goes, or what the admin shows of progress.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# Sends one JSON-RPC notification on the request's response (progress, logs); usually ``outbound.notify``, gated
# by the task runner once a call has become a task.
Emit = Callable[[dict[str, Any]], Awaitable[None]]


async def discard(message: dict[str, Any]) -> None:
    """An ``Emit`` for contexts where nothing can be streamed back."""


class ProgressReporter:
    """Sends ``notifications/progress`` for one request, if and only if the client asked with a token."""

    def __init__(self, token: str | int | None, emit: Emit) -> None:
        self.token = token
        self._emit = emit
        self._last: float | None = None

    @property
    def enabled(self) -> bool:
        return self.token is not None

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if not self.enabled:
            return
        # The spec requires progress to increase with each notification; stale values are dropped.
        if self._last is not None and progress <= self._last:
            return
        self._last = progress
        await self.send(progress, total, message)

    async def send(self, progress: float, total: float | None, message: str | None) -> None:
        """One report that passed: ``notifications/progress`` with the token (a subclass may carry it elsewhere,
        e.g. to the process that holds the client's token)."""
        params: dict[str, Any] = {"progressToken": self.token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._emit({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class LogReporter:
    """Sends ``notifications/message`` at or above the level the client asked for (``None``: send nothing)."""

    def __init__(self, threshold: str | None, emit: Emit) -> None:
        self.threshold = threshold
        self._emit = emit

    def allows(self, level: str) -> bool:
        if self.threshold is None or level not in LOG_LEVELS:
            return False
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.threshold)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        if not self.allows(level):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._emit({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
