"""``ENGINE = "mcp_app.database"``: Django's PostgreSQL backend that refuses new connections at once while the
database failed moments ago (``database_health``, see ``mcp_app.database``: the pool's connection class records
failures and successes). Its connections without a database (creating or dropping one) have no statement
timeout. Everything else is Django's."""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base

from . import STATEMENT_TIMEOUT_OPTION, database_health


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        if self.alias == NO_DB_ALIAS and str(params.get("options", "")).startswith(STATEMENT_TIMEOUT_OPTION):
            # Creating and dropping databases (the test runner, tools): CREATE and DROP DATABASE wait for a
            # checkpoint, which may take longer than a request's statement on a busy server.
            del params["options"]
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        if database_health.refusing():
            # Django turns this into its OperationalError, as it does psycopg's own.
            raise self.Database.OperationalError("the database failed moments ago; refusing until it is retried")
        return super().get_new_connection(conn_params)
