"""Settings of the daphne processes the end-to-end tests start: the reference deployment's, plus one test-only
middleware.

A daphne started once per test session outlives many tests, and pytest-django empties the database after each
transactional test and re-creates the content types with new primary keys. Django caches content types per
process forever (they never change in a real deployment), so the admin's change log of a later test would name
a content type id that no longer exists (a foreign-key error, a 500). ``FreshContentTypes`` forgets that cache
before each request. The test-only tools (``tests.tools``) are registered too (``tests.e2e.tools_app``), for
daphne and for the Celery workers of ``tests/e2e/test_workers.py``; nothing else differs from
``mcp_host.settings``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_host.settings import *  # noqa: F403
from mcp_host.settings import INSTALLED_APPS, MIDDLEWARE


class FreshContentTypes:
    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        from django.contrib.contenttypes.models import ContentType

        ContentType.objects.clear_cache()
        return self.get_response(request)


MIDDLEWARE = ["tests.e2e.daphne_settings.FreshContentTypes", *MIDDLEWARE]

# The test-only tools (worker tools among them), in daphne and in the Celery workers the tests start.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.e2e.tools_app.TestToolsConfig"]
