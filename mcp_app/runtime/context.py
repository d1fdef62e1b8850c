"""The objects tool authors touch: ``ToolContext``, ``ToolError``, ``ToolResult`` and ``InputRequired``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol.context import LogReporter, ProgressReporter


class ToolError(Exception):
    """Raised by a tool to refuse or fail with a message the client sees, as an ``isError`` result.

    ``code`` and ``error_type`` are stable, machine-readable identifiers; the result carries them, with the
    message, as a JSON text block after the human-readable one, so programs can branch without parsing prose.
    """

    def __init__(self, message: str, *, code: str = "TOOL_ERROR", error_type: str = "tool_error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.error_type = error_type


@dataclass
class ToolResult:
    """An explicit ``CallToolResult``: content blocks, optional structured content, optional error flag."""

    content: Sequence[dict[str, Any]] = ()
    structured_content: Any = None
    is_error: bool = False


@dataclass
class InputRequired:
    """Returned by a tool that needs the client's input first (2026-07-28 multi-round-trip requests).

    ``requests`` maps ids of the tool's choosing to server-to-client requests, e.g.
    ``{"confirm": {"method": "elicitation/create", "params": {...}}}``. ``state`` is any JSON value the tool
    wants back on the retry; the server signs it, so the tool can trust what ``ToolContext.state`` returns.
    """

    requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    state: Any = None


@dataclass
class ToolContext:
    """What a running tool knows about its call, and how it reports back."""

    server_id: str
    tenant: str | None
    agent_id: str | None
    _progress: ProgressReporter = field(repr=False)
    _log: LogReporter = field(repr=False)
    input_responses: Mapping[str, Any] = field(default_factory=dict)
    state: Any = None

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the client asked for progress; otherwise do nothing."""
        await self._progress.report(progress, total, message)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` if the client asked for messages at this level; otherwise nothing."""
        await self._log.log(level, data, logger)
