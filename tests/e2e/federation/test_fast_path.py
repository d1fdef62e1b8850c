"""The fast path of a warm ``tools/call`` to a 2026-07-28 upstream (``mcp_app.federation.fastcall``), at the wire.

The calls go through the real consumer in this process (``tests.helpers``) to a ``ScriptedUpstream`` on loopback
(``tests/scripted_upstream.py``), whose every reply the test writes and which records every request and
connection. Where a behaviour must equal the SDK's, the same call is also made with the fast path switched off
(``fastcall.applies`` answering no: the SDK's path, as for an upstream the fast path does not apply to) and both
are compared. The real SDK upstreams of ``test_sdk_upstreams.py``, ``test_failures.py`` and the rest go through
the fast path too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from mcp_app import outbound
from mcp_app.federation import fastcall, wire
from tests.conftest import Access
from tests.e2e.federation.conftest import failure
from tests.helpers import call, communicator, modern_call, result_of, rpc, wait_until
from tests.scripted_upstream import (
    CLOSE,
    HANG,
    ScriptedUpstream,
    json_reply,
    result,
    sse_reply,
    text_result,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_pool")]

SECRET = {"Authorization": "Bearer upstream-secret-for-the-fast-path"}
ELICITATION = {"elicitation": {"form": {}}}


@pytest.fixture
def scripted() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as upstream:
        yield upstream


@pytest.fixture
def federated(
    scripted: ScriptedUpstream, access_factory: Callable[..., Access], federate: Callable[..., Any]
) -> tuple[Access, Any]:
    access = access_factory(tools=())
    return access, federate(access, scripted.url, secret=SECRET)


@pytest.fixture
def sdk_path(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Switch the fast path off for the rest of the test: every call goes through the SDK's session."""
    return lambda: monkeypatch.setattr(fastcall, "applies", lambda connection: False)


def up(name: str, **arguments: Any) -> dict[str, Any]:
    return rpc("tools/call", {"name": f"up_{name}", "arguments": arguments})


async def up_call(access: Access, name: str, **arguments: Any) -> dict[str, Any]:
    return result_of(await call(access, up(name, **arguments), timeout=10))


async def test_a_warm_call_sends_what_the_sdk_sends_on_one_kept_alive_connection(
    federated: tuple[Access, Any], scripted: ScriptedUpstream, sdk_path: Callable[[], None]
) -> None:
    access, _ = federated
    fast = [await up_call(access, "echo", text=f"fast {n}") for n in range(3)]
    sdk_path()
    by_sdk = await up_call(access, "echo", text="fast 0")

    *fast_calls, sdk_call = scripted.calls()
    assert [r["content"][0]["text"] for r in fast] == ["fast 0", "fast 1", "fast 2"]
    assert {k: v for k, v in by_sdk.items() if k != "_meta"} == {k: v for k, v in fast[0].items() if k != "_meta"}
    assert len({seen.connection for seen in fast_calls}) == 1  # one kept-alive connection served them all
    assert fast_calls[0].connection != sdk_call.connection  # not the SDK's HTTP client's
    # Every header the SDK's client sends, but for the HTTP library's own (compression, framing), and no other.
    own = {"accept-encoding", "connection", "content-length"}
    expected = {name: value for name, value in sdk_call.headers.items() if name not in own}
    assert {name: value for name, value in fast_calls[0].headers.items() if name not in own} == expected
    assert expected["authorization"] == SECRET["Authorization"]
    assert expected["mcp-protocol-version"] == "2026-07-28"
    assert (expected["mcp-method"], expected["mcp-name"]) == ("tools/call", "echo")
    # The same JSON-RPC request, but for its id (the progress token is the id, as the SDK makes it).
    for seen in (fast_calls[0], sdk_call):
        assert seen.message["params"]["_meta"]["progressToken"] == seen.message["id"]
        seen.message["params"]["_meta"].pop("progressToken")
        seen.message.pop("id")
    assert fast_calls[0].message == sdk_call.message


