"""Probes the way an operator's orchestrator runs them, for the end-to-end tests: ``Prober`` polls ``/readyz`` and
``/healthz`` of a running daphne every ``PROBE_PERIOD_SECONDS`` (a Kubernetes probe's ``periodSeconds``) with a
short timeout, keeping every answer; ``database_connections`` counts a process's PostgreSQL connections in
``pg_stat_activity`` by the ``application_name`` it was started with.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from tests.e2e.workers import WAIT

PROBE_PERIOD_SECONDS = 1.0  # Kubernetes' periodSeconds
PROBE_TIMEOUT_SECONDS = 3.0  # above HEALTH_CHECK_TIMEOUT_SECONDS (2 s): a down dependency still answers in time


class Prober:
    """Polls ``/readyz`` and ``/healthz`` every ``PROBE_PERIOD_SECONDS`` until stopped; keeps every answer."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.answers: list[tuple[str, int, Any]] = []
        self._probed = asyncio.Condition()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_SECONDS) as http:
            while not self._stop.is_set():
                for path in ("/readyz", "/healthz"):
                    try:
                        reply = await http.get(f"{self.base}{path}")
                        self.answers.append((path, reply.status_code, reply.json()))
                    except httpx.HTTPError as exc:
                        self.answers.append((path, 0, type(exc).__name__))
                async with self._probed:
                    self._probed.notify_all()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), PROBE_PERIOD_SECONDS)

    def __enter__(self) -> Prober:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self, after: int = 0) -> list[tuple[str, int, Any]]:
        """Stop once at least ``after`` rounds of probes have answered (bounded by ``WAIT``)."""
        async with asyncio.timeout(WAIT), self._probed:
            await self._probed.wait_for(lambda: len(self.answers) >= 2 * after)
        self._stop.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, WAIT)
        return self.answers

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def failed(answers: list[tuple[str, int, Any]]) -> list[tuple[str, int, Any]]:
    return [answer for answer in answers if answer[1] != 200]


def database_connections(application_name: str) -> int:
    """How many connections to the test database carry ``application_name`` (read with a connection of its
    own, outside Django's, so that the count never includes the reader)."""
    import psycopg
    from django.db import connection

    database = connection.settings_dict
    params = {key: database[name] for key, name in (("host", "HOST"), ("port", "PORT"), ("user", "USER"))}
    params = {key: value for key, value in params.items() if value}
    if database.get("PASSWORD"):
        params["password"] = database["PASSWORD"]
    with psycopg.connect(dbname=database["NAME"], autocommit=True, **params) as reader:
        row = reader.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [application_name]
        ).fetchone()
    return int(row[0]) if row else 0
