"""Proxied calls: ``tools/call``, ``resources/read`` and ``prompts/get`` of upstream entries.

``call_tool`` runs one call on its upstream through this process's pooled connection: a ``CallToolResult`` (every
failure an ``isError`` result with an ``UPSTREAM_*`` code; ``_meta["dev.mcp-host/upstream"]`` names the upstream
and ``durationMs``) or the ``InputRequired`` a stateless client must answer first, which for a handshake-era
upstream waits here (``Exchange``) for the client's retry, forwarded from any process (``ResumeExchange``, ``Step``).
Not owned here: argument checks, execution, quotas, grants and audit (the runner's). Design: docs/upstreams.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, TypeVar

import mcp_types as types
import orjson
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

from ..channel_layer import LAYER_ERRORS, LOCAL_PREFIX, Subscription, messaging
from ..conf import mcp_settings
from ..definitions.context import CodedFailure, InputRequired, error_result
from ..definitions.http_tools import effective_timeout
from ..definitions.upstreams import UpstreamEndpoint, UpstreamPromptTarget, UpstreamResourceTarget, UpstreamToolTarget
from ..protocol.context import CallContext
from ..protocol.errors import ProtocolError
from ..protocol.versions import MODERN
from . import breaker, fastcall
from .connection import Trouble, UpstreamForbidden, UpstreamUnavailable, trouble, unreachable
from .pool import Connection, pool
from .relay import CallRelay, Parked, current, declined

logger = logging.getLogger("mcp_app.federation")

META_KEY = "dev.mcp-host/upstream"
Answer = TypeVar("Answer")
MAX_INPUT_ROUNDS = 8


def failure_result(code: str, message: str) -> dict[str, Any]:
    return error_result(message, code, "upstream_error")


# What an upstream's answer carries about its own wire (the 2026-07-28 result envelope, its identity): our
# protocol layer writes the client's own; the rest of ``_meta`` passes through.
_ENVELOPE = ("resultType", "ttlMs", "cacheScope")
_OWN_META = "io.modelcontextprotocol/"


def outcome_of(result: dict[str, Any]) -> str:
    """``ok`` for a result the upstream gave (an ``isError`` one included), else the failure's code."""
    if result.get("isError") is True:
        content = result.get("content")
        if isinstance(content, list) and len(content) == 2 and isinstance(content[1], dict):
            try:
                detail = orjson.loads(content[1].get("text", ""))
            except orjson.JSONDecodeError:
                return "ok"
            if isinstance(detail, dict) and detail.get("error_type") == "upstream_error":
                return str(detail.get("code"))
    return "ok"


def _dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    for key in _ENVELOPE:
        data.pop(key, None)
    meta = data.get("_meta")
    if isinstance(meta, dict):
        meta = {key: value for key, value in meta.items() if not key.startswith(_OWN_META)}
        if meta:
            data["_meta"] = meta
        else:
            del data["_meta"]
    return data


def _stamp(result: dict[str, Any], endpoint: UpstreamEndpoint, started: float) -> dict[str, Any]:
    meta = dict(result.get("_meta") or {})
    meta[META_KEY] = {"upstream": endpoint.name, "durationMs": round((time.monotonic() - started) * 1000, 1)}
    return {**result, "_meta": meta}


# Guarded exchange ------------------------------------------------------------------------------------------------


def _source(call: CallContext) -> str:
    """Who a call's timeout may be the doing of (its arguments asked for something slow): its agent."""
    principal = call.request.principal
    if principal is None:
        return "anonymous"
    return f"{principal.tenant}/{principal.agent_id}"