async def test_json_answers_chunked_or_not_and_an_is_error_result_pass_through(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, _ = federated
    failed = {"content": [{"type": "text", "text": "the tool failed"}], "isError": True}
    scripted.answers["answer"] = lambda message: json_reply(result(message, failed), chunked=True)
    scripted.answers["echo"] = lambda message: json_reply(text_result(message, "chunked"), chunked=True)

    is_error = await up_call(access, "answer")
    chunked = await up_call(access, "echo", text="x")
    again = await up_call(access, "echo", text="x")

    assert (is_error["isError"], is_error["content"]) == (True, failed["content"])
    assert chunked["content"][0]["text"] == again["content"][0]["text"] == "chunked"
    assert is_error["_meta"]["dev.mcp-host/upstream"]["upstream"] == "upstream"
    assert len({seen.connection for seen in scripted.calls()}) == 1  # chunked bodies read whole: the link kept


async def test_an_sse_answer_relays_progress_and_logs_in_order(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, _ = federated

    def answer(message: dict[str, Any]) -> bytes:
        token = message["params"]["_meta"]["progressToken"]
        progress = {"progressToken": token, "progress": 1, "total": 2, "message": "half"}
        return sse_reply(
            [
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": {**progress, "progressToken": "x"}},
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress},
                {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "noted"}},
                text_result(message, "streamed"),
            ]
        )

    scripted.answers["answer"] = answer
    params = {"name": "up_answer", "arguments": {}, "_meta": {"progressToken": "mine"}}
    reply = await modern_call(access, "tools/call", params, log_level="debug")
    again = await modern_call(access, "tools/call", params, log_level="debug")

    assert (reply.content_type or "").startswith("text/event-stream"), reply.body
    progress, log, final = reply.sse_messages()
    assert progress["method"] == "notifications/progress"
    assert {k: progress["params"][k] for k in ("progressToken", "progress", "total", "message")} == {
        "progressToken": "mine",
        "progress": 1,
        "total": 2,
        "message": "half",
    }  # the other token's progress was not this call's
    assert (log["method"], log["params"]["level"], log["params"]["data"]) == ("notifications/message", "info", "noted")
    assert final["result"]["content"][0]["text"] == "streamed"
    assert again.sse_messages()[-1]["result"]["content"][0]["text"] == "streamed"
    # The upstream was asked for logs at the client's level, and its stream's end drained: the link was kept.
    first, second = scripted.calls()
    assert first.message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] == "debug"
    assert await wait_until(lambda: first.connection == second.connection or None, what="the same link")


@pytest.mark.parametrize("status", [200, 400])
async def test_a_json_rpc_error_is_the_client_s_error_by_either_path(
    federated: tuple[Access, Any], scripted: ScriptedUpstream, sdk_path: Callable[[], None], status: int
) -> None:
    access, _ = federated
    error = {"code": -32602, "message": "the upstream refused these arguments", "data": {"field": "text"}}
    scripted.answers["answer"] = lambda message: json_reply(
        {"jsonrpc": "2.0", "id": message["id"], "error": error}, status=status
    )

    fast = (await call(access, up("answer"), timeout=10)).json()
    sdk_path()
    by_sdk = (await call(access, up("answer"), timeout=10)).json()

    assert fast["error"] == by_sdk["error"]
    assert (fast["error"]["code"], fast["error"]["message"]) == (-32602, error["message"])


MALFORMED: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "not the result's shape": lambda message: json_reply(result(message, {"content": "not a list"})),
    "not JSON": lambda message: b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\n{nope",
    "a web page": lambda message: b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 4\r\n\r\n<p/>",
    "a server error": lambda message: b"HTTP/1.1 500 X\r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\noops",
    "no reply at all": lambda message: b"",
}


