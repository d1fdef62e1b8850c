"""The objects tool authors touch: ``ToolContext``, ``ToolError`` and ``ToolResult``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol.context import ProgressReporter


class ToolError(Exception):
    """Raised by a tool to refuse or fail with a message the client sees, as an ``isError`` result."""


@dataclass
class ToolResult:
    """An explicit ``CallToolResult``: content blocks, optional structured content, optional error flag."""

    content: Sequence[dict[str, Any]] = ()
    structured_content: Any = None
    is_error: bool = False


@dataclass
class ToolContext:
    """What a running tool knows about its call, and how it reports back."""

    server_id: str
    tenant: str | None
    agent_id: str | None
    _progress: ProgressReporter = field(repr=False)

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the client asked for progress; otherwise do nothing."""
        await self._progress.report(progress, total, message)
