"""The daphne/Twisted internals ``twisted_compat`` builds on, and what its changes do to daphne's own code.

These fail when an upgrade of daphne or Twisted changes what the changes rely on: the version guard, the private
names (of the edge limits' channel and of the tuning levers), and the behaviour of daphne's ``Server`` and
``WebRequest`` with the levers applied (to subclasses, so that nothing else in this process is tuned). The wire
tests through a real daphne are ``tests/e2e/test_edge_limits_wire.py`` and ``test_daphne_tuning_wire.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import daphne
import pytest
import twisted

from mcp_app.transport import edge_limits, twisted_compat

pytest.importorskip("daphne.server")

from daphne.http_protocol import WebRequest
from daphne.server import Server
from twisted.web import http as twisted_http


class TunedServer(Server):  # type: ignore[misc]
    pass


class TunedRequest(WebRequest):  # type: ignore[misc]
    def process(self) -> None:  # daphne's own would start an application; these tests stop at requestReceived
        pass


class PlainRequest(twisted_http.Request):  # type: ignore[misc]
    # Twisted's own: daphne's WebRequest loses the form parsing wherever the edge limits were installed in-process.
    def process(self) -> None:
        pass


twisted_compat.tune(TunedServer, TunedRequest)


class FakeProtocol:
    """What daphne's Server calls on a request: ``handle_exception`` (daphne's 500)."""

    def __init__(self) -> None:
        self.exceptions: list[BaseException] = []

    def handle_exception(self, exception: BaseException) -> None:
        self.exceptions.append(exception)


def make_server(cls: type, application: Any) -> Any:
    server = cls(application, endpoints=["tcp:port=0:interface=127.0.0.1"])  # never listened on
    server.connections = {}  # daphne sets it in run()
    return server


def test_the_installed_twisted_and_daphne_are_the_versions_the_changes_were_verified_on() -> None:
    assert twisted_compat.versions_supported(), (twisted.__version__, daphne.__version__)


def test_every_internal_the_changes_use_still_exists() -> None:
    assert twisted_compat.internals_missing() == []


def test_a_private_name_that_is_gone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edge_limits, "CHANNEL_INTERNALS", (*edge_limits.CHANNEL_INTERNALS, "_gone"))
    monkeypatch.setattr(edge_limits, "TRANSPORT_BUFFERS", (*edge_limits.TRANSPORT_BUFFERS, "_gone_too"))
    assert twisted_compat.internals_missing() == ["HTTPChannel()._gone", "FileDescriptor()._gone_too"]


def test_install_does_nothing_outside_a_daphne_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "daphne.server")
    monkeypatch.setattr(twisted_compat, "_outcome", None)
    assert twisted_compat.install(edge_limits=True, daphne_tuning=True) is False
    assert not getattr(Server, "_mcp_tuned", False) and not getattr(WebRequest, "_mcp_tuned", False)


def test_an_unsupported_version_is_refused_once_with_a_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(daphne, "__version__", "5.0.0")
    monkeypatch.setattr(twisted_compat, "_outcome", None)
    with caplog.at_level("WARNING", logger="mcp_app.transport.twisted_compat"):
        assert twisted_compat.install(edge_limits=True, daphne_tuning=True) is False
        assert twisted_compat.install(edge_limits=True, daphne_tuning=True) is False
    assert [record.getMessage() for record in caplog.records].count(
        "daphne left as it is: verified on daphne ((4, 2), (4, 3)) and Twisted ((24, 7), (27, 0)), found daphne 5.0.0 "
        "and "
        f"Twisted {twisted.__version__}"
    ) == 1
    assert not getattr(Server, "_mcp_tuned", False)


def test_the_edge_channel_is_what_daphne_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    from daphne.http_protocol import HTTPFactory

    monkeypatch.setattr(HTTPFactory, "protocol", HTTPFactory.protocol)  # restored after the test
    twisted_compat.limit_edges()
    protocol = HTTPFactory.protocol(HTTPFactory(server=None))
    assert type(protocol._channel).__name__ == "LimitedHTTPChannel"


def test_reason_phrases_twisted_lacks_are_added_and_its_own_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from twisted.web import http

    monkeypatch.setattr(http, "RESPONSES", {**http.RESPONSES, 200: b"Fine"})
    monkeypatch.delitem(http.RESPONSES, 429, raising=False)
    assert twisted_compat.add_reason_phrases() > 0
    assert http.RESPONSES[429] == b"Too Many Requests" and http.RESPONSES[200] == b"Fine"
    assert twisted_compat.add_reason_phrases() == 0


def test_refusals_are_complete_http_answers_with_a_json_rpc_body() -> None:
    raw = edge_limits.error_response(431, "too big")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"connection: close" in head and f"content-length: {len(body)}".encode() in head
    assert body == b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"too big"}}'


async def finished_request(cls: type) -> tuple[Any, FakeProtocol]:
    """A request whose application answered (it returns) and whose response finished (disconnected)."""

    async def application(scope: Any, receive: Any, send: Any) -> None:
        return None

    server, protocol = make_server(cls, application), FakeProtocol()
    server.protocol_connected(protocol)
    server.create_application(protocol, {"type": "http"})
    await asyncio.wait_for(asyncio.shield(server.connections[protocol]["application_instance"]), 5)
    await asyncio.sleep(0)  # one turn of the loop: the future's done-callbacks run
    server.protocol_disconnected(protocol)
    return server, protocol


async def test_plain_daphne_keeps_a_finished_request_until_its_sweep() -> None:
    server, protocol = await finished_request(Server)
    assert protocol in server.connections  # what the lever removes: it waits for application_checker


async def test_a_finished_request_is_dropped_at_once_when_the_application_ends_first() -> None:
    server, protocol = await finished_request(TunedServer)
    assert protocol not in server.connections


async def test_a_finished_request_is_dropped_at_once_when_the_response_ends_first() -> None:
    gate = asyncio.Event()

    async def application(scope: Any, receive: Any, send: Any) -> None:
        await gate.wait()

    server, protocol = make_server(TunedServer, application), FakeProtocol()
    server.protocol_connected(protocol)
    server.create_application(protocol, {"type": "http"})
    server.protocol_disconnected(protocol)
    assert protocol in server.connections  # the application still runs: kept
    instance = server.connections[protocol]["application_instance"]
    gate.set()
    await asyncio.wait_for(asyncio.shield(instance), 5)
    await asyncio.sleep(0)
    assert protocol not in server.connections


async def test_an_application_that_fails_on_an_open_request_gets_daphnes_500_at_once() -> None:
    failure = RuntimeError("boom")

    async def application(scope: Any, receive: Any, send: Any) -> None:
        raise failure

    server, protocol = make_server(TunedServer, application), FakeProtocol()
    server.protocol_connected(protocol)
    server.create_application(protocol, {"type": "http"})
    instance = server.connections[protocol]["application_instance"]
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(asyncio.shield(instance), 5)
    await asyncio.sleep(0)
    assert protocol.exceptions == [failure]
    assert server.connections[protocol] == {"connected": server.connections[protocol]["connected"]}
    server.protocol_disconnected(protocol)
    assert protocol not in server.connections


class FakeChannel:
    """The parts of an HTTPChannel a Request reads when it is built."""

    def __init__(self, server: Any) -> None:
        self.factory = type("Factory", (), {"server": server})()
        self.transport = None

    def getPeer(self) -> None:
        return None

    def getHost(self) -> None:
        return None


def received_form_post(cls: type) -> Any:
    import io

    request = cls(FakeChannel(make_server(Server, None)))
    request.requestHeaders.setRawHeaders(b"content-type", [b"application/x-www-form-urlencoded"])
    request.content = io.BytesIO(b"a=1")
    request.content.seek(0, 2)
    request.requestReceived(b"POST", b"/mcp/x?b=2", b"HTTP/1.1")
    return request


def test_plain_twisted_parses_a_posted_form() -> None:
    assert received_form_post(PlainRequest).args == {b"a": [b"1"], b"b": [b"2"]}


def test_tuned_requests_do_not_parse_the_body_as_a_form_and_keep_it_whole() -> None:
    request = received_form_post(TunedRequest)
    assert request.args == {b"b": [b"2"]}  # the query string only, as Twisted does for any non-form body
    assert request.content.read() == b"a=1"


def test_form_parsing_alone_is_turned_off_once_and_keeps_the_body() -> None:
    class FormlessRequest(PlainRequest):
        pass

    twisted_compat.no_form_parsing(FormlessRequest)
    twisted_compat.no_form_parsing(FormlessRequest)  # the edge limits and daphne tuning may both ask
    request = received_form_post(FormlessRequest)
    assert request.args == {b"b": [b"2"]} and request.content.read() == b"a=1"


def test_twisted_errors_reach_python_logging_once_and_its_info_does_not(caplog: pytest.LogCaptureFixture) -> None:
    from twisted.logger import Logger

    assert twisted_compat.forward_errors() is twisted_compat.forward_errors()  # one observer per process
    twisted_log = Logger(namespace="tests.twisted")
    try:
        raise RuntimeError("a callback of a connection failed")
    except RuntimeError:
        with caplog.at_level("INFO", logger="mcp_app.transport.twisted_compat"):
            twisted_log.failure("Unhandled error in {what}", what="dataReceived")
            twisted_log.info("a connection was made")

    [record] = [r for r in caplog.records if r.name == "mcp_app.transport.twisted_compat"]
    assert record.levelname == "ERROR"
    assert record.getMessage() == "Twisted: Unhandled error in dataReceived"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


@pytest.mark.parametrize(("verbosity", "lines"), [(0, 0), (1, 0), (2, 1), (3, 1)])
def test_twisteds_access_line_is_skipped_only_where_daphne_discards_it(verbosity: int, lines: int) -> None:
    from daphne.http_protocol import HTTPFactory

    class QuietFactory(HTTPFactory):  # type: ignore[misc]
        pass

    twisted_compat.no_discarded_log_lines(QuietFactory)
    twisted_compat.no_discarded_log_lines(QuietFactory)  # once, however often asked
    server = make_server(Server, None)
    server.verbosity = verbosity
    factory = QuietFactory(server)
    written: list[str] = []
    factory._logFile = type("LogFile", (), {"write": lambda self, line: written.append(line)})()
    factory._logDateTime = "05/Dec/2026:13:00:00 +0000"
    request = received_form_post(PlainRequest)
    request.code = 200
    factory.log(request)
    assert len(written) == lines
    assert all('"POST /mcp/x?b=2 HTTP/1.1" 200' in line for line in written)
