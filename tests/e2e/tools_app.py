"""An app of the end-to-end daphne and worker processes that registers the test-only tools (``tests.tools``)."""

from __future__ import annotations

from django.apps import AppConfig


class TestToolsConfig(AppConfig):
    name = "tests.e2e"
    label = "e2e_test_tools"

    def ready(self) -> None:
        import tests.tools  # noqa: F401  (registers the test-only tools, worker tools included)
