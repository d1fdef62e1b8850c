"""A tenant's alert webhook (``BudgetAlertHook``): what it is told, POSTed off the request path.

``send(tenant_pk, payload, outcome)`` (to be called on the ``worker`` thread, e.g. from a job given to
``worker.schedule``) POSTs ``payload`` (a JSON object whose ``"type"`` says what it is: ``budget.alert``,
``catalog.change_held``) to the tenant's active hook, if it has one: signed (``X-MCP-Signature: t=<unix>,v1=<hex
HMAC-SHA256 of "<t>.<body>">``), SSRF-guarded (``outbound.webhook_transport("budget_alert")``), no redirect followed,
``BUDGET_ALERT_TIMEOUT_SECONDS`` per attempt, retried ``BUDGET_ALERT_ATTEMPTS`` times 1 s, 2 s, 4 s… apart until
answered 2xx. ``outcome(attempt, error)`` hears each attempt (``error`` ``None``: delivered); nothing secret is in
an error or a log line. ``worker`` is one daemon thread per process (``mcp-alerts``) running due jobs in order.

Not here: what a payload holds and when it is sent (``limits.budget_alerts``, ``federation.drift``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import heapq
import hmac
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from django.db import connections

from .conf import mcp_settings
from .models import BudgetAlertHook
from .outbound import webhook_transport

logger = logging.getLogger("mcp_app.audit")
SIGNATURE_HEADER = "X-MCP-Signature"

#: Told of each attempt: its number and what went wrong (``None``: answered 2xx).
Outcome = Callable[[int, str | None], None]


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-MCP-Signature`` value of ``body`` sent at ``timestamp`` (see the module docstring)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class Worker:
    """A queue of jobs, each due at a time, run one by one on a daemon thread started with the first job."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None

    def after_fork(self) -> None:
        """A forked child has no thread: it starts its own with its first job; the parent's queue stays the
        parent's."""
        self._due = []
        self._cond = threading.Condition()
        self._busy = False
        self._thread = None

    def schedule(self, delay: float, job: Callable[[], object]) -> None:
        """Run ``job`` on the thread in ``delay`` seconds (constant time, no I/O)."""
        with self._cond:
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), job))
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def wait_idle(self, timeout: float) -> bool:
        """Wait (bounded) until nothing is queued or running: tests, and commands about to exit."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._due or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cond.wait(None if not self._due else self._due[0][0] - time.monotonic())
                job = heapq.heappop(self._due)[2]
                self._busy = True
            try:
                job()
            except Exception:
                logger.exception("an alert could not be handled")
            finally:
                connections.close_all()  # alerts are rare: no connection held between them
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


worker = Worker("mcp-alerts")
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=worker.after_fork)


def longest_delivery() -> float:
    """How long one payload's delivery may take, every attempt failing slowly (a command about to exit waits for
    its alerts this long at most)."""
    attempts = int(mcp_settings.BUDGET_ALERT_ATTEMPTS)
    return attempts * float(mcp_settings.BUDGET_ALERT_TIMEOUT_SECONDS) + float(2 ** max(attempts - 1, 0)) + 1.0


def send(tenant_pk: int, payload: dict[str, Any], outcome: Outcome | None = None) -> bool:
    """POST ``payload`` to the tenant's active hook (on the worker thread); whether it has one."""
    hook = BudgetAlertHook.objects.filter(tenant_id=tenant_pk, is_active=True).first()
    if hook is None:
        return False
    body = json.dumps(payload, separators=(",", ":")).encode()
    _deliver(hook.url, hook.signing_secret(), body, str(payload.get("type", "")), outcome, 1)
    return True


def _deliver(url: str, secret: str, body: bytes, kind: str, outcome: Outcome | None, attempt: int) -> None:
    error = asyncio.run(_post(url, secret, body))
    if outcome is not None:
        try:
            outcome(attempt, error)
        except Exception:
            logger.exception("the outcome of an alert's delivery could not be stored")
    if error is None:
        return
    if attempt < mcp_settings.BUDGET_ALERT_ATTEMPTS:
        retry = functools.partial(_deliver, url, secret, body, kind, outcome, attempt + 1)
        worker.schedule(float(2 ** (attempt - 1)), retry)
    else:
        logger.warning("%s alert not delivered after %s attempts: %s", kind or "an", attempt, error)


async def _post(url: str, secret: str, body: bytes) -> str | None:
    """POST one payload; ``None`` when answered 2xx, else what went wrong (no secret in it)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "mcp-host alerts",
        SIGNATURE_HEADER: sign(secret, int(time.time()), body),
    }
    try:
        async with httpx.AsyncClient(
            transport=webhook_transport("budget_alert"),
            timeout=float(mcp_settings.BUDGET_ALERT_TIMEOUT_SECONDS),
            follow_redirects=False,
        ) as client:
            answer = await client.post(url, content=body, headers=headers)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= answer.status_code < 300 else f"HTTP {answer.status_code}"
