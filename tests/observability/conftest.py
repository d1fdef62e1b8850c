"""Observability tests drive the real router and consumer; rows must be committed for the consumer's threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def access(transactional_db: Any, access_factory: Callable[..., Any]) -> Any:
    return access_factory()
