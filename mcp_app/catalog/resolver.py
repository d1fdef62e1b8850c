"""Resolution of a server's effective catalog from the database and the code registry.

``resolve_catalog(server)`` returns a ``ServerCatalog`` for the server's current ``catalog_version``. Results are
kept in a small per-process LRU keyed by ``(server pk, catalog_version)``: the version is read with the server
row on every request anyway, so an edit in any process is seen by every process on its next request, with no
cache to flush. Bindings to Python tools whose code is no longer registered are left out (and logged).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from ..conf import mcp_settings
from ..models import McpServer, ServerTool, Tool
from ..protocol.context import ServerCatalog, ToolDescriptor
from ..runtime.execution import PythonTarget, StaticTarget
from .registry import registry

logger = logging.getLogger("mcp_app.catalog")

_cache: OrderedDict[tuple[int, int, object], ServerCatalog] = OrderedDict()
_lock = threading.Lock()


def _descriptor(binding: ServerTool) -> ToolDescriptor | None:
    tool = binding.tool
    name = binding.name_override or tool.name
    description = binding.description_override or tool.description or None
    if tool.kind == Tool.Kind.PYTHON:
        registered = registry.get(tool.python_name or tool.name)
        if registered is None:
            logger.warning("server %s binds unregistered python tool %r", binding.server_id, tool.python_name)
            return None
        return ToolDescriptor(
            name=name,
            title=tool.title or registered.title,
            description=description or registered.description or None,
            input_schema=registered.input_schema,
            output_schema=registered.output_schema,
            annotations=tool.annotations or registered.annotations,
            target=PythonTarget(registered),
        )
    schema = tool.input_schema or {"type": "object", "properties": {}}
    return ToolDescriptor(
        name=name,
        title=tool.title or None,
        description=description,
        input_schema=schema,
        output_schema=tool.output_schema,
        annotations=tool.annotations,
        target=StaticTarget(input_schema=schema, result=tool.static_result, error=tool.static_error),
    )


def build_catalog(server: McpServer) -> ServerCatalog:
    bindings = (
        ServerTool.objects.filter(server=server, enabled=True, tool__tenant_id=server.tenant_id)
        .select_related("tool")
        .order_by("position", "id")
    )
    descriptors = [descriptor for binding in bindings if (descriptor := _descriptor(binding)) is not None]
    return ServerCatalog(tools=tuple(descriptors))


def resolve_catalog(server: McpServer) -> ServerCatalog:
    # created_at guards against a primary key reused after deletion (possible on some databases).
    key = (server.pk, server.catalog_version, server.created_at)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    catalog = build_catalog(server)
    with _lock:
        _cache[key] = catalog
        _cache.move_to_end(key)
        while len(_cache) > mcp_settings.CATALOG_CACHE_SIZE:
            _cache.popitem(last=False)
    return catalog


def clear_cache() -> None:
    with _lock:
        _cache.clear()
