"""The messages a worker call crosses processes with: typed, versioned dataclasses, each serialised in one place.

- ``WorkerMessage``: what the serving process knows of the request (era, log level, whether progress was asked
  for, whether server-to-client requests can be carried, whether the call is a task, the answers to its input
  requests so far), the call's task id and cancellation channel, and the call itself (``CallSpec``, with the
  server as it was ``Served``: what ``records.call_spec`` makes of the record, so that the worker reads nothing
  back); for a call whose record the serving process did not write (``Unwritten``: only it awaits the call), what
  else the worker writes the record with; ``to_wire`` is the JSON of the Celery message, ``from_wire`` reads it
  back;
- ``WorkerEvent`` (``Notify``, ``Progress``, ``Ask``, ``Done``): what the running call tells the processes awaiting
  it on its event group (``event_to_wire``, ``event_from_wire``); ``Answer``: the client's answer to an ``Ask``.

Every reader takes the older shapes too (no ``version`` key: version 1; older still, no ``call``, ``task_id`` or
``cancel_channel``: the worker loads the record) and ignores unknown keys, so that a message of another version
still runs as far as it can.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..events import WORKER_ANSWER, WORKER_EVENT
from ..protocol.errors import InternalError

VERSION = 3  # 3: ``unwritten`` (a worker of version 2 cannot take such a call: upgrade workers first)


@dataclass(frozen=True)
class Served:
    """The server as a request was served it (``created_at``: its catalog revision's, in ISO form)."""

    pk: int
    server_id: str
    name: str
    title: str
    version: str
    instructions: str
    tenant_pk: int
    tenant_slug: str
    catalog_version: int
    created_at: str
    time_zone: str = "UTC"  # the tenant's: whose day the call's usage counts in (absent from older messages)


@dataclass(frozen=True)
class CallSpec:
    """What a worker needs to run a call besides its record's state; none of it changes after dispatch."""

    task_id: str
    tool_name: str
    arguments: dict[str, Any]
    protocol_version: str
    client_capabilities: dict[str, Any]
    deadline: float
    agent_pk: int
    agent_id: str
    server: Served
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> CallSpec:
        fields: dict[str, Any] = {key: body.get(key) for key in cls.__dataclass_fields__}
        server = body["server"]
        fields["server"] = Served(**{key: server[key] for key in Served.__dataclass_fields__ if key in server})
        return cls(**fields)


@dataclass(frozen=True)
class Unwritten:
    """What the worker writes a call's record with besides its ``CallSpec``, when the serving process did not write
    it (``ToolTask.objects.worker_call``): when it was queued (epoch seconds), its TTL and the JSON-RPC request id."""

    queued_at: float
    ttl_ms: int
    request_id: str


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
    call: CallSpec | None = None
    unwritten: Unwritten | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"version": VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> WorkerMessage:
        call = CallSpec.from_wire(body["call"]) if isinstance(body.get("call"), dict) else None
        row = body.get("unwritten")
        unwritten = (
            Unwritten(float(row["queued_at"]), int(row["ttl_ms"]), str(row.get("request_id") or ""))
            if isinstance(row, dict)
            else None
        )
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
            unwritten=unwritten,
        ).with_call(call)

    def with_call(self, call: CallSpec | None) -> WorkerMessage:
        """This message with ``call`` (from the message, or loaded from the record): its answers and request
        state, where it has them, win over the request's."""
        if call is None:
            return self
        return dataclasses.replace(
            self,
            call=call,
            task_id=call.task_id or self.task_id,
            input_responses=call.input_responses or self.input_responses,
            request_state=call.request_state or self.request_state,
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
    """The outcome is stored; it travels along (``result`` or ``error``) when small, else the record holds it.
    ``released``: the worker gave the call's quota slot back already (the awaiting process need not)."""

    KIND: ClassVar[str] = "done"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    released: bool | None = None


WorkerEvent = Notify | Progress | Ask | Done


def event_to_wire(event: WorkerEvent, group: str) -> dict[str, Any]:
    """The channel-layer message of ``event`` of the call whose event group is ``group``."""
    fields = {key: value for key, value in dataclasses.asdict(event).items() if value is not None}
    return {"type": WORKER_EVENT, "version": VERSION, "group": group, "kind": event.KIND, **fields}


def event_from_wire(body: dict[str, Any]) -> tuple[str, WorkerEvent] | None:
    """The event group and typed event of ``body``; ``None`` for another message, an unknown kind or one without
    its required fields (a progress report without a number). Fields of the wrong type are dropped; an event of
    an older worker names no group (``""``)."""
    kind = body.get("kind") if body.get("type") == WORKER_EVENT else None
    event: WorkerEvent | None = None
    if kind == Notify.KIND:
        event = Notify(_dict(body.get("message")) or {})
    elif kind == Progress.KIND:
        progress, total, message = body.get("progress"), body.get("total"), body.get("message")
        if isinstance(progress, int | float):
            total = total if isinstance(total, int | float) else None
            event = Progress(progress, total, message if isinstance(message, str) else None)
    elif kind == Ask.KIND:
        reply = str(body.get("reply") or "")
        event = Ask(body.get("id", 0), str(body.get("method")), _dict(body.get("params")) or {}, reply)
    elif kind == Done.KIND:
        event = Done(_dict(body.get("result")), _dict(body.get("error")), body.get("released") is True or None)
    return None if event is None else (str(body.get("group") or ""), event)


@dataclass(frozen=True)
class Answer:
    """The client's answer to an ``Ask``, sent to the asking call's ``reply`` address under the ask's ``id``."""

    id: int
    answer: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"type": WORKER_ANSWER, "version": VERSION, "id": self.id, "answer": self.answer}

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Answer | None:
        """``None`` for another message; an answer that is no object stands for an internal error."""
        if body.get("type") != WORKER_ANSWER:
            return None
        return cls(int(body.get("id", 0)), _dict(body.get("answer")) or {"error": InternalError("?").to_wire()})


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None
