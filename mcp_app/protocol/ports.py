"""The ports the protocol core talks through to reach the client outside one request/response exchange.

``Outbound`` is the back-channel of one HTTP request: notifications on its response stream, server-to-client
requests (``sampling/createMessage``, ``elicitation/create``, ``roots/list``) and their answers, cancellation of
a running request, and closing the response stream early (SEP-1699). The transport implements it
(``transport.backchannel``) for handshake-era POSTs; everything else (the stateless revision, the admin's console,
tests, resumed tasks) gets ``NO_CHANNEL``, which can carry nothing. Handlers and runners ask ``can_request``
instead of testing for ``None``.

Not here: how the bytes are framed (``transport.writer``), which process holds the waiting call (the channel
layer), or when a request is allowed (the handlers decide by capability and era).
"""

from __future__ import annotations

from typing import Any, Protocol

from .errors import InternalError


class Outbound(Protocol):
    """What a request can send to its client besides its answer, and the client's messages back to it."""

    @property
    def can_request(self) -> bool:
        """``False``: no channel can carry a server-to-client request (``request`` answers with an error)."""
        ...

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a JSON-RPC notification to the client on this request's stream (dropped if there is none)."""
        ...

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a server-to-client request and return the client's response object (``{"result": …}`` or
        ``{"error": …}``); a client that does not answer in time gets a -32001-style error object."""
        ...

    async def deliver(self, request_id: str | int, answer: dict[str, Any]) -> None:
        """Hand a client's answer to whichever call (in whichever process) waits for ``request_id``."""
        ...

    async def cancel(self, request_id: str | int) -> None:
        """``notifications/cancelled``: stop the client's running request ``request_id``, wherever it runs."""
        ...

    async def close_stream(self) -> bool:
        """End this request's response stream now while the call goes on (SEP-1699); ``False`` when the stream
        cannot be resumed (no session, the stateless revision)."""
        ...


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
    an internal-error object, client answers and cancellations have nobody to reach, nothing can be closed."""

    can_request = False

    async def notify(self, message: dict[str, Any]) -> None:
        return None

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"error": InternalError(NO_CHANNEL_MESSAGE).to_wire()}

    def __repr__(self) -> str:
        return "NO_CHANNEL"


NO_CHANNEL: Outbound = NoChannel()
