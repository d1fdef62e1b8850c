"""Two import cycles of issue 8 stay gone: the response writer knows the ASGI ``send``, not the consumer, and the
task rules know the ``ToolRunner`` port, not the inline runner (which uses them). Checked on the real import
graph (grimp, as import-linter builds it), lazy and ``TYPE_CHECKING`` imports included."""

from __future__ import annotations

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("mcp_app", cache_dir=None)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("mcp_app.transport.writer", "mcp_app.transport.consumer"),
        ("mcp_app.transport.streams", "mcp_app.transport.consumer"),
        ("mcp_app.transport.backchannel", "mcp_app.transport.consumer"),
        ("mcp_app.runtime.tasks", "mcp_app.runtime.execution"),
        ("mcp_app.protocol.serving", "mcp_app.transport.consumer"),
    ],
)
def test_no_chain_back(graph: grimp.ImportGraph, importer: str, imported: str) -> None:
    assert graph.find_shortest_chain(importer=importer, imported=imported) is None
