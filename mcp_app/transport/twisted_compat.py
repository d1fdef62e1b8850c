"""Every change mcp-host makes to daphne's and Twisted's own code, in one place, behind one version guard.

``install()`` (``mcp_host.asgi``, once, in a daphne process) applies the reason phrases Twisted lacks, the edge
limits (``MCP_APP["EDGE_LIMITS"]``, with Twisted's form parsing of POST bodies off and its access line skipped
where daphne discards it) and daphne tuning (``MCP_APP["DAPHNE_TUNING"]``) only on the versions they
were verified on (``VERIFIED_TWISTED``, ``VERIFIED_DAPHNE``) with every private name they rely on present
(``internals_missing``); else it logs once why and leaves daphne as it is. On any version it forwards Twisted's
errors to Python logging (``forward_errors``). Each write and its measured gain: docs/architecture.md ("Writes to
third-party names"); ``tests/transport/test_twisted_compat.py`` fails when an upgrade changes those names.
"""

from __future__ import annotations

import http
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any, cast

logger = logging.getLogger("mcp_app.transport.twisted_compat")

VERIFIED_DAPHNE = ((4, 2), (4, 3))  # [from, to): verified on daphne 4.2.3
VERIFIED_TWISTED = ((24, 7), (27, 0))  # verified on Twisted 26.10.0; parsePOSTFormSubmission is 24.7+
SERVER_METHODS = ("create_application", "protocol_disconnected", "application_checker", "stop")


def _version(text: str) -> tuple[int, int]:
    major, minor, *_ = (int(part) if part.isdigit() else 0 for part in [*text.split("."), "0"])
    return major, minor


def versions_supported() -> bool:
    import daphne
    import twisted

    return (
        VERIFIED_TWISTED[0] <= _version(twisted.__version__) < VERIFIED_TWISTED[1]
        and VERIFIED_DAPHNE[0] <= _version(daphne.__version__) < VERIFIED_DAPHNE[1]
    )


def internals_missing() -> list[str]:
    """The daphne/Twisted internals ``install`` needs that this installation lacks (empty when all present)."""
    from daphne.http_protocol import HTTPFactory, WebRequest
    from daphne.server import Server
    from twisted.internet import abstract
    from twisted.web import http as twisted_http

    from .edge_limits import CHANNEL_INTERNALS, CHANNEL_METHODS, TRANSPORT_BUFFERS

    missing = [f"HTTPChannel.{name}" for name in CHANNEL_METHODS if not hasattr(twisted_http.HTTPChannel, name)]
    channel = twisted_http.HTTPChannel()  # type: ignore[no-untyped-call]
    missing += [f"HTTPChannel().{name}" for name in CHANNEL_INTERNALS if not hasattr(channel, name)]
    descriptor = abstract.FileDescriptor()
    missing += [f"FileDescriptor().{name}" for name in TRANSPORT_BUFFERS if not hasattr(descriptor, name)]
    names = ("_GenericHTTPChannelProtocol", "HTTPFactory", "RESPONSES")
    missing += [f"twisted.web.http.{name}" for name in names if not hasattr(twisted_http, name)]
    if not issubclass(HTTPFactory, twisted_http.HTTPFactory):
        missing.append("daphne's HTTPFactory is not a twisted HTTPFactory")
    missing += [f"Server.{name}" for name in SERVER_METHODS if not callable(getattr(Server, name, None))]
    if not missing:
        # Server.create_application keeps the future under "application_instance", the checker reads it there.
        for name in ("create_application", "application_checker"):
            if "application_instance" not in getattr(Server, name).__code__.co_consts:
                missing.append(f'Server.{name} no longer keeps "application_instance"')
        if "disconnected" not in Server.protocol_disconnected.__code__.co_consts:
            missing.append('Server.protocol_disconnected no longer records "disconnected"')
    if "parsePOSTFormSubmission" not in inspect.signature(twisted_http.Request.__init__).parameters:
        missing.append("Request.__init__ has no parsePOSTFormSubmission")
    if "verbosity" not in Server.__init__.__code__.co_names:
        missing.append("Server no longer keeps its verbosity")
    if not issubclass(WebRequest, twisted_http.Request):
        missing.append("daphne's WebRequest is not a twisted Request")
    return missing


def add_reason_phrases() -> int:
    """Fill the phrases Twisted lacks; how many were added."""
    from twisted.web import http as twisted_http

    missing = [status for status in http.HTTPStatus if status.value not in twisted_http.RESPONSES]
    twisted_http.RESPONSES.update({status.value: status.phrase.encode("ascii") for status in missing})
    return len(missing)


def limit_edges() -> None:
    """Make daphne's ``HTTPFactory`` build ``edge_limits.LimitedHTTPChannel`` connections."""
    from daphne.http_protocol import HTTPFactory
    from twisted.web import http as twisted_http

    from .edge_limits import channel_class

    limited = channel_class()

    def protocol(factory: Any) -> Any:
        return twisted_http._GenericHTTPChannelProtocol(limited())

    HTTPFactory.protocol = protocol


def reap(server: Any, protocol: Any) -> None:
    """What ``Server.application_checker`` does for one connection, done now: forget a finished application
    (logging its exception, answering 500 if the request is still open) and drop a finished request."""
    details = server.connections.get(protocol)
    if details is None:
        return
    instance = details.get("application_instance")
    disconnected = details.get("disconnected")
    if instance is not None and instance.done():
        exception = None if instance.cancelled() else instance.exception()
        if isinstance(exception, KeyboardInterrupt):
            server.stop()  # as daphne: the application asks the server to exit
        elif exception is not None:
            logging.getLogger("daphne.server").error("Exception inside application: %s", exception, exc_info=exception)
            if not disconnected:
                protocol.handle_exception(exception)
        del details["application_instance"]
        instance = None
    if instance is None and disconnected:
        del server.connections[protocol]


