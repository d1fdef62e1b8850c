"""Two daphne/Twisted levers that cut daphne's own cost per request (``MCP_APP["DAPHNE_TUNING"]``, off by default).

daphne (4.2) and Twisted (26) do two things per HTTP request that serve nothing here:

1. **Finished requests linger.** daphne keeps every request (``WebRequest``) in ``Server.connections`` until
   its ``application_checker`` sweep, which runs once a second and walks the whole table. At 2,000 req/s that
   is 2,000 finished requests (each with its headers, body buffer and application future) alive at once, one
   long sweep a second (a latency spike for whatever request is in flight then) and more work for the cyclic
   garbage collector. ``install()`` reaps an entry the moment both its application future is done and the
   request is finished (a done-callback on the future, a check in ``protocol_disconnected``), with exactly
   the sweep's handling of the outcome (an exception is logged and, if the request is still open, answered
   with daphne's 500). The sweep still runs, for its other duty: cancelling applications that outlive
   ``application_close_timeout``.
2. **Every POST's Content-Type is parsed as a form.** ``twisted.web.http.Request.requestReceived`` runs
   ``_parseContentType`` (an ``email.message.EmailMessage`` per request) on every POST with a body, to fill
   ``request.args`` for form posts. daphne never reads ``request.args`` (it hands the raw body to the ASGI
   application, and Django parses forms itself), so ``install()`` sets Twisted's own switch,
   ``parsePOSTFormSubmission``, off for daphne's requests.

Both touch private internals, so ``install()`` applies them only on the versions they were written against
(``SUPPORTED_DAPHNE``, ``SUPPORTED_TWISTED``) and when the internals they rely on are present
(``internals_missing``); otherwise it logs once why and leaves daphne as it is. It does nothing outside a
daphne process (``daphne.server`` not imported: uvicorn, tests, management commands).
``tests/transport/test_daphne_tuning.py`` fails when those internals change. ``mcp_host.asgi`` calls
``install()`` when the setting is on. ``docs/performance.md`` has what they are worth.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("mcp_app.transport.daphne_tuning")

SUPPORTED_DAPHNE = ((4, 2), (4, 3))  # [from, to): written against daphne 4.2.3
SUPPORTED_TWISTED = ((24, 7), (27, 0))  # written against Twisted 26.10.0; parsePOSTFormSubmission is 24.7+
SERVER_METHODS = ("create_application", "protocol_disconnected", "application_checker", "stop")
REQUEST_METHODS = ("requestReceived",)


def _version(text: str) -> tuple[int, int]:
    major, minor, *_ = (int(part) if part.isdigit() else 0 for part in [*text.split("."), "0"])
    return major, minor


def _span(span: tuple[tuple[int, int], tuple[int, int]]) -> str:
    (low_major, low_minor), (high_major, high_minor) = span
    return f"{low_major}.{low_minor}-{high_major}.{high_minor}"


def versions_supported() -> bool:
    import daphne
    import twisted

    twisted_version = _version(twisted.__version__)
    daphne_version = _version(daphne.__version__)
    return (
        SUPPORTED_TWISTED[0] <= twisted_version < SUPPORTED_TWISTED[1]
        and SUPPORTED_DAPHNE[0] <= daphne_version < SUPPORTED_DAPHNE[1]
    )


def internals_missing() -> list[str]:
    """The daphne/Twisted internals the levers need that this installation lacks (empty when all present)."""
    from daphne.http_protocol import WebRequest
    from daphne.server import Server
    from twisted.web import http

    missing = [f"Server.{name}" for name in SERVER_METHODS if not callable(getattr(Server, name, None))]
    missing += [f"Request.{name}" for name in REQUEST_METHODS if not callable(getattr(http.Request, name, None))]
    if not missing:
        # Server.create_application keeps the future under "application_instance", the checker reads it there.
        for name in ("create_application", "application_checker"):
            if "application_instance" not in getattr(Server, name).__code__.co_consts:
                missing.append(f'Server.{name} no longer keeps "application_instance"')
        if "disconnected" not in Server.protocol_disconnected.__code__.co_consts:
            missing.append('Server.protocol_disconnected no longer records "disconnected"')
        if "_parsePOSTFormSubmission" not in http.Request.requestReceived.__code__.co_names:
            missing.append("Request.requestReceived no longer reads _parsePOSTFormSubmission")
    if "parsePOSTFormSubmission" not in inspect.signature(http.Request.__init__).parameters:
        missing.append("Request.__init__ has no parsePOSTFormSubmission")
    if not issubclass(WebRequest, http.Request):
        missing.append("daphne's WebRequest is not a twisted Request")
    return missing


def reap(server: Any, protocol: Any) -> None:
    """What ``Server.application_checker`` does for one connection, done now: forget a finished application
    (logging its exception, answering 500 if the request is still open) and drop a finished request."""
    details = server.connections.get(protocol)
    if details is None:
        return
    instance = details.get("application_instance")
    disconnected = details.get("disconnected")
    if instance is not None and instance.done():
        try:
            exception = instance.exception()
        except asyncio.CancelledError:
            pass
        else:
            if exception is not None:
                if isinstance(exception, KeyboardInterrupt):
                    server.stop()  # as daphne: the application asks the server to exit
                else:
                    logging.getLogger("daphne.server").error(
                        "Exception inside application: %s", exception, exc_info=exception
                    )
                    if not disconnected:
                        protocol.handle_exception(exception)
        del details["application_instance"]
        instance = None
    if instance is None and disconnected:
        del server.connections[protocol]


def patch(server_class: type, request_class: type) -> None:
    """Apply both levers to ``server_class`` (daphne's ``Server``) and ``request_class`` (its ``WebRequest``);
    ``install`` does it for daphne's own classes, the tests for subclasses."""
    create_application: Callable[..., Any] = server_class.create_application  # type: ignore[attr-defined]
    protocol_disconnected: Callable[..., Any] = server_class.protocol_disconnected  # type: ignore[attr-defined]
    request_init: Callable[..., Any] = request_class.__init__  # type: ignore[misc]

    def tuned_create_application(self: Any, protocol: Any, scope: Any) -> Any:
        queue = create_application(self, protocol, scope)
        details = self.connections.get(protocol)
        instance = details.get("application_instance") if details else None
        if instance is not None:
            instance.add_done_callback(lambda _future: reap(self, protocol))
        return queue

    def tuned_protocol_disconnected(self: Any, protocol: Any) -> None:
        protocol_disconnected(self, protocol)
        details = self.connections.get(protocol)
        if details is not None:
            instance = details.get("application_instance")
            if instance is None or instance.done():
                reap(self, protocol)

    def tuned_request_init(self: Any, *args: Any, **kwargs: Any) -> None:
        request_init(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False

    server_class.create_application = tuned_create_application  # type: ignore[attr-defined]
    server_class.protocol_disconnected = tuned_protocol_disconnected  # type: ignore[attr-defined]
    request_class.__init__ = tuned_request_init  # type: ignore[misc]
    server_class._mcp_tuned = True  # type: ignore[attr-defined]
    request_class._mcp_tuned = True  # type: ignore[attr-defined]


_outcome: bool | None = None


def install() -> bool:
    """Apply both levers to daphne, once; whether they are in place. Logs once when they cannot be."""
    global _outcome
    if _outcome is not None:
        return _outcome
    if "daphne.server" not in sys.modules:
        return False  # not a daphne process (uvicorn, a management command): nothing to tune, nothing to log
    if not versions_supported():
        import daphne
        import twisted

        logger.warning(
            "daphne tuning not applied: written for daphne %s and Twisted %s, found daphne %s and Twisted %s",
            _span(SUPPORTED_DAPHNE),
            _span(SUPPORTED_TWISTED),
            daphne.__version__,
            twisted.__version__,
        )
        _outcome = False
        return False
    missing = internals_missing()
    if missing:
        logger.warning("daphne tuning not applied: daphne/Twisted internals changed: %s", "; ".join(missing))
        _outcome = False
        return False
    from daphne.http_protocol import WebRequest
    from daphne.server import Server

    patch(Server, WebRequest)
    logger.info("daphne tuning applied: finished requests reaped at once, POST bodies not parsed as forms")
    _outcome = True
    return True
