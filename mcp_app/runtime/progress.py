"""Progress that is also kept on the call's durable record, for the admin's view of running calls.

``RecordedProgress`` is a ``ProgressReporter`` that also writes the latest progress on the call's ``ToolTask``
(the first report, then at most one per ``RECORD_INTERVAL_SECONDS``, and the last); a failed write never fails
the call. ``deferred`` (a worker call that is not a task: only the admin reads its progress) writes nothing in
the call's first ``RECORD_INTERVAL_SECONDS`` and keeps what it did not write in ``unwritten``, for the outcome's
write to carry. Not owned here: the wire notification (``protocol.reporters``), the admin's display.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.db import database_sync_to_async

from ..models import ToolTask
from ..protocol.reporters import ProgressReporter

logger = logging.getLogger("mcp_app.runtime")

RECORD_INTERVAL_SECONDS = 1.0


class RecordedProgress(ProgressReporter):
    def __init__(self, token: str | int | None, emit: Any, record_pk: int, *, deferred: bool = False) -> None:
        super().__init__(token, emit)
        self.record_pk = record_pk
        self.deferred = deferred
        self.unwritten: dict[str, Any] | None = None
        self._written_at: float | None = time.monotonic() if deferred else None
        self._recorded: float | None = None

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        await super().report(progress, total, message)
        if self._recorded is not None and progress <= self._recorded:
            return
        now = time.monotonic()
        final = total is not None and progress >= total and not self.deferred
        self._recorded, self.unwritten = progress, ToolTask.progress_columns(progress, total, message)
        if self._written_at is not None and now - self._written_at < RECORD_INTERVAL_SECONDS and not final:
            return
        self._written_at, self.unwritten = now, None
        try:
            await database_sync_to_async(ToolTask.objects.record_progress)(self.record_pk, progress, total, message)
        except Exception as error:  # the call goes on; the admin shows older progress
            logger.warning("could not record progress of task %s: %s: %s", self.record_pk, type(error).__name__, error)