@pytest.mark.parametrize("kind", list(MALFORMED))
async def test_a_malformed_answer_is_the_same_failure_by_either_path(
    federated: tuple[Access, Any], scripted: ScriptedUpstream, sdk_path: Callable[[], None], kind: str
) -> None:
    access, upstream = federated
    from mcp_app.federation import breaker

    scripted.answers["answer"] = MALFORMED[kind]
    if kind == "no reply at all":
        scripted.answers.pop("answer")
        name = CLOSE
    else:
        name = "answer"
    fast = await up_call(access, name)
    await sync_to_async(breaker.reset)(upstream.pk)
    sdk_path()
    by_sdk = await up_call(access, name)

    assert failure(fast) == failure(by_sdk)
    assert failure(fast) in {"UPSTREAM_INVALID_REPLY", "UPSTREAM_UNAVAILABLE"}


async def test_an_answer_to_another_request_fails_the_call_at_once(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    # The SDK's client drops a response of an id it did not send and waits out the call's timeout; the fast path
    # knows the POST carried one request, whose answer this is not.
    access, _ = federated
    scripted.answers["answer"] = lambda message: json_reply(text_result({**message, "id": "other"}, "x"))

    assert failure(await up_call(access, "answer")) == "UPSTREAM_UNAVAILABLE"


async def test_a_redirect_is_handed_to_the_sdk_which_follows_it_within_the_origin(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, _ = federated
    redirected: list[int] = []

    def answer(message: dict[str, Any]) -> bytes:
        if not redirected:
            redirected.append(message["id"])
            return b"HTTP/1.1 307 X\r\nlocation: /mcp\r\ncontent-length: 0\r\n\r\n"
        return json_reply(text_result(message, "followed"))

    scripted.answers["answer"] = answer
    followed = await up_call(access, "answer")

    first, second = scripted.calls()
    assert followed["content"][0]["text"] == "followed"
    # The fast path's request (no compression asked), then the SDK's own, the same call again.
    assert "accept-encoding" not in first.headers and "accept-encoding" in second.headers
    assert first.message["params"]["name"] == second.message["params"]["name"] == "answer"


async def test_input_required_goes_to_a_stateless_client_and_its_answers_come_back(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, _ = federated
    ask = {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    }

    def answer(message: dict[str, Any]) -> bytes:
        params = message["params"]
        if "inputResponses" not in params:
            needed = {"resultType": "input_required", "inputRequests": {"r1": ask}, "requestState": "upstream-state"}
            return json_reply(result(message, needed))
        name = params["inputResponses"]["r1"]["content"]["name"]
        return json_reply(text_result(message, f"hello {name} ({params['requestState']})"))

    scripted.answers["answer"] = answer
    asked = result_of(await modern_call(access, "tools/call", {"name": "up_answer"}, capabilities=ELICITATION))
    assert asked["resultType"] == "input_required"
    [(key, request)] = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["message"] == "Name?"
    retry = {
        "name": "up_answer",
        "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": asked["requestState"],
    }
    answered = result_of(await modern_call(access, "tools/call", retry, capabilities=ELICITATION))

    assert answered["content"][0]["text"] == "hello Ada (upstream-state)"


async def test_an_upstream_that_closes_kept_alive_connections_between_calls(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, _ = federated
    scripted.close_after_reply = True  # closed after each reply, although the reply kept it alive

    texts = []
    for n in range(3):
        texts.append((await up_call(access, "echo", text=str(n)))["content"][0]["text"])
        await wait_until(lambda: scripted.open_connections() == 0 or None, what="the upstream closed the link")

    assert texts == ["0", "1", "2"]
    assert len({seen.connection for seen in scripted.calls()}) == 3  # each call on a new link, none failed


async def test_a_link_closed_since_the_loop_last_looked_is_not_taken_again(
    allow_loopback: None, scripted: ScriptedUpstream
) -> None:
    links = wire.Links(scripted.url, max_idle=4, idle_seconds=60, connect_timeout=5)
    link = await links.acquire()
    await wait_until(lambda: scripted.open_connections() == 1 or None, what="the upstream took the link")
    links.release(link)
    scripted.drop_connections()  # blocks this loop: the FIN is in the socket, unread by the loop

    again = await links.acquire()
    try:
        assert again is not link
        assert link.writer.is_closing()
    finally:
        links.close()
        again.close()


async def start(access: Access, body: dict[str, Any]) -> Any:
    comm = communicator(access, body)
    await comm.send_input({"type": "http.request", "body": comm.body})
    return comm


async def test_a_cancelled_call_closes_its_link_and_the_next_call_opens_another(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, _ = federated
    await up_call(access, "echo", text="warm")
    held = await start(access, up(HANG))
    await wait_until(lambda: any(seen.message["params"]["name"] == HANG for seen in scripted.calls()))

    await held.send_input({"type": "http.disconnect"})  # the client goes away: the call is cancelled
    assert await asyncio.to_thread(scripted.hung_up.wait, 5)  # its link was closed, not kept
    await held.wait(timeout=5)
    after = await up_call(access, "echo", text="after")

    warm, hung, later = scripted.calls()
    assert after["content"][0]["text"] == "after"
    assert warm.connection == hung.connection != later.connection


async def test_a_deadline_ends_the_call_and_closes_its_link(
    federated: tuple[Access, Any], scripted: ScriptedUpstream
) -> None:
    access, upstream = federated

    def short() -> None:
        upstream.timeout_seconds = 1
        upstream.save()

    await sync_to_async(short)()
    assert failure(await up_call(access, HANG)) == "UPSTREAM_TIMEOUT"
    assert await asyncio.to_thread(scripted.hung_up.wait, 5)


async def test_a_name_that_resolves_elsewhere_after_the_check_is_never_connected_to(
    scripted: ScriptedUpstream,
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = ["127.0.0.1"]

    async def resolver(host: str, port: int) -> list[str]:
        assert host == "rebind.example.test"  # the system's resolver does not know it: only the checked address
        return list(answers)

    monkeypatch.setattr(outbound, "resolver", resolver)
    access = await sync_to_async(access_factory)(tools=())
    url = scripted.url.replace("127.0.0.1", "rebind.example.test")
    await sync_to_async(federate)(access, url)
    assert (await up_call(access, "echo", text="pinned"))["content"][0]["text"] == "pinned"

    scripted.close_after_reply = True
    await up_call(access, "echo", text="last")  # and the link is gone: the next call connects again
    await wait_until(lambda: scripted.open_connections() <= 1 or None, what="the fast link closed")
    connections = scripted.connections
    answers[:] = ["10.0.0.7"]  # the name now points at a private address, which is not allow-listed
    refused = await up_call(access, "echo", text="rebound")

    assert failure(refused) == "UPSTREAM_FORBIDDEN_ADDRESS"
    assert scripted.connections == connections  # nothing was connected to anywhere


def disable(upstream: Any) -> None:
    upstream.enabled = False
    upstream.save()


def rotate(upstream: Any) -> None:
    upstream.set_secret_headers({"Authorization": "Bearer a-rotated-upstream-secret"})
    upstream.save()


@pytest.mark.parametrize(
    "change", [disable, rotate, lambda upstream: upstream.delete()], ids=["disabled", "rotated", "deleted"]
)
async def test_removal_and_rotation_close_the_kept_alive_links(
    federated: tuple[Access, Any], scripted: ScriptedUpstream, change: Callable[[Any], None]
) -> None:
    access, upstream = federated
    await up_call(access, "echo", text="warm")
    [warm] = scripted.calls()

    await sync_to_async(change)(upstream)

    def link_closed() -> bool:
        return warm.connection not in scripted.open_numbers()

    await wait_until(link_closed, what="the pooled link closed")
