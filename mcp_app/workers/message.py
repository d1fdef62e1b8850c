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

What crosses back is a ``WorkerEvent``, one typed family: ``Notify``, ``Progress``, ``Ask`` and ``Done``, written
by ``event_to_wire`` and read by ``event_from_wire`` (the keys of the events of earlier versions, so an event of an
older worker is still understood).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

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
class Notify:
    """A notification of the tool (a log message, a list change), sent on as the request's own."""

    KIND: ClassVar[str] = "notify"
    message: dict[str, Any]


@dataclass(frozen=True)
class Progress:
    """A tool's progress report; the awaiting process alone encodes the client's ``notifications/progress``
    (with the client's own progress token)."""

    KIND: ClassVar[str] = "progress"
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class Ask:
    """A server-to-client request (elicitation, sampling) the awaiting process asks of its client; the answer
    goes back to ``reply`` under ``id``."""

    KIND: ClassVar[str] = "request"
    id: int
    method: str
    params: dict[str, Any]
    reply: str


@dataclass(frozen=True)
class Done:
    """The outcome is stored; it travels along (``result`` or ``error``) when small, else the record holds it."""

    KIND: ClassVar[str] = "done"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


WorkerEvent = Notify | Progress | Ask | Done


def event_to_wire(event: WorkerEvent) -> dict[str, Any]:
    """The body of ``event`` on the channel layer (its ``kind`` and fields; the relay adds type and group)."""
    return {"kind": event.KIND, **{key: value for key, value in dataclasses.asdict(event).items() if value is not None}}


def event_from_wire(body: dict[str, Any]) -> WorkerEvent | None:
    """The typed event of ``body``, or ``None`` for an unknown kind or one without its required fields (a
    progress report without a number); fields of the wrong type are dropped, unknown keys ignored."""
    kind = body.get("kind")
    if kind == Notify.KIND:
        return Notify(_dict(body.get("message")) or {})
    if kind == Progress.KIND:
        progress, total, message = body.get("progress"), body.get("total"), body.get("message")
        if not isinstance(progress, int | float):
            return None
        return Progress(
            progress, total if isinstance(total, int | float) else None, message if isinstance(message, str) else None
        )
    if kind == Ask.KIND:
        return Ask(
            body.get("id", 0), str(body.get("method")), _dict(body.get("params")) or {}, str(body.get("reply") or "")
        )
    if kind == Done.KIND:
        return Done(_dict(body.get("result")), _dict(body.get("error")))
    return None


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None
