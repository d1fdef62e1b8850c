"""What a server exposes: the resolution of a server's catalog, and the code registry's public names.

``resolve_catalog`` turns a server's database bindings into a ``protocol.descriptors.ServerCatalog``, cached per
process and keyed by the server's catalog version. ``registry`` (``@tool``, ``@resource``, ``@prompt`` from every
installed app's ``mcp_tools`` module) lives in ``mcp_app.definitions.registry``, below the models that validate
against it; it is re-exported here, where tool authors import it from.
"""

from ..definitions.registry import prompt, registry, resource, tool

__all__ = ["prompt", "registry", "resource", "tool"]
