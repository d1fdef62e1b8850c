"""Test processes of one run (pytest-xdist) share PostgreSQL and Redis but never each other's data.

pytest-django gives each xdist worker a database of its own (``test_…_gw0``, ``test_…_gw1``); this plugin does the
same for Redis: worker ``gwN`` uses the configured Redis database number + N, so server ids, caches, channel
groups, event stores and rate-limit buckets of two workers never meet. It is loaded with ``-p`` (pyproject's
``addopts``) because it must rewrite ``REDIS_URL`` before pytest-django loads the settings, which happens before
any conftest is imported. Without xdist, or without ``REDIS_URL``, it does nothing.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # Redis's default `databases`


def worker_redis_url(url: str, worker: str) -> str:
    """``url`` moved to the database of xdist worker ``worker`` (``gw0`` keeps it)."""
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    database = base + index
    if database >= REDIS_DATABASES:
        raise RuntimeError(f"xdist worker {worker} needs Redis database {database}: lower the base in REDIS_URL")
    return urlunsplit(parts._replace(path=f"/{database}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], _worker)
