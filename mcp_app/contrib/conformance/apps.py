"""Django app config of the conformance fixtures (see the package docstring)."""

from django.apps import AppConfig


class ConformanceConfig(AppConfig):
    name = "mcp_app.contrib.conformance"
    label = "mcp_conformance"
    verbose_name = "MCP conformance fixtures"