def no_form_parsing(request_class: type) -> None:
    """Turn Twisted's public ``parsePOSTFormSubmission`` off for ``request_class`` (daphne's ``WebRequest``): no
    POST has its ``Content-Type`` parsed by the ``email`` package, about a tenth of a warm call's CPU
    (docs/performance.md). daphne never reads ``request.args``; Django parses forms from the ASGI body itself."""
    if request_class.__dict__.get("_mcp_formless"):
        return
    request_init: Callable[..., Any] = request_class.__init__  # type: ignore[misc]

    def formless_init(self: Any, *args: Any, **kwargs: Any) -> None:
        request_init(self, *args, **{**kwargs, "parsePOSTFormSubmission": False})

    request_class.__init__ = formless_init  # type: ignore[misc]
    request_class._mcp_formless = True  # type: ignore[attr-defined]


def no_discarded_log_lines(factory_class: type) -> None:
    """Make ``factory_class`` (daphne's ``HTTPFactory``) skip Twisted's access line when daphne sends Twisted's log
    nowhere (verbosity 0 or 1, its default): Twisted's ``HTTPFactory.log`` formats a combined-log line for every
    request and writes it to Twisted's log, where only ``forward_errors`` listens, and it keeps failures only.
    About 3 % of a warm call's CPU (docs/performance.md). At verbosity 2 and more the line is written as before."""
    if factory_class.__dict__.get("_mcp_quiet"):
        return
    log: Callable[..., Any] = factory_class.log  # type: ignore[attr-defined]

    def log_if_heard(self: Any, request: Any) -> None:
        if getattr(self.server, "verbosity", 2) > 1:
            log(self, request)

    factory_class.log = log_if_heard  # type: ignore[attr-defined]
    factory_class._mcp_quiet = True  # type: ignore[attr-defined]


def tune(server_class: type, request_class: type) -> None:
    """Apply both levers of daphne tuning to ``server_class`` (daphne's ``Server``) and ``request_class`` (its
    ``WebRequest``); ``install`` does it for daphne's own classes, the tests for subclasses."""
    create_application: Callable[..., Any] = server_class.create_application  # type: ignore[attr-defined]
    protocol_disconnected: Callable[..., Any] = server_class.protocol_disconnected  # type: ignore[attr-defined]

    def tuned_create_application(self: Any, protocol: Any, scope: Any) -> Any:
        queue = create_application(self, protocol, scope)
        details = self.connections.get(protocol)
        instance = details.get("application_instance") if details else None
        if instance is not None:
            instance.add_done_callback(lambda _future: reap(self, protocol))
        return queue

    def tuned_protocol_disconnected(self: Any, protocol: Any) -> None:
        protocol_disconnected(self, protocol)
        reap(self, protocol)  # nothing to do while the application still runs

    server_class.create_application = tuned_create_application  # type: ignore[attr-defined]
    server_class.protocol_disconnected = tuned_protocol_disconnected  # type: ignore[attr-defined]
    no_form_parsing(request_class)
    server_class._mcp_tuned = True  # type: ignore[attr-defined]
    request_class._mcp_tuned = True  # type: ignore[attr-defined]


_outcome: bool | None = None  # install's, once per process
_forwarding: Callable[[Any], None] | None = None  # forward_errors' observer, once per process


def forward_errors() -> Callable[[Any], None]:
    """Send Twisted's errors to this module's logger at ERROR, once per process; return the observer.

    daphne at its default verbosity (1) sends Twisted's own log nowhere, so an exception in a connection's
    callbacks (which makes Twisted drop that connection without an answer) left no trace. Only events that carry
    a failure or are critical pass; at verbosity 2 daphne logs them too, under ``daphne.server``."""
    global _forwarding
    if _forwarding is not None:
        return _forwarding
    from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher

    def observe(event: dict[str, Any]) -> None:
        failure = event.get("log_failure")
        if failure is None and event.get("log_level") is not LogLevel.critical:
            return
        details = None if failure is None else (failure.type, failure.value, failure.getTracebackObject())
        logger.error("Twisted: %s", formatEvent(event), exc_info=details)

    globalLogPublisher.addObserver(cast(ILogObserver, observe))  # any callable of one event is an observer
    _forwarding = observe
    return observe


def install(*, edge_limits: bool, daphne_tuning: bool) -> bool:
    """Apply the reason phrases, and the edge limits and daphne tuning if asked, once; whether they are in place.
    Logs once when they cannot be."""
    global _outcome
    if _outcome is not None:
        return _outcome
    if "daphne.server" not in sys.modules:
        return False  # not a daphne process (uvicorn, a management command): nothing to change, nothing to log
    import daphne
    import twisted

    forward_errors()
    _outcome = False
    if not versions_supported():
        logger.warning(
            "daphne left as it is: verified on daphne %s and Twisted %s, found daphne %s and Twisted %s",
            VERIFIED_DAPHNE,
            VERIFIED_TWISTED,
            daphne.__version__,
            twisted.__version__,
        )
    elif missing := internals_missing():
        logger.warning("daphne left as it is: daphne/Twisted internals changed: %s", "; ".join(missing))
    else:
        add_reason_phrases()
        if edge_limits:
            from daphne.http_protocol import HTTPFactory, WebRequest

            limit_edges()
            no_form_parsing(WebRequest)
            no_discarded_log_lines(HTTPFactory)
        if daphne_tuning:
            from daphne.http_protocol import WebRequest
            from daphne.server import Server

            tune(Server, WebRequest)
            logger.info("daphne tuning applied: finished requests reaped at once, POST bodies not parsed as forms")
        _outcome = True
    return _outcome