async def _guarded(
    endpoint: UpstreamEndpoint,
    limit: float,
    what: str,
    exchange: Callable[[Connection], Awaitable[Answer]],
    call: CallContext,
) -> Answer:
    """Run ``exchange`` on a pooled connection within ``limit`` seconds, under the breaker. Raises ``CodedFailure``
    (the upstream's failures counted by the breaker, a timeout once per agent), ``ProtocolError`` (the upstream's own
    JSON-RPC error) or ``CancelledError``."""
    from mcp.shared.exceptions import MCPError

    admission = await breaker.admit(endpoint.pk)
    if not admission.allowed:
        raise CodedFailure(
            "UPSTREAM_CIRCUIT_OPEN",
            f"Upstream {endpoint.name} is failing; calls to it are paused for {admission.retry_after:.0f} s more",
        )
    connection: Connection | None = None
    turn = pool().slot(endpoint)
    turned = False
    noted = Trouble()
    noting = trouble.set(noted)
    try:
        async with asyncio.timeout(limit):
            await turn.acquire()
            turned = True
            connection = await pool().connection(endpoint)
            answer = await exchange(connection)
    except TimeoutError as exc:
        if not turned:  # our own bound, not the upstream's slowness: not a breaker failure
            raise CodedFailure(
                "UPSTREAM_BUSY",
                f"Upstream {endpoint.name} already has {mcp_settings.UPSTREAM_MAX_CONCURRENT_CALLS} calls in "
                f"flight from this server process; this one waited {limit:g} s for a turn",
            ) from exc
        await breaker.failed(endpoint.pk, source=_source(call))
        raise CodedFailure(
            "UPSTREAM_TIMEOUT", f"Upstream {endpoint.name} did not answer {what} within {limit:g} s"
        ) from exc
    except UpstreamForbidden as exc:
        # The operator's policy, not the upstream's health: not a breaker failure.
        raise CodedFailure(
            "UPSTREAM_FORBIDDEN_ADDRESS", f"Upstream {endpoint.name} is at an address mcp-host may not call: {exc}"
        ) from exc
    except UpstreamUnavailable as exc:
        await breaker.failed(endpoint.pk)
        raise CodedFailure("UPSTREAM_UNAVAILABLE", f"Upstream {endpoint.name} is unavailable: {exc}") from exc
    except MCPError as exc:
        # The SDK's codes for an exchange that failed (not the upstream's own answers), told apart from the
        # upstream's errors of the same codes by what the transport saw (``Trouble``).
        if noted.too_large:
            await breaker.failed(endpoint.pk)
            raise CodedFailure(
                "UPSTREAM_TOO_LARGE",
                f"Upstream {endpoint.name} answered {what} with more than "
                f"{mcp_settings.UPSTREAM_MAX_RESPONSE_BYTES} bytes, the most mcp-host accepts",
            ) from exc
        if noted.redirected and exc.code == INVALID_REQUEST:
            # The SDK's message names the target, which may carry what the upstream did not mean to show.
            await breaker.failed(endpoint.pk)
            raise CodedFailure(
                "UPSTREAM_REDIRECTED",
                f"Upstream {endpoint.name} answered {what} with a redirect, which mcp-host does not follow: "
                "its URL must be the MCP endpoint itself",
            ) from exc
        if exc.code in (CONNECTION_CLOSED, PARSE_ERROR) or (
            noted.broken and exc.code in (INTERNAL_ERROR, INVALID_REQUEST)
        ):
            if connection is not None:
                pool().discard(connection)
            await breaker.failed(endpoint.pk)
            raise CodedFailure(
                "UPSTREAM_UNAVAILABLE", f"Upstream {endpoint.name} failed to answer {what}: {exc.message[:200]}"
            ) from exc
        if admission.probe:
            await breaker.succeeded(endpoint.pk)
        raise ProtocolError(exc.message, exc.data, code=exc.code) from exc
    except (asyncio.CancelledError, ProtocolError):
        raise
    except Exception as exc:
        # The connection broke, or the SDK refused what came back (not JSON-RPC, not the result's shape).
        if connection is not None:
            pool().discard(connection)
        await breaker.failed(endpoint.pk)
        if unreachable(exc):
            raise CodedFailure("UPSTREAM_UNAVAILABLE", f"Upstream {endpoint.name} could not be reached") from exc
        logger.info("upstream %s: %s failed: %s", endpoint.name, what, type(exc).__name__)
        raise CodedFailure(
            "UPSTREAM_INVALID_REPLY", f"Upstream {endpoint.name} answered {what} with something that is not MCP"
        ) from exc
    finally:
        trouble.reset(noting)
        if turned:
            turn.release()
    if admission.probe:  # only a probe's success changes a breaker (it closes it): no round trip otherwise
        await breaker.succeeded(endpoint.pk)
    return answer


# Tools -----------------------------------------------------------------------------------------------------------


