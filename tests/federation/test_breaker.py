"""The circuit breaker per upstream (``mcp_app.federation.breaker``), in Redis and in process: opening within the
window, refusing while open, one half-open probe, closing and re-opening, shared by processes, open on outage."""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings as django_settings

from mcp_app.federation import breaker
from mcp_app.federation.breaker import LocalBreakers, Policy, RedisBreakers
from tests.helpers import wait_until

FAILURES, WINDOW, COOLDOWN = 3, 0.6, 0.3


@pytest.fixture
def short(settings: Any) -> None:
    settings.MCP_APP = {
        **settings.MCP_APP,
        "UPSTREAM_BREAKER_FAILURES": FAILURES,
        "UPSTREAM_BREAKER_WINDOW_SECONDS": WINDOW,
        "UPSTREAM_BREAKER_COOLDOWN_SECONDS": COOLDOWN,
    }


@pytest.fixture(params=["redis", "local"])
def kind(request: Any, use_backend: Any, short: None) -> str:
    if request.param == "redis":
        if not django_settings.REDIS_URL:
            pytest.skip("needs REDIS_URL")
        use_backend("BREAKERS", RedisBreakers(django_settings.REDIS_URL))
    else:
        use_backend("BREAKERS", LocalBreakers())
    return str(request.param)


@pytest.fixture
def pk(kind: str) -> Iterator[int]:
    value = 10**6 + secrets.randbelow(10**9)
    yield value
    breaker.reset(value)


async def open_it(pk: int) -> None:
    for _ in range(FAILURES):
        await breaker.failed(pk)
    assert breaker.state(pk).status == "open"


async def half_open(pk: int) -> None:
    await open_it(pk)
    await wait_until(lambda: breaker.state(pk).status == "half-open", what="the cool-down's end")


async def test_failures_within_the_window_open_it_and_calls_are_refused_meanwhile(pk: int) -> None:
    for _ in range(FAILURES - 1):
        await breaker.failed(pk)
    assert (await breaker.admit(pk)).allowed
    assert breaker.state(pk) == breaker.BreakerState("closed", FAILURES - 1, None)
    await breaker.failed(pk)
    refused = await breaker.admit(pk)
    assert not refused.allowed
    assert 0 < refused.retry_after <= COOLDOWN
    state = breaker.state(pk)
    assert (state.status, state.failures) == ("open", FAILURES)
    assert state.open_until is not None and 0 < (state.open_until - datetime.now(UTC)).total_seconds() <= 1.5
    assert breaker.open_breakers()[pk] == state
    assert breaker.states([pk, pk + 1]) == {pk: state, pk + 1: breaker.CLOSED_STATE}


async def test_failures_spread_beyond_the_window_do_not_open_it(pk: int) -> None:
    for _ in range(FAILURES - 1):
        await breaker.failed(pk)
    await wait_until(lambda: breaker.state(pk).failures == 0, what="the window to pass")
    await breaker.failed(pk)
    assert breaker.state(pk) == breaker.BreakerState("closed", 1, None)
    assert (await breaker.admit(pk)).allowed


async def test_half_open_lets_exactly_one_probe_through_and_its_success_closes_it(pk: int) -> None:
    await half_open(pk)
    admissions = await asyncio.gather(*(breaker.admit(pk) for _ in range(6)))
    assert [admission.allowed for admission in admissions].count(True) == 1
    assert [admission.probe for admission in admissions].count(True) == 1
    assert all(admission.retry_after > 0 for admission in admissions if not admission.allowed)
    assert pk in breaker.open_breakers()
    await breaker.succeeded(pk)
    assert breaker.state(pk) == breaker.CLOSED_STATE
    assert pk not in breaker.open_breakers()
    assert all(admission.allowed for admission in await asyncio.gather(*(breaker.admit(pk) for _ in range(3))))


async def test_a_failed_probe_reopens_it_for_another_cool_down(pk: int) -> None:
    await half_open(pk)
    assert (await breaker.admit(pk)).probe
    await breaker.failed(pk)
    assert breaker.state(pk).status == "open"
    assert not (await breaker.admit(pk)).allowed
    # And after that cool-down, a probe again.
    await wait_until(lambda: breaker.state(pk).status == "half-open", what="the second cool-down's end")
    assert (await breaker.admit(pk)).probe


async def test_a_success_while_closed_or_open_changes_nothing(pk: int) -> None:
    await breaker.failed(pk)
    await breaker.succeeded(pk)
    assert breaker.state(pk).failures == 1
    await open_it(pk)
    await breaker.succeeded(pk)  # a call admitted before it opened: too late to judge
    assert breaker.state(pk).status == "open"


async def test_an_operator_closes_it(pk: int) -> None:
    await open_it(pk)
    breaker.reset(pk)
    assert breaker.state(pk) == breaker.CLOSED_STATE
    assert (await breaker.admit(pk)).allowed


async def test_no_failure_count_switches_the_breakers_off(pk: int, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "UPSTREAM_BREAKER_FAILURES": 0}
    for _ in range(5):
        await breaker.failed(pk)
    assert (await breaker.admit(pk)).allowed
    assert breaker.state(pk) == breaker.CLOSED_STATE


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs REDIS_URL")
async def test_processes_share_each_breaker_through_redis(short: None) -> None:
    # Two backends on the same Redis are what two processes see (each has its own clients and connections: the
    # URLs differ by client name).
    policy = Policy.current()
    pk = 10**6 + secrets.randbelow(10**9)
    first, second = (RedisBreakers(f"{django_settings.REDIS_URL}?client_name={name}") for name in ("one", "two"))
    try:
        await share(first, second, pk, policy)
    finally:
        first.reset(pk)


async def share(first: RedisBreakers, second: RedisBreakers, pk: int, policy: Policy) -> None:
    for _ in range(FAILURES):
        await first.failed(pk, policy)
    assert not (await second.admit(pk, policy)).allowed
    assert second.states([pk], policy)[pk].status == "open"
    await wait_until(lambda: second.states([pk], policy)[pk].status == "half-open", what="the cool-down's end")
    admissions = await asyncio.gather(*(side.admit(pk, policy) for side in (first, second) * 3))
    assert [admission.allowed for admission in admissions].count(True) == 1
    assert await second.succeeded(pk, policy)
    assert first.states([pk], policy)[pk].status == "closed"


async def test_an_unreachable_redis_does_not_hold_calls_back(
    use_backend: Any, caplog: pytest.LogCaptureFixture, short: None
) -> None:
    with socket.socket() as sock:  # a port nothing listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    use_backend("BREAKERS", RedisBreakers(f"redis://127.0.0.1:{port}/0"))
    pk = 10**6 + secrets.randbelow(10**9)
    with caplog.at_level(logging.WARNING, logger="mcp_app.backends"):
        for _ in range(FAILURES + 2):
            await breaker.failed(pk)
            assert (await breaker.admit(pk)).allowed
        assert breaker.state(pk) == breaker.CLOSED_STATE
        assert breaker.open_breakers() == {}
    assert len([record for record in caplog.records if "unavailable" in record.getMessage()]) == 1
