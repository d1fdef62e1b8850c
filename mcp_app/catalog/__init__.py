"""What a server exposes: the resolution of a server's catalog, and the code registry's public names.

``resolve_catalog`` (``catalog.resolver``) turns a server's bindings into a ``ServerCatalog``, cached per catalog
version. ``registry``, ``@tool``, ``@resource`` and ``@prompt`` live in ``mcp_app.definitions.registry`` and are
re-exported here, where tool authors import them from.
"""

from ..definitions.registry import prompt, registry, resource, tool

__all__ = ["prompt", "registry", "resource", "tool"]