async def call_tool(
    target: UpstreamToolTarget,
    tool_name: str,
    arguments: dict[str, Any],
    call: CallContext,
    *,
    deadline_seconds: float | None,
    state: Any,
) -> dict[str, Any] | InputRequired:
    """Run ``tool_name`` (``target.remote_name`` upstream): a ``CallToolResult``, or the input a stateless client must
    give first (``state``: what an earlier ``InputRequired`` of this call carried, as the runtime checked it)."""
    endpoint = target.endpoint
    limit = (
        deadline_seconds if deadline_seconds is not None else effective_timeout(endpoint.timeout_seconds, "upstream")
    )
    started = time.monotonic()
    parked = state.get("p") if isinstance(state, dict) else None
    if parked is not None:
        return await _resume_exchange(str(parked), str(state.get("a") or ""), endpoint, tool_name, call, started, limit)
    relay = CallRelay(call, park=call.request.era == MODERN)
    token = current.set(relay)
    try:
        upstream_state = state.get("u") if isinstance(state, dict) else None
        responses = dict(call.input_responses or {}) if isinstance(state, dict) else None

        async def exchange(connection: Connection) -> Any:
            if connection.modern:
                return await _modern_call(connection, target, arguments, relay, responses, upstream_state)
            if relay.park:
                return await _start_exchange(connection, target, arguments, relay, limit)
            return await _legacy_call(connection, target, arguments, relay)

        answer = await _guarded(endpoint, limit, tool_name, exchange, call)
    except CodedFailure as failure:
        return _stamp(failure_result(failure.code, failure.message), endpoint, started)
    finally:
        current.reset(token)
    if isinstance(answer, InputRequired):
        return answer
    return _stamp(answer, endpoint, started)


async def _legacy_call(
    connection: Connection, target: UpstreamToolTarget, arguments: dict[str, Any], relay: CallRelay
) -> dict[str, Any]:
    result = await connection.client.session.call_tool(target.remote_name, arguments, progress_callback=relay.progress)
    await relay.settled()
    return _dump(result)


async def _modern_call(
    connection: Connection,
    target: UpstreamToolTarget,
    arguments: dict[str, Any],
    relay: CallRelay,
    responses: dict[str, Any] | None,
    upstream_state: str | None,
) -> dict[str, Any] | InputRequired:
    """A 2026-07-28 upstream: its ``input_required`` answered in-band (handshake-era clients, up to
    ``MAX_INPUT_ROUNDS``) or handed to a stateless client with the upstream's state inside ours."""
    level = relay.call.request.log_level
    meta = {"io.modelcontextprotocol/logLevel": level} if level else None
    for _round in range(MAX_INPUT_ROUNDS + 1):
        result = await _modern_round(connection, target.remote_name, arguments, relay, meta, responses, upstream_state)
        await relay.settled()
        if not isinstance(result, types.InputRequiredResult):
            return _dump(result)
        requests = {key: _dump(request) for key, request in (result.input_requests or {}).items()}
        if relay.park:
            return InputRequired(requests=requests, state={"u": result.request_state})
        asker = CallRelay(relay.call)
        responses = {
            key: await asker.ask(str(request.get("method")), dict(request.get("params") or {}))
            for key, request in requests.items()
        }
        upstream_state = result.request_state
    raise CodedFailure("UPSTREAM_TOO_MANY_ROUNDS", f"Upstream asked for input more than {MAX_INPUT_ROUNDS} times")


async def _modern_round(
    connection: Connection,
    name: str,
    arguments: dict[str, Any],
    relay: CallRelay,
    meta: dict[str, Any] | None,
    responses: dict[str, Any] | None,
    upstream_state: str | None,
) -> types.CallToolResult | types.InputRequiredResult:
    """One ``tools/call`` of a 2026-07-28 exchange: on the fast path where it applies (docs/upstreams.md, "The fast
    path"), else, or when it declines (a redirect), through the SDK's session; the same answers and failures."""
    if fastcall.applies(connection):
        try:
            return await fastcall.call_tool(
                connection,
                name,
                arguments,
                relay,
                meta=meta,
                input_responses=responses or None,
                request_state=upstream_state,
            )
        except fastcall.Declined:
            pass  # nothing ran upstream: the SDK follows a same-origin redirect and refuses the others
    result: types.CallToolResult | types.InputRequiredResult = await connection.client.session.call_tool(
        name,
        arguments,
        progress_callback=relay.progress,
        meta=meta,
        input_responses=responses or None,
        request_state=upstream_state,
        allow_input_required=True,
    )
    return result


# A handshake-era upstream and a stateless client: the upstream call waits here for the client's retry ----------


@dataclass(eq=False)
class Exchange:
    task: asyncio.Task[dict[str, Any]]
    relay: CallRelay
    endpoint: UpstreamEndpoint
    deadline: float
    asked: dict[str, Parked] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)


_exchanges: dict[str, Exchange] = {}


async def _start_exchange(
    connection: Connection, target: UpstreamToolTarget, arguments: dict[str, Any], relay: CallRelay, limit: float
) -> dict[str, Any] | InputRequired:
    # The upstream request runs in a task of its own (which inherits ``relay.current``), so that this request can
    # answer input_required while the upstream tool waits.
    task = asyncio.get_running_loop().create_task(_legacy_call(connection, target, arguments, relay))
    exchange = Exchange(task, relay, target.endpoint, time.monotonic() + limit)
    try:
        return await _next_step(exchange)
    except asyncio.CancelledError:
        task.cancel()
        raise


