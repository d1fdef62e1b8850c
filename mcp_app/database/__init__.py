"""Living with PostgreSQL: a bounded pool of connections per process, bounded waits, fast refusals while the
database is unavailable, and what "unavailable" means (docs/deployment.md, "PostgreSQL connections and bounds").

- ``ENGINE = "mcp_app.database"``, ``OPTIONS = postgres_options(...)`` and ``CONN_MAX_AGE = 0`` is how a project
  should configure PostgreSQL: a psycopg pool of at most ``pool_size`` connections per process, timeouts for the
  connect, the pool, each statement and each wait for the server, and TCP keep-alives.
- ``database_health``: once opening a connection failed or a wait passed its bound, the backend
  (``mcp_app.database.base``) refuses new connections at once for ``RETRY_AFTER_SECONDS``; a busy pool is load,
  not a failure.
- ``DATABASE_ERRORS``: the exceptions that mean "the database is unavailable", answered 503 with ``Retry-After``
  by the front doors; ``log_failure`` logs a background loop's failure as one line without traceback.

Not owned here: the settings themselves (the project's ``DATABASES``), which queries are made.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from django.db import InterfaceError, OperationalError

from ..protocol.errors import DatabaseUnavailable

DATABASE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
RETRY_AFTER_SECONDS = DatabaseUnavailable.retry_after_seconds  # the refusal window, and every 503's Retry-After
STATEMENT_TIMEOUT_OPTION = "-c statement_timeout="
# TCP keep-alives: first probe after 10 s idle, then every 5 s, 3 unanswered: a dead peer is noticed in ~25 s.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}

logger = logging.getLogger("mcp_app.database")


class DatabaseHealth:
    """Whether the database failed moments ago; shared by every thread of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.refuse_until = 0.0

    def failed(self, error: BaseException) -> None:
        with self._lock:
            if self.refuse_until == 0.0:
                logger.warning("database unavailable (%s): refusing for %s s at a time", error, RETRY_AFTER_SECONDS)
            self.refuse_until = time.monotonic() + RETRY_AFTER_SECONDS

    def succeeded(self) -> None:
        if self.refuse_until:
            with self._lock:
                self.refuse_until = 0.0
            logger.info("database available again")

    def refusing(self) -> bool:
        return time.monotonic() < self.refuse_until


database_health = DatabaseHealth()


def log_failure(log: logging.Logger, message: str, *args: Any) -> None:
    """In an ``except`` block of a background loop: the database being unavailable is one warning line naming
    the error (the loop retries; a traceback per tick would flood the log during an outage), anything else is
    logged with its traceback."""
    error = sys.exc_info()[1]
    if isinstance(error, DATABASE_ERRORS):
        log.warning(message + " (the database is unavailable: %s)", *args, error)
    else:
        log.exception(message, *args)


def bounded_connection_class(reply_timeout: float | None) -> type[Any]:
    """The pool's psycopg connection class: opening one records the database's health (a refused or unanswered
    connect makes the process refuse for a moment, a successful one ends that), and every wait for the server
    lasts at most ``reply_timeout`` seconds (``None``: unbounded).

    psycopg >= 3.2's ``Connection.wait`` takes a ``timeout`` and raises ``psycopg.errors._WaitTimeout`` past it
    (psycopg's only door for a client-side bound); the class passes the bound on every wait, then closes the
    connection (mid-exchange, its protocol state is unknown) and raises ``OperationalError``. psycopg is imported
    here, not at module level: the embedded default runs without it."""
    import psycopg

    wait_timeout: Any = getattr(psycopg.errors, "_WaitTimeout", None)  # None before psycopg 3.2: no client bound

    class BoundedConnection(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                connection = super().connect(*args, **kwargs)
            except psycopg.OperationalError as error:
                database_health.failed(error)
                raise
            database_health.succeeded()
            return connection

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            bound = reply_timeout if timeout is None else timeout
            if bound is None or wait_timeout is None:
                return super().wait(gen, interval=interval)
            try:
                return super().wait(gen, interval=interval, timeout=bound)
            except wait_timeout as exc:
                self.close()
                error = psycopg.OperationalError(f"the database did not answer within {bound:g} s")
                database_health.failed(error)
                raise error from exc

    return BoundedConnection


def postgres_options(
    *,
    pool_size: int,
    pool_timeout: float,
    connect_timeout: int,
    statement_timeout: float,
    min_size: int = 1,
    max_idle: float = 60.0,
) -> dict[str, Any]:
    """``DATABASES["default"]["OPTIONS"]`` for PostgreSQL (see the module docstring); ``statement_timeout`` 0
    leaves statements and waits unbounded (e.g. for ``manage.py migrate`` on a large table)."""
    options: dict[str, Any] = {"connect_timeout": connect_timeout, **KEEPALIVES}
    pool: dict[str, Any] = {
        "min_size": min(min_size, pool_size),
        "max_size": pool_size,
        "timeout": pool_timeout,
        "max_idle": max_idle,
    }
    if statement_timeout > 0:
        options["options"] = f"{STATEMENT_TIMEOUT_OPTION}{int(statement_timeout * 1000)}"
        options["tcp_user_timeout"] = int((connect_timeout + statement_timeout) * 1000)
    reply_timeout = statement_timeout + connect_timeout if statement_timeout > 0 else None
    pool["connection_class"] = bounded_connection_class(reply_timeout)
    return {**options, "pool": pool}
