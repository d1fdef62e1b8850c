"""An agent token's grant applied to a server's catalog: the one place where grants are enforced.

``granted_catalog(server, catalog, grant)`` is the view a token holding ``grant`` may see, cached per process;
it keeps the whole catalog as ``unrestricted``, to tell withheld entries from names that do not exist. Why
rows and not names, and what each method shows: docs/audit.md ("Grants").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Hashable, Sequence
from typing import Any

from ..conf import mcp_settings
from ..models.agents import CatalogGrant
from ..protocol.descriptors import ServerCatalog, ToolDescriptor


class CatalogLru:
    """A thread-safe LRU of catalogs, holding at most ``CATALOG_CACHE_SIZE`` of them."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, ServerCatalog] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> ServerCatalog | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, catalog: ServerCatalog) -> None:
        with self._lock:
            self._entries[key] = catalog
            self._entries.move_to_end(key)
            while len(self._entries) > mcp_settings.CATALOG_CACHE_SIZE:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


views = CatalogLru()  # granted_catalog's, by (server pk, catalog version, server creation time, grant)


def _tool_allowed(tool: ToolDescriptor, grant: CatalogGrant) -> bool:
    if grant.tools is not None and tool.ref not in grant.tools:
        return False
    return not grant.read_only or bool((tool.annotations or {}).get("readOnlyHint") is True)


def _granted(items: Sequence[Any], refs: Collection[int] | None) -> Sequence[Any]:
    """The entries whose row ``refs`` names (``None``: this kind is not limited)."""
    return items if refs is None else tuple(item for item in items if item.ref in refs)


def granted_catalog(server: Any, catalog: ServerCatalog, grant: CatalogGrant) -> ServerCatalog:
    """The part of ``catalog`` that ``grant`` allows, cached per process; ``server`` is the row ``catalog`` was
    resolved for."""
    if grant.is_full:
        return catalog
    key = (server.pk, server.catalog_version, server.created_at, grant)
    view = views.get(key)
    if view is None:
        view = ServerCatalog(
            tools=tuple(tool for tool in catalog.tools if _tool_allowed(tool, grant)),
            resources=_granted(catalog.resources, grant.resources),
            templates=_granted(catalog.templates, grant.resources),
            prompts=_granted(catalog.prompts, grant.prompts),
            unrestricted=catalog.unrestricted or catalog,
        )
        views.put(key, view)
    return view
