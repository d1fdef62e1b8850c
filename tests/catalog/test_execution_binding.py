"""Execution mode and timeout of tool bindings: ``@tool(execution=, timeout=)`` defaults, ``ServerTool``
overrides, carried by the resolved ``ToolDescriptor``."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.catalog import tool
from mcp_app.catalog.resolver import build_catalog
from mcp_app.definitions.registry import build_registered_tool
from mcp_app.models import ServerTool

pytestmark = pytest.mark.django_db


def test_a_python_tool_declares_its_default_execution_and_timeout() -> None:
    def job() -> str:
        return "x"

    registered = build_registered_tool(job, execution="worker", timeout=42)
    assert (registered.execution, registered.timeout) == ("worker", 42.0)
    assert build_registered_tool(job).execution == "inline"
    with pytest.raises(ValueError, match="execution"):
        build_registered_tool(job, execution="elsewhere")
    with pytest.raises(ValueError, match="timeout"):
        build_registered_tool(job, timeout=0)
    assert callable(tool)


def test_bindings_take_the_tools_default_unless_they_override_it(server_factory: Any, tool_factory: Any) -> None:
    server = server_factory()
    tool_factory(server, "worker_job", position=0)  # @tool(execution="worker", timeout=120)
    tool_factory(server, "echo", position=1)
    tool_factory(server, "progress_demo", position=2, binding={"execution": "worker", "timeout_seconds": 7})
    tool_factory(server, "canned", position=3, static_result={"content": []}, binding={"execution": "worker"})
    catalog = build_catalog(server)
    got = {descriptor.name: (descriptor.execution, descriptor.timeout) for descriptor in catalog.tools}
    assert got == {
        "worker_job": ("worker", 120.0),
        "echo": ("inline", None),
        "progress_demo": ("worker", 7.0),
        "canned": ("worker", None),
    }
    ServerTool.objects.filter(server=server, tool__name="worker_job").update(execution="inline", timeout_seconds=3)
    inline = build_catalog(server).tool("worker_job")
    assert inline is not None and (inline.execution, inline.timeout) == ("inline", 3.0)
