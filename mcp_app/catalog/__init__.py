"""What a server exposes: the code registry of Python tools and the resolution of a server's catalog.

``registry`` holds ``@tool`` functions from every installed app's ``mcp_tools`` module. ``resolve_catalog``
turns a server's database bindings into a ``protocol.context.ServerCatalog``, cached per process and keyed by
the server's catalog version.
"""

from ..definitions.registry import prompt, registry, resource, tool

__all__ = ["prompt", "registry", "resource", "tool"]