async def _next_step(exchange: Exchange) -> dict[str, Any] | InputRequired:
    """Wait until the upstream call ends or asks for input; register the exchange while it waits (here, and at
    this loop's inbox, whose address the state carries: a retry reaching another process is forwarded here)."""
    getter = asyncio.ensure_future(exchange.relay.pending.get())
    try:
        done, _ = await asyncio.wait({exchange.task, getter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getter.done():
            getter.cancel()
    if getter in done and not getter.cancelled():
        asked = [getter.result()]
        while not exchange.relay.pending.empty():
            asked.append(exchange.relay.pending.get_nowait())
        exchange.asked = {f"r{index}": parked for index, parked in enumerate(asked)}
        key = uuid.uuid4().hex
        _exchanges[key] = exchange
        asyncio.get_running_loop().call_later(max(exchange.deadline - time.monotonic(), 0), _expire, key)
        requests = {rkey: {"method": p.method, "params": p.params} for rkey, p in exchange.asked.items()}
        return InputRequired(requests=requests, state={"p": key, "a": await _inbox_address()})
    return exchange.task.result()


def _expire(key: str) -> None:
    exchange = _exchanges.pop(key, None)
    if exchange is not None:
        exchange.task.cancel()


async def _advance(resume: ResumeExchange) -> Step | None:
    """Give the exchange ``resume`` names its client's answers and wait for its next step; ``None`` when it does not
    wait in this loop (another loop of a worker process is reached by forwarding)."""
    exchange = _exchanges.get(resume.key)
    if exchange is None or exchange.endpoint.pk != resume.upstream or exchange.loop is not asyncio.get_running_loop():
        return None
    del _exchanges[resume.key]
    endpoint = exchange.endpoint
    for rkey, parked in exchange.asked.items():
        answer = resume.responses.get(rkey)
        if not isinstance(answer, dict):
            answer = declined(parked.method, f"{parked.method} was not answered")
        if not parked.answer.done():
            parked.answer.set_result(answer)
    remaining = exchange.deadline - time.monotonic()
    try:
        async with asyncio.timeout(max(remaining, 0.001)):
            step = await _next_step(exchange)
    except TimeoutError:
        exchange.task.cancel()
        return Step(failure=("UPSTREAM_TIMEOUT", f"Upstream {endpoint.name} did not answer in time"))
    except asyncio.CancelledError:
        exchange.task.cancel()
        raise
    except Exception:
        return Step(failure=("UPSTREAM_UNAVAILABLE", f"Upstream {endpoint.name} failed to answer"))
    if isinstance(step, InputRequired):
        return Step(input_required=step)
    return Step(result=step)


async def _resume_exchange(
    key: str, inbox: str, endpoint: UpstreamEndpoint, tool_name: str, call: CallContext, started: float, limit: float
) -> dict[str, Any] | InputRequired:
    resume = ResumeExchange(key=key, upstream=endpoint.pk, responses=dict(call.input_responses or {}))
    step = await _advance(resume)
    if step is None and inbox:
        step = await _forward(resume, inbox, limit)
    if step is None or step.gone:
        return failure_result(
            "UPSTREAM_EXCHANGE_GONE",
            f"The upstream call of {tool_name} that asked for this input is no longer waiting "
            "(it timed out, or the server process holding it is gone); call the tool again",
        )
    if step.failure is not None:
        return failure_result(*step.failure)
    if step.input_required is not None:
        return step.input_required
    return _stamp(step.result or {}, endpoint, started)


# The exchange's process may not be the one the retry reached: forwarded through the channel layer ----------------

RESUME_EVENT = "mcp.upstream_resume"
STEP_EVENT = "mcp.upstream_step"
MESSAGE_VERSION = 1


class _Forwarded:
    """A message of a dataclass between processes: its ``type`` and version, then its fields."""

    TYPE: ClassVar[str]

    def to_message(self) -> dict[str, Any]:
        return {"type": self.TYPE, "v": MESSAGE_VERSION, **asdict(self)}  # type: ignore[call-overload]

    @classmethod
    def understands(cls, message: dict[str, Any]) -> bool:
        return message.get("type") == cls.TYPE and message.get("v") == MESSAGE_VERSION


@dataclass(frozen=True)
class Step(_Forwarded):
    """What became of an exchange after the client's answers: the result, more input, or a failure; ``gone``:
    it no longer waits in the loop whose inbox received the answers (it expired, or was answered already)."""

    result: dict[str, Any] | None = None
    input_required: InputRequired | None = None
    failure: tuple[str, str] | None = None
    gone: bool = False
    TYPE: ClassVar[str] = STEP_EVENT

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Step | None:
        if not cls.understands(message):
            return None
        needed = message.get("input_required")
        failure = message.get("failure")
        return cls(
            result=message.get("result"),
            input_required=InputRequired(requests=needed["requests"], state=needed["state"]) if needed else None,
            failure=(str(failure[0]), str(failure[1])) if failure else None,
            gone=bool(message.get("gone")),
        )


@dataclass(frozen=True)
class ResumeExchange(_Forwarded):
    """A stateless client's retry, sent to the process whose exchange ``key`` waits (its inbox)."""

    key: str
    upstream: int
    responses: dict[str, Any]
    reply_to: str = ""
    TYPE: ClassVar[str] = RESUME_EVENT

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> ResumeExchange | None:
        if not cls.understands(message):
            return None
        return cls(
            key=str(message["key"]),
            upstream=int(message["upstream"]),
            responses=dict(message.get("responses") or {}),
            reply_to=str(message.get("reply_to") or ""),
        )


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Subscription] = weakref.WeakKeyDictionary()
_serving: set[asyncio.Task[None]] = set()


async def _inbox_address() -> str:
    """This loop's inbox for forwarded retries (opened on first use), or ``""`` where it cannot be opened."""
    loop = asyncio.get_running_loop()
    inbox = _inboxes.get(loop)
    if inbox is None or inbox.ended.is_set():
        try:
            inbox = await messaging().subscribe(on_message=_on_resume)
        except LAYER_ERRORS:
            return ""
        _inboxes[loop] = inbox
    return inbox.address


def _on_resume(message: dict[str, Any]) -> None:
    resume = ResumeExchange.from_message(message)
    if resume is not None:
        task = asyncio.get_running_loop().create_task(_serve(resume), context=contextvars.Context())
        _serving.add(task)
        task.add_done_callback(_serving.discard)


async def _serve(resume: ResumeExchange) -> None:
    """Advance a forwarded exchange here and send its step back: ``gone`` at once when it no longer waits here (an
    inbox is one loop's), so the sender answers ``UPSTREAM_EXCHANGE_GONE`` without waiting out its timeout."""
    step = await _advance(resume) or Step(gone=True)
    if resume.reply_to:
        try:
            await messaging(address=resume.reply_to).send(resume.reply_to, step.to_message())
        except LAYER_ERRORS:
            logger.info("could not send an upstream exchange's step back to %s", resume.reply_to)


async def _forward(resume: ResumeExchange, inbox: str, limit: float) -> Step | None:
    """Send the retry to the process whose exchange waits at ``inbox`` and wait (at most ``limit`` s) for its step."""
    if inbox.startswith(LOCAL_PREFIX):
        return None  # an address of this process's own bus: the exchange would have been found here
    try:
        reply = await messaging().subscribe()
    except LAYER_ERRORS:
        return None
    try:
        await messaging().send(inbox, replace(resume, reply_to=reply.address).to_message())
        message = await reply.receive(limit)
    except LAYER_ERRORS:
        return None
    finally:
        await reply.close()
    return Step.from_message(message) if message is not None else None


# Resources and prompts -------------------------------------------------------------------------------------------


async def _fetch(
    endpoint: UpstreamEndpoint, what: str, call: CallContext, fetch: Callable[[Any], Awaitable[Any]]
) -> dict[str, Any]:
    """``fetch`` (of the SDK's session) on the upstream, guarded: its result, or its failure as a JSON-RPC error."""
    token = current.set(CallRelay(call))
    try:

        async def exchange(connection: Connection) -> dict[str, Any]:
            return _dump(await fetch(connection.client.session))

        return await _guarded(endpoint, effective_timeout(endpoint.timeout_seconds, "upstream"), what, exchange, call)
    except CodedFailure as failure:
        raise ProtocolError(failure.message, {"code": failure.code}) from failure
    finally:
        current.reset(token)


async def read_resource(target: UpstreamResourceTarget, uri: str, call: CallContext) -> dict[str, Any]:
    return await _fetch(target.endpoint, f"resources/read {uri}", call, lambda session: session.read_resource(uri))


async def get_prompt(target: UpstreamPromptTarget, arguments: dict[str, str], call: CallContext) -> dict[str, Any]:
    name = target.remote_name
    return await _fetch(
        target.endpoint, f"prompts/get {name}", call, lambda session: session.get_prompt(name, arguments)
    )
