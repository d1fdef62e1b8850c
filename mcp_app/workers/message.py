"""The message a worker call crosses processes with: one typed, versioned dataclass, serialised once.

``WorkerMessage`` is what the serving process knows of the request (era, log level, whether progress was asked
for, whether server-to-client requests can be carried, whether the call is a task, the answers to its input
requests so far), the call's task id and cancellation channel, and the call itself (``call``: what
``records.call_spec`` makes of the record, so that the worker reads nothing back). ``to_wire`` is the JSON the
Celery message carries; ``from_wire`` reads it back, and reads the older shapes too:

- version 1 (no ``version`` key): the same keys, written by a version before this module; the answers to input
  requests and the request state were in ``call`` or at the top level;
- older still: no ``call`` (the worker loads the record with its relations), no ``task_id``, no
  ``cancel_channel``.

Unknown keys are ignored, so a message of a newer version still runs on an older worker as far as it can.

``Progress`` is what crosses back: a tool's progress report as typed data (progress, total, message), which the
awaiting process alone encodes as the client's ``notifications/progress``, with the client's token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

VERSION = 2


@dataclass(frozen=True)
class WorkerMessage:
    """One worker call as it crosses processes (see the module docstring)."""

    era: str = "legacy"
    log_level: str | None = None
    progress: bool = False
    can_ask: bool = False
    in_task: bool = False
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None
    task_id: str | None = None
    cancel_channel: str | None = None
    call: dict[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"version": VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> WorkerMessage:
        call = body.get("call") if isinstance(body.get("call"), dict) else None
        return cls(
            era=str(body.get("era") or "legacy"),
            log_level=body.get("log_level"),
            progress=bool(body.get("progress")),
            can_ask=bool(body.get("can_ask")),
            in_task=bool(body.get("in_task")),
            task_id=str(body["task_id"]) if body.get("task_id") else None,
            cancel_channel=str(body["cancel_channel"]) if body.get("cancel_channel") else None,
            input_responses=body.get("input_responses") or None,
            request_state=body.get("request_state") or None,
        ).with_call(call)

    def with_call(self, call: dict[str, Any] | None) -> WorkerMessage:
        """This message with ``call`` (from the message, or loaded from the record): its answers and request
        state, where it has them, win over the request's."""
        if call is None:
            return self
        return dataclasses.replace(
            self,
            call=call,
            task_id=str(call["task_id"]) if call.get("task_id") else self.task_id,
            input_responses=call.get("input_responses") or self.input_responses,
            request_state=call.get("request_state") or self.request_state,
        )


@dataclass(frozen=True)
class Progress:
    """A tool's progress report as it travels from the worker to the process awaiting the call, which alone
    encodes the client's ``notifications/progress`` (with the client's own progress token)."""

    progress: float
    total: float | None = None
    message: str | None = None

    def to_event(self) -> dict[str, Any]:
        return {"kind": "progress", "progress": self.progress, "total": self.total, "message": self.message}

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Progress | None:
        """The report of a ``progress`` event, or ``None`` when it carries no number."""
        progress, total, message = event.get("progress"), event.get("total"), event.get("message")
        if not isinstance(progress, int | float):
            return None
        return cls(
            progress=progress,
            total=total if isinstance(total, int | float) else None,
            message=message if isinstance(message, str) else None,
        )
