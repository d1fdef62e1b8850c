"""Idempotent creation of the ``conformance`` server: the demo tenant's endpoint for the MCP conformance suite.

``ensure_conformance`` leaves the tenant ``demo`` with a server ``conformance`` that speaks every revision, allows
the default deployment's loopback origins (plus any given) and exposes, in this module's order, the fixture tools,
resources and prompts (brought back to these definitions on every call; the first tool succeeds with ``{}``, as
the suite's header probes require). The fixtures' code is this app's ``mcp_tools``, which must be installed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from mcp_app.definitions.registry import registry
from mcp_app.models import McpServer, Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tenant, Tool
from mcp_app.protocol.versions import ALL_VERSIONS

from .mcp_tools import PNG_BASE64

SERVER_ID = "conformance"
DEFAULT_ORIGINS = ("http://127.0.0.1:8000", "http://localhost:8000")
INSTRUCTIONS = (
    "Conformance fixtures of mcp-host: the tools, prompts and resources that the MCP conformance suite "
    "(@modelcontextprotocol/conformance) exercises. Not meant for real work."
)

# Python tools, in tools/list order; the first must succeed with {}. json_schema_2020_12_tool (static) follows.
PYTHON_TOOLS = (
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_error_handling",
    "test_tool_with_progress",
    "test_tool_with_logging",
    "test_logging_tool",
    "test_streaming_elicitation",
    "test_missing_capability",
    "test_trigger_tool_change",
    "test_trigger_prompt_change",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_tampered_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_capabilities",
    "test_header_param",
)
LEGACY_TOOLS = (
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "test_reconnection",
)
# Tasks extension fixtures (tasks-* scenarios), listed after everything else.
TASK_TOOLS = (
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
)

# Kept verbatim on the wire (JSON Schema 2020-12 keywords the suite looks for), hence a static tool.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
STATIC_TOOLS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "json_schema_2020_12_tool",
        {
            "description": "Takes arguments described with JSON Schema 2020-12 keywords ($defs, $ref, if/then/else).",
            "input_schema": JSON_SCHEMA_2020_12,
            "static_result": {"content": [{"type": "text", "text": "JSON Schema 2020-12 arguments accepted."}]},
        },
    ),
)

# Static resources, in resources/list order: the suite reads the first listed one, so static-text leads.
RESOURCES: tuple[dict[str, Any], ...] = (
    {
        "uri": "test://static-text",
        "name": "static-text",
        "description": "A static text resource.",
        "mime_type": "text/plain",
        "text": "This is the content of the static text resource.",
    },
    {
        "uri": "test://static-binary",
        "name": "static-binary",
        "description": "A static binary resource (a 1x1 PNG).",
        "mime_type": "image/png",
        "blob": PNG_BASE64,
    },
    {
        "uri": "test://watched-resource",
        "name": "watched-resource",
        "description": "A resource clients may subscribe to.",
        "mime_type": "text/plain",
        "text": "Watched resource content",
    },
    {
        "uri": "test://template/{id}/data",
        "is_template": True,
        "name": "template",
        "description": "Data for any id (a URI template).",
        "mime_type": "application/json",
        "text": '{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}',
    },
)

PROMPTS = (
    "test_simple_prompt",
    "test_prompt_with_arguments",
    "test_prompt_with_embedded_resource",
    "test_prompt_with_image",
    "test_input_required_result_prompt",
)


def _check_registered() -> None:
    missing = [name for name in (*PYTHON_TOOLS, *LEGACY_TOOLS, *TASK_TOOLS) if registry.get(name) is None]
    missing += [name for name in PROMPTS if registry.prompt(name) is None]
    if missing:
        raise ImproperlyConfigured(
            f"conformance fixtures are not registered ({', '.join(missing)}): "
            'add "mcp_app.contrib.conformance" to INSTALLED_APPS'
        )


@transaction.atomic
def ensure_conformance(extra_origins: Iterable[str] = ()) -> McpServer:
    """The demo tenant's ``conformance`` server with every fixture bound, allowing ``extra_origins`` too."""
    _check_registered()
    tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
    tenant.allow_python_tools([*PYTHON_TOOLS, *LEGACY_TOOLS, *TASK_TOOLS])
    server, _ = McpServer.objects.get_or_create(
        server_id=SERVER_ID,
        defaults={
            "tenant": tenant,
            "name": SERVER_ID,
            "title": "mcp-host conformance fixtures",
            "instructions": INSTRUCTIONS,
            "protocol_versions": list(ALL_VERSIONS),
            "allowed_origins": list(DEFAULT_ORIGINS),
        },
    )
    if server.tenant_id != tenant.pk:
        raise RuntimeError(f"the server id {SERVER_ID!r} is taken by another tenant")
    origins = list(dict.fromkeys([*server.allowed_origins, *DEFAULT_ORIGINS, *extra_origins]))
    if origins != server.allowed_origins or server.protocol_versions != list(ALL_VERSIONS):
        server.allowed_origins = origins
        server.protocol_versions = list(ALL_VERSIONS)
        server.save(update_fields=["allowed_origins", "protocol_versions", "updated_at"])

    # Python tools, then the static one (with its fields), then the legacy and task fixtures.
    rows = [
        *((name, None) for name in PYTHON_TOOLS),
        *STATIC_TOOLS,
        *((name, None) for name in LEGACY_TOOLS + TASK_TOOLS),
    ]
    for position, (name, fields) in enumerate(rows):
        defaults = {"kind": Tool.Kind.STATIC, **fields} if fields else {"kind": Tool.Kind.PYTHON, "python_name": name}
        tool, _ = Tool.objects.update_or_create(tenant=tenant, name=name, defaults=defaults)
        ServerTool.objects.update_or_create(server=server, tool=tool, defaults={"position": position, "enabled": True})

    for position, fields in enumerate(RESOURCES):
        values = {"is_template": False, "text": "", "blob": "", **fields}
        resource, _ = Resource.objects.update_or_create(
            tenant=tenant, uri=values.pop("uri"), defaults={"kind": Resource.Kind.STATIC, **values}
        )
        ServerResource.objects.update_or_create(
            server=server, resource=resource, defaults={"position": position, "enabled": True}
        )

    for position, name in enumerate(PROMPTS):
        prompt, _ = Prompt.objects.update_or_create(
            tenant=tenant, name=name, defaults={"kind": Prompt.Kind.PYTHON, "python_name": name}
        )
        ServerPrompt.objects.update_or_create(
            server=server, prompt=prompt, defaults={"position": position, "enabled": True}
        )
    server.refresh_from_db()
    return server
