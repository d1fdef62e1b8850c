"""The ports of the protocol core that take no request context: ``Outbound`` (the back-channel of one HTTP
request), ``Session`` (a handshake-era session), ``Tasks`` (2026-07-28 durable tasks) and ``CallAudit``.

A request without an implementation gets the port's "none" object (``NO_CHANNEL``, ``NO_TASKS``, ``NO_AUDIT``),
never ``None``. Design: docs/architecture.md ("Ports").

Not here: how the bytes are framed (``transport.writer``), which process holds the waiting call (the channel
layer), or when a request is allowed (the handlers decide by capability and era).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .errors import InternalError


class Outbound(Protocol):
    """What a request can send to its client besides its answer, and the client's messages back to it."""

    @property
    def can_request(self) -> bool:
        """``False``: no channel can carry a server-to-client request (``request`` answers with an error)."""

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a JSON-RPC notification to the client on this request's stream (dropped if there is none)."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a server-to-client request and return the client's response object (``{"result": …}`` or
        ``{"error": …}``); a client that does not answer in time gets a -32001-style error object."""

    async def deliver(self, request_id: str | int, answer: dict[str, Any]) -> None:
        """Hand a client's answer to whichever call (in whichever process) waits for ``request_id``."""

    async def cancel(self, request_id: str | int) -> None:
        """``notifications/cancelled``: stop the client's running request ``request_id``, wherever it runs."""

    async def close_stream(self) -> bool:
        """End this request's response stream now while the call goes on (SEP-1699); ``False`` when the stream
        cannot be resumed (no session, the stateless revision)."""


NO_CHANNEL_MESSAGE = "No channel to the client can carry a server-to-client request here"


class SendOnly:
    """Base of an ``Outbound`` that only sends (notifications, and requests if ``notify``/``request`` say how):
    client answers and cancellations of other requests have nobody to reach through it, nothing can be closed."""

    async def deliver(self, request_id: str | int, answer: dict[str, Any]) -> None:
        return None

    async def cancel(self, request_id: str | int) -> None:
        return None

    async def close_stream(self) -> bool:
        return False


class NoChannel(SendOnly):
    """The ``Outbound`` of requests that have no back-channel: notifications are dropped, requests answer with
    an internal-error object."""

    can_request = False

    async def notify(self, message: dict[str, Any]) -> None:
        return None

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"error": InternalError(NO_CHANNEL_MESSAGE).to_wire()}

    def __repr__(self) -> str:
        return "NO_CHANNEL"


NO_CHANNEL: Outbound = NoChannel()


class Session(Protocol):
    """A handshake-era session as the handlers see it: its negotiated state and the verbs that change it."""

    key: str
    protocol_version: str
    log_level: str | None
    subscriptions: frozenset[str]

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        """What the client declared in its ``initialize``."""

    async def set_log_level(self, level: str) -> None: ...

    async def subscribe(self, uri: str) -> None: ...

    async def unsubscribe(self, uri: str) -> None: ...


class Tasks(Protocol):
    """The caller's durable tasks (2026-07-28 tasks extension); every verb is scoped to the calling agent."""

    @property
    def available(self) -> bool:
        """``False``: no tasks are served here (``NO_TASKS``): the extension is not advertised, calls never
        become tasks, and every task id is unknown."""

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The task as ``tasks/get`` shows it, or ``None`` if the caller has no such task."""

    async def update(self, task_id: str, responses: Mapping[str, Any]) -> bool:
        """Record answers to outstanding input requests (resuming the task once all are in)."""

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that is not terminal yet (a terminal one is left as it is)."""


class CallAudit(Protocol):
    """Records each ``tools/call`` with its outcome; implementations must not block (the runtime buffers)."""

    def record_call(
        self,
        params: Mapping[str, Any],
        request_id: str | int,
        started: float,
        *,
        result: Mapping[str, Any] | None = None,
        error_code: int | None = None,
        error_message: str = "",
        cancelled: bool = False,
    ) -> None: ...


class NoTasks:
    """The ``Tasks`` port of requests that serve no durable tasks: every task id is unknown."""

    available = False

    async def get(self, task_id: str) -> dict[str, Any] | None:
        return None

    async def update(self, task_id: str, responses: Mapping[str, Any]) -> bool:
        return False

    async def cancel(self, task_id: str) -> bool:
        return False

    def __repr__(self) -> str:
        return "NO_TASKS"


NO_TASKS: Tasks = NoTasks()


class NoAudit:
    """The ``CallAudit`` port of requests that are not audited (auditing off, the admin's console, tests)."""

    def record_call(
        self,
        params: Mapping[str, Any],
        request_id: str | int,
        started: float,
        *,
        result: Mapping[str, Any] | None = None,
        error_code: int | None = None,
        error_message: str = "",
        cancelled: bool = False,
    ) -> None:
        return None

    def __repr__(self) -> str:
        return "NO_AUDIT"


NO_AUDIT: CallAudit = NoAudit()
