from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "mcp_app.contrib.demo"
    label = "mcp_demo"
    verbose_name = "MCP demo content"
