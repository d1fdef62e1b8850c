"""Progress that is also kept on the call's durable record, for the admin's view of running calls.

``RecordedProgress`` is a ``ProgressReporter`` (``notifications/progress`` to the client exactly when the client
sent a progress token) that also writes the tool's latest progress, total and message on the call's ``ToolTask``
row, whether or not the client asked: the first report at once, then at most one write per
``RECORD_INTERVAL_SECONDS`` (the admin refreshes every 2 s), and always the report that reaches the total. A
failed write is logged and never fails the call. Used where a call has its record before it runs: worker calls
(``mcp_app.workers.running.execute``) and handshake-era tasks.

Not owned here: the wire notification (``mcp_app.protocol.reporters.ProgressReporter``), the admin's display.
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
    def __init__(self, token: str | int | None, emit: Any, record_pk: int) -> None:
        super().__init__(token, emit)
        self.record_pk = record_pk
        self._written_at: float | None = None
        self._recorded: float | None = None

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        await super().report(progress, total, message)
        if self._recorded is not None and progress <= self._recorded:
            return
        now = time.monotonic()
        final = total is not None and progress >= total
        if self._written_at is not None and now - self._written_at < RECORD_INTERVAL_SECONDS and not final:
            return
        self._written_at, self._recorded = now, progress
        try:
            await database_sync_to_async(ToolTask.objects.record_progress)(self.record_pk, progress, total, message)
        except Exception as error:  # the call goes on; the admin shows older progress
            logger.warning("could not record progress of task %s: %s: %s", self.record_pk, type(error).__name__, error)
