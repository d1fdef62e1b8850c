"""``ENGINE = "mcp_app.database"``: Django's PostgreSQL backend that refuses new connections at once while the
database failed moments ago (``database_health``, see ``mcp_app.database``), and records each failure and
success of opening one. Everything else is Django's."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from . import database_health


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        if database_health.refusing():
            # Django turns this into its OperationalError, as it does psycopg's own.
            raise self.Database.OperationalError("the database failed moments ago; refusing until it is retried")
        try:
            connection = super().get_new_connection(conn_params)
        except self.Database.OperationalError as error:  # refused, unreachable, or no pooled connection in time
            database_health.failed(error)
            raise
        database_health.succeeded()
        return connection
