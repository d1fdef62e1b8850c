"""The code registry: schemas derived from type hints, output wrapping, registration rules, autodiscovery."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
import pytest
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from mcp_app.definitions.registry import ToolRegistry, build_registered_tool, registry
from mcp_app.runtime import ToolContext


def test_demo_and_test_tools_are_autodiscovered():
    assert {"echo", "add", "get_time", "progress_demo"} <= set(registry.names())


def test_input_schema_from_type_hints_is_closed_and_described():
    def search(
        query: Annotated[str, Field(description="What to look for.")],
        ctx: ToolContext,
        limit: int = 10,
        tags: list[str] | None = None,
    ) -> str:
        return query

    registered = build_registered_tool(search)
    schema = registered.input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string", "description": "What to look for."}
    assert schema["properties"]["limit"] == {"type": "integer", "default": 10}
    assert "ctx" not in schema["properties"]
    assert "title" not in schema
    assert registered.context_parameter == "ctx"
    assert registered.output_schema is None


def test_no_parameters_still_has_properties():
    registered = build_registered_tool(lambda: "x", name="noop")
    assert registered.input_schema["properties"] == {}


class Point(TypedDict):
    x: int
    y: int


class Model(pydantic.BaseModel):
    name: str


def test_scalar_return_is_wrapped_object_return_is_not():
    def count() -> int:
        return 1

    def point() -> Point:
        return {"x": 1, "y": 2}

    def model() -> Model:
        return Model(name="a")

    assert build_registered_tool(count).output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    assert build_registered_tool(count).wraps_output is True
    assert build_registered_tool(point).output_schema["properties"] == {
        "x": {"type": "integer"},
        "y": {"type": "integer"},
    }
    assert build_registered_tool(point).wraps_output is False
    assert build_registered_tool(model).output_schema["required"] == ["name"]


def test_docstring_is_the_default_description():
    def documented() -> str:
        """Does a thing."""
        return ""

    assert build_registered_tool(documented).description == "Does a thing."
    assert build_registered_tool(documented, description="Override").description == "Override"


def test_varargs_cannot_be_tools():
    def loose(*args: Any) -> str:
        return ""

    with pytest.raises(TypeError, match="args"):
        build_registered_tool(loose)


def test_name_clash_with_a_different_function_is_refused():
    local = ToolRegistry()

    def one() -> str:
        return "1"

    def two() -> str:
        return "2"

    local.register(build_registered_tool(one, name="same"))
    local.register(build_registered_tool(one, name="same"))  # re-registering the same function is harmless
    with pytest.raises(ValueError, match="already registered"):
        local.register(build_registered_tool(two, name="same"))
    assert local.names() == ["same"]
