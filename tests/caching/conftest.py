"""The transport fixtures (committed rows, the ORM from async tests), for the caches tested at the wire."""

from tests.helpers import (  # noqa: F401  (fixtures)
    close_connections_of_async_threads,
    make_access,
    orm,
)
