"""Form fields built from a tool's input schema for "Try it" (``schema_fields``, ``arguments_from``), and the
schemas a tool really has (``python_schemas``, ``effective_input_schema``). A convenience, not the check: the tool
validates its arguments when it runs (docs/admin.md, "Try it").
"""

from __future__ import annotations

from typing import Any

from django import forms
from unfold.widgets import (
    UnfoldAdminIntegerFieldWidget,
    UnfoldAdminSelectWidget,
    UnfoldAdminTextInputWidget,
    UnfoldBooleanSwitchWidget,
)

from ..definitions.registry import registry
from ..models import Tool
from .base import PrettyJSONField

ARG_PREFIX = "arg__"
_MISSING = object()


def python_schemas(tool: Tool) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The input and output schemas a Python tool really has: derived by the registry from its type hints."""
    registered = registry.get(tool.python_name or tool.name)
    if registered is None:
        return None, None
    return registered.input_schema, registered.output_schema


def effective_input_schema(tool: Tool) -> dict[str, Any]:
    """The input schema clients see for ``tool`` (a Python tool's derived one, else the stored one)."""
    if tool.kind == Tool.Kind.PYTHON:
        return python_schemas(tool)[0] or {}
    return tool.input_schema or {}


def _kind(prop: dict[str, Any]) -> str | None:
    kind = prop.get("type")
    if isinstance(kind, list):
        concrete = [k for k in kind if k != "null"]
        kind = concrete[0] if len(concrete) == 1 else None
    return kind if isinstance(kind, str) else None


def _field(name: str, prop: dict[str, Any], required: bool) -> forms.Field:
    label = str(prop.get("title") or name)
    help_text = str(prop.get("description") or "")
    if required:
        help_text = f"{help_text} (required)".strip()
    options: dict[str, Any] = {"label": label, "help_text": help_text, "required": False}
    if "default" in prop:
        options["initial"] = prop["default"]
    kind = _kind(prop)
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(value, str) for value in enum):
        return forms.ChoiceField(
            choices=[("", "—"), *((v, v) for v in enum)], widget=UnfoldAdminSelectWidget, **options
        )
    if kind == "string":
        return forms.CharField(
            max_length=prop.get("maxLength"), strip=False, widget=UnfoldAdminTextInputWidget, **options
        )
    if kind in ("integer", "number"):
        number = forms.IntegerField if kind == "integer" else forms.FloatField
        bounds: dict[str, Any] = {"min_value": prop.get("minimum"), "max_value": prop.get("maximum")}
        return number(widget=UnfoldAdminIntegerFieldWidget, **bounds, **options)
    if kind == "boolean":
        return forms.BooleanField(widget=UnfoldBooleanSwitchWidget, **options)
    return PrettyJSONField(**options)


def _properties(schema: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """An object schema's top-level properties and the names it requires (none when it has no properties)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}, set()
    return properties, set(schema.get("required") or [])


def schema_fields(schema: dict[str, Any]) -> dict[str, forms.Field]:
    """A form field per top-level property of an object schema, in the schema's order."""
    properties, required = _properties(schema)
    return {
        f"{ARG_PREFIX}{name}": _field(name, prop if isinstance(prop, dict) else {}, name in required)
        for name, prop in properties.items()
    }


def arguments_from(schema: dict[str, Any], cleaned: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments from the cleaned data (empty optional fields left out), and errors of required ones left empty."""
    properties, required = _properties(schema)
    arguments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, prop in properties.items():
        field = f"{ARG_PREFIX}{name}"
        value = cleaned.get(field, _MISSING)
        kind = _kind(prop) if isinstance(prop, dict) else None
        if kind == "boolean":
            empty = value is _MISSING  # an unticked switch is false, not left out
        else:  # an empty text is an empty string only where one is required
            empty = value in (_MISSING, None) or (value == "" and (kind != "string" or name not in required))
        if empty:
            if name in required:
                errors[field] = "This argument is required."
            continue
        arguments[name] = value
    return arguments, errors
