"""Observability tests drive the real router and consumer; rows must be committed for the consumer's threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def access(transactional_db: Any, access_factory: Callable[..., Any]) -> Any:
    return access_factory()


from tests.helpers import close_connections_of_async_threads  # noqa: E402, F401  (same clean-up here)
from tests.webhook_server import webhook_server  # noqa: E402, F401  (fixture: a real HTTP server on 127.0.0.1)
