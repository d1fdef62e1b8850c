"""Worker-call admission (``mcp_app.limits.quotas``) on both backends: the in-process one and real Redis.

Every test runs on ``LocalQuotas`` and on ``RedisQuotas`` (against ``REDIS_URL``, keys under a prefix of its
own; skipped without Redis unless ``MCP_REQUIRE_SERVICES=1``). Races use many asyncio tasks, threads, and two
OS processes on the same Redis; a crashed holder is a real process killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings

from mcp_app.limits import quotas
from mcp_app.protocol.errors import WORKER_QUOTA_EXCEEDED, QuotaExceeded
from tests.conftest import REQUIRE_SERVICES
from tests.helpers import wait_until_blocking

WAIT_SECONDS = 10.0


def _need_redis() -> str:
    url = django_settings.REDIS_URL
    if not url:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not configured")
        pytest.skip("needs REDIS_URL")
    return str(url)


@pytest.fixture(params=["local", "redis"])
def backend_name(request: pytest.FixtureRequest, use_backend: Any) -> Iterator[str]:
    """The quota backend of one test (a fresh prefix: tests never see each other's leases)."""
    if request.param == "redis":
        use_backend("WORKER_QUOTAS", quotas.RedisQuotas(_need_redis(), prefix=f"mcp:test-quota:{secrets.token_hex(6)}"))
    else:
        use_backend("WORKER_QUOTAS", quotas.LocalQuotas())
    yield request.param


@pytest.fixture
def short_lease(settings: Any) -> float:
    ttl = 0.6
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_CALL_LEASE_SECONDS": ttl}
    return ttl


async def take(call_id: str, tenant: int = 1, agent: int = 10, limits: tuple[int, int] = (2, 0)) -> quotas.Lease:
    return await quotas.acquire(
        call_id, tenant_pk=tenant, agent_pk=agent, tenant_limit=limits[0], agent_limit=limits[1]
    )


def running(tenant: int | None = None, agent: int | None = None) -> int:
    tenants, agents = quotas.running_calls(
        tenants=[tenant] if tenant is not None else [], agents=[agent] if agent is not None else []
    )
    return tenants[tenant] if tenant is not None else agents[agent]  # type: ignore[index]


async def test_a_tenant_gets_at_most_its_limit_and_a_released_slot_admits_the_next_call(backend_name: str) -> None:
    first, second = await take("a"), await take("b")
    with pytest.raises(QuotaExceeded) as refused:
        await take("c")
    error = refused.value.to_wire()
    assert error["code"] == WORKER_QUOTA_EXCEEDED == -32010
    assert error["data"] == {"scope": "tenant", "limit": 2}
    assert "tenant" in error["message"] and "at most 2" in error["message"]
    assert running(tenant=1) == 2
    await first.release()
    assert running(tenant=1) == 1
    third = await take("c")
    assert running(tenant=1) == 2
    for lease in (second, third):
        await lease.release()
    assert running(tenant=1) == 0


async def test_releasing_twice_or_from_anywhere_frees_one_slot_only(backend_name: str) -> None:
    first, second = await take("a"), await take("b")
    await first.release()
    await first.release()
    first.release_sync()
    quotas.release_call("a")  # the worker or reaper giving back a call that is already back
    assert first.released and not second.released
    assert running(tenant=1) == 1
    third = await take("c")
    with pytest.raises(QuotaExceeded):
        await take("d")  # "a" released four times freed one slot, not four
    quotas.release_call("c")  # from a process without the Lease object
    assert running(tenant=1) == 1
    await take("d")
    await second.release()
    third.release_sync()


async def test_an_agent_limit_below_its_tenant_limit_refuses_that_agent_only(backend_name: str) -> None:
    limits = (5, 1)
    await take("a1", agent=10, limits=limits)
    with pytest.raises(QuotaExceeded) as refused:
        await take("a2", agent=10, limits=limits)
    assert refused.value.to_wire()["data"] == {"scope": "agent", "limit": 1}
    assert "agent" in refused.value.message and "at most 1" in refused.value.message
    await take("b1", agent=11, limits=limits)  # another agent of the same tenant
    assert running(tenant=1) == 2
    assert running(agent=10) == 1


async def test_a_tenant_at_its_quota_does_not_affect_another_tenant(backend_name: str) -> None:
    await take("a1", tenant=1, agent=10)
    await take("a2", tenant=1, agent=10)
    with pytest.raises(QuotaExceeded):
        await take("a3", tenant=1, agent=10)
    for index in range(2):
        await take(f"b{index}", tenant=2, agent=20)
    assert (running(tenant=1), running(tenant=2)) == (2, 2)


async def test_zero_means_unlimited_and_calls_are_still_counted(backend_name: str) -> None:
    leases = [await take(f"c{index}", limits=(0, 0)) for index in range(60)]
    assert running(tenant=1) == 60
    assert running(agent=10) == 60
    for lease in leases:
        await lease.release()
    assert running(tenant=1) == 0


async def test_acquiring_a_call_that_holds_a_slot_takes_no_second_one(backend_name: str) -> None:
    lease = await take("same", limits=(1, 0))
    again = await take("same", limits=(1, 0))  # a re-issued call attached to the running one
    assert running(tenant=1) == 1
    await again.release()
    await lease.release()
    assert running(tenant=1) == 0


async def test_many_tasks_racing_for_n_slots_get_exactly_n(backend_name: str) -> None:
    async def contender(index: int) -> bool:
        try:
            await take(f"race-{index}", limits=(7, 0))
        except QuotaExceeded:
            return False
        return True

    admitted = await asyncio.gather(*(contender(index) for index in range(80)))
    assert sum(admitted) == 7
    assert running(tenant=1) == 7


def test_threads_racing_for_n_slots_get_exactly_n(backend_name: str) -> None:
    backend = quotas.get_quotas()
    start = threading.Barrier(8)
    admitted: list[str] = []
    lock = threading.Lock()

    async def contend(thread: int) -> None:
        for index in range(15):
            call_id = f"t{thread}-{index}"
            if await backend.acquire(call_id, 3, 30, 5, 0, 30.0) is None:
                with lock:
                    admitted.append(call_id)

    def contender(thread: int) -> None:
        start.wait(WAIT_SECONDS)
        asyncio.run(contend(thread))  # one event loop per thread, as each serving process has its own

    threads = [threading.Thread(target=contender, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
    assert len(admitted) == 5
    assert running(tenant=3) == 5


async def test_a_lease_not_renewed_expires_and_frees_its_slot(backend_name: str, short_lease: float) -> None:
    """A holder that stopped renewing (its process died): the slot comes back within the lease time."""
    backend = quotas.get_quotas()
    assert await backend.acquire("crashed", 1, 10, 1, 0, short_lease) is None  # taken, never renewed or released
    started = time.monotonic()
    with pytest.raises(QuotaExceeded):
        await take("next", limits=(1, 0))
    assert await asyncio.to_thread(wait_until_blocking, lambda: running(tenant=1) == 0)
    assert time.monotonic() - started >= short_lease * 0.8, "the slot must be held until the lease expires"
    lease = await take("next", limits=(1, 0))
    await lease.release()


async def test_a_held_lease_is_renewed_for_as_long_as_its_call_runs(
    backend_name: str, short_lease: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = quotas.get_quotas()
    renewals = 0
    renewed_enough = asyncio.Event()
    renew = backend.renew

    async def counted(*args: Any) -> bool:
        nonlocal renewals
        held = await renew(*args)
        renewals += 1
        if renewals >= 5:  # five renewals a third of the lease apart: well past the first lease's expiry
            renewed_enough.set()
        return bool(held)

    monkeypatch.setattr(backend, "renew", counted)
    started = time.monotonic()
    lease = await take("long", limits=(1, 0))
    await asyncio.wait_for(renewed_enough.wait(), WAIT_SECONDS)
    assert time.monotonic() - started > short_lease
    assert running(tenant=1) == 1
    with pytest.raises(QuotaExceeded):
        await take("other", limits=(1, 0))
    await lease.release()
    assert running(tenant=1) == 0


async def test_the_leases_of_one_loop_share_one_renewal_task_and_all_are_renewed(
    backend_name: str, short_lease: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held leases cost no task each (an idle stream holds one for as long as it is open): one task renews them
    all, and none is left once the last is released."""
    backend = quotas.get_quotas()
    renewed: dict[str, int] = {}
    all_renewed = asyncio.Event()
    renew = backend.renew

    async def counted(call_id: str, *args: Any) -> bool:
        held = await renew(call_id, *args)
        renewed[call_id] = renewed.get(call_id, 0) + 1
        if len(renewed) == 20 and min(renewed.values()) >= 4:  # each renewed past its first lease's expiry
            all_renewed.set()
        return bool(held)

    monkeypatch.setattr(backend, "renew", counted)
    tasks_before = len(asyncio.all_tasks())
    leases = [await take(f"many-{index}", limits=(0, 0)) for index in range(20)]
    assert len(asyncio.all_tasks()) == tasks_before + 1, "one renewal task for every lease of the loop"
    await asyncio.wait_for(all_renewed.wait(), WAIT_SECONDS)
    assert running(tenant=1) == 20
    for lease in leases:
        await lease.release()
    assert running(tenant=1) == 0
    await asyncio.sleep(short_lease / 3 * 1.5)  # past the next renewal due: the task saw it had nothing left
    assert len(asyncio.all_tasks()) == tasks_before, "no renewal task without leases"


# A contender process: connects to the Redis backend, waits for "go" on stdin, then races for the slots.
CONTENDER = r"""
import asyncio, json, sys
from mcp_app.limits.quotas import Lease, RedisQuotas

url, prefix, name, attempts, limit, ttl, hold = sys.argv[1:8]
backend = RedisQuotas(url, prefix)

async def main():
    await backend.check()  # connected before it says so
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    async def one(index):
        call_id = f"{name}-{index}"
        refused = await backend.acquire(call_id, 1, 10, int(limit), 0, float(ttl))
        return None if refused else call_id
    admitted = [c for c in await asyncio.gather(*(one(i) for i in range(int(attempts)))) if c]
    leases = [Lease(backend, call_id, 1, 10, float(ttl), "lease") for call_id in admitted]  # renewed until killed
    print(json.dumps(admitted), flush=True)
    if hold == "hold":
        await asyncio.Event().wait()  # holds its leases (renewing them) until killed

asyncio.run(main())
"""


def _contender(url: str, prefix: str, name: str, attempts: int, limit: int, ttl: float, hold: bool) -> Any:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CONTENDER,
            url,
            prefix,
            name,
            str(attempts),
            str(limit),
            str(ttl),
            "hold" if hold else "-",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=django_settings.BASE_DIR,
        env={**os.environ, "PYTHONPATH": str(django_settings.BASE_DIR)},
    )


def _line(process: Any) -> str:
    line = process.stdout.readline()
    assert line, f"the contender exited with {process.wait(WAIT_SECONDS)}"
    return str(line).strip()


def _redis_quotas(use_backend: Any) -> tuple[str, str]:
    url, prefix = _need_redis(), f"mcp:test-quota:{secrets.token_hex(6)}"
    use_backend("WORKER_QUOTAS", quotas.RedisQuotas(url, prefix=prefix))
    return url, prefix


def test_two_processes_racing_for_n_slots_get_exactly_n(use_backend: Any) -> None:
    url, prefix = _redis_quotas(use_backend)
    contenders = [_contender(url, prefix, name, 40, 6, 30.0, hold=False) for name in ("p", "q")]
    try:
        for process in contenders:
            assert _line(process) == "ready"
        for process in contenders:  # both are connected and waiting: start them together
            process.stdin.write("go\n")
            process.stdin.flush()
        admitted = [json.loads(_line(process)) for process in contenders]
    finally:
        for process in contenders:
            process.kill()
            process.wait(WAIT_SECONDS)
    assert len(admitted[0]) + len(admitted[1]) == 6
    assert running(tenant=1) == 6
    # This process's backend sees the same six: a seventh is refused here too.
    assert asyncio.run(quotas.get_quotas().acquire("late", 1, 10, 6, 0, 30.0)) == "tenant"
    for call_id in admitted[0] + admitted[1]:
        quotas.release_call(call_id)
    assert running(tenant=1) == 0


def test_the_slots_of_a_process_killed_with_sigkill_free_themselves(use_backend: Any) -> None:
    url, prefix = _redis_quotas(use_backend)
    ttl = 1.0
    holder = _contender(url, prefix, "doomed", 2, 2, ttl, hold=True)
    try:
        assert _line(holder) == "ready"
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert len(json.loads(_line(holder))) == 2
        # Alive, it renews: its slots outlast several lease times (checked throughout, not timed).
        deadline = time.monotonic() + 3 * ttl
        while time.monotonic() < deadline:
            assert running(tenant=1) == 2
            time.sleep(0.05)
        holder.send_signal(signal.SIGKILL)
        holder.wait(WAIT_SECONDS)
        killed = time.monotonic()
    finally:
        if holder.poll() is None:
            holder.kill()
    wait_until_blocking(lambda: running(tenant=1) == 0, what="the dead process's slots coming back")
    assert time.monotonic() - killed <= ttl + 1.0
    assert asyncio.run(quotas.get_quotas().acquire("after", 1, 10, 2, 0, 30.0)) is None
    quotas.release_call("after")


async def test_a_renewed_lease_outlives_its_first_expiry(backend_name: str, short_lease: float) -> None:
    """``renew`` extends a lease for as long as it is renewed, and never renews one that is gone."""
    backend = quotas.get_quotas()
    assert await backend.acquire("kept", 1, 10, 1, 0, short_lease) is None
    deadline = time.monotonic() + 3 * short_lease
    while time.monotonic() < deadline:  # three lease times, renewed every third of one
        assert await backend.renew("kept", 1, 10, short_lease)
        assert running(tenant=1) == 1
        await asyncio.sleep(short_lease / 3)
    assert await asyncio.to_thread(wait_until_blocking, lambda: running(tenant=1) == 0)  # no longer renewed: it expires
    assert not await backend.renew("kept", 1, 10, short_lease), "an expired lease is not brought back"
    assert not await backend.renew("never-admitted", 1, 10, short_lease)
