"""http tools in a server's resolved catalog: listed like other kinds, resolved to their webhook, kept current."""

from __future__ import annotations

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.definitions.targets import HttpTarget
from mcp_app.models import McpServer, Tool, Webhook

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OUTPUT = {"type": "object", "properties": {"temp": {"type": "number"}}}


def _server(server):
    return McpServer.objects.get(pk=server.pk)


def test_an_http_tool_is_listed_with_its_schemas_and_resolves_to_its_webhook(server_factory, tool_factory):
    server = server_factory()
    tool = tool_factory(
        server,
        "forecast",
        kind=Tool.Kind.HTTP,
        title="Forecast",
        description="Ask the weather service.",
        input_schema=SCHEMA,
        output_schema=OUTPUT,
        annotations={"readOnlyHint": True},
        task_support="optional",
        binding={"name_override": "weather"},
    )
    webhook = Webhook(tool=tool, url="https://hooks.example.com/w", method="PUT", headers={"X-Team": "a"})
    webhook.set_secret_headers({"Authorization": "Bearer z"})
    webhook.save()
    catalog = resolve_catalog(_server(server))
    assert catalog.wire("tools") == [
        {
            "name": "weather",
            "title": "Forecast",
            "description": "Ask the weather service.",
            "inputSchema": SCHEMA,
            "outputSchema": OUTPUT,
            "annotations": {"readOnlyHint": True},
        }
    ]
    descriptor = catalog.tool("weather")
    assert descriptor.task_support == "optional"
    target = descriptor.target
    assert isinstance(target, HttpTarget)
    assert (target.url, target.method, target.headers, target.timeout_seconds) == (
        "https://hooks.example.com/w",
        "PUT",
        (("X-Team", "a"),),
        None,
    )
    assert target.secret_headers == webhook.secret_headers_encrypted
    assert "Bearer z" not in repr(catalog)


def test_an_http_tool_without_a_webhook_is_left_out(server_factory, tool_factory):
    server = server_factory()
    tool_factory(server, "orphan", kind=Tool.Kind.HTTP)
    assert resolve_catalog(_server(server)).wire("tools") == []


def test_editing_the_webhook_bumps_the_catalog_version(server_factory, tool_factory):
    server = server_factory()
    tool = tool_factory(server, "forecast", kind=Tool.Kind.HTTP)
    webhook = Webhook.objects.create(tool=tool, url="https://hooks.example.com/a")
    before = _server(server)
    assert resolve_catalog(before).tool("forecast").target.url == "https://hooks.example.com/a"
    webhook.url = "https://hooks.example.com/b"
    webhook.save()
    after = _server(server)
    assert after.catalog_version == before.catalog_version + 1
    assert resolve_catalog(after).tool("forecast").target.url == "https://hooks.example.com/b"
    webhook.delete()
    assert resolve_catalog(_server(server)).tool("forecast") is None


def test_a_grant_can_name_an_http_tool(server_factory, tool_factory):
    """A grant selects catalog rows: an http tool carries its row id like the other kinds, so it can be granted."""
    from mcp_app.models.agents import CatalogGrant

    server = server_factory()
    forecast = tool_factory(server, "forecast", kind=Tool.Kind.HTTP, input_schema=SCHEMA)
    Webhook.objects.create(tool=forecast, url="https://hooks.example.com/w")
    tool_factory(server, "other", kind=Tool.Kind.HTTP, input_schema=SCHEMA, position=1)
    Webhook.objects.create(tool=Tool.objects.get(name="other"), url="https://hooks.example.com/o")
    view = resolve_catalog(_server(server), grant=CatalogGrant(tools=frozenset({forecast.pk})))
    assert [tool.name for tool in view.tools] == ["forecast"]
