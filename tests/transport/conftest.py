"""Transport tests run the real consumer against a real database; rows must be committed for its threads. The
fixtures are the wire tests' shared ones (``tests/helpers.py``)."""

from __future__ import annotations

from tests.helpers import (  # noqa: F401  (fixtures)
    access,
    close_connections_of_async_threads,
    make_access,
    orm,
    own_channel_layer,
    worker_calls_drained,
)
from tests.webhook_server import webhook_server  # noqa: F401  (fixture: a real HTTP server on 127.0.0.1)
