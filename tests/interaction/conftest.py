"""Wire-level feature tests (the python-sdk's ``tests/interaction/`` layout): one directory per feature, each
driving the real router and consumer in-process with the shared fixtures of ``tests/helpers.py``."""

from __future__ import annotations

from tests.helpers import (  # noqa: F401  (fixtures)
    access,
    close_connections_of_async_threads,
    make_access,
    orm,
    worker_calls_drained,
)
from tests.webhook_server import webhook_server  # noqa: F401  (fixture: a real HTTP server on 127.0.0.1)
