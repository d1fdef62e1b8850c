"""The pure protocol core: JSON-RPC 2.0 and MCP rules in plain Python.

This package imports nothing from Django, Channels, Celery or DRF (a test enforces it). It receives parsed
messages plus a ``RequestContext`` and returns wire-ready dictionaries. Everything below it (catalog, runtime)
is reached through the small interfaces in ``protocol.ports`` and ``protocol.context``.
"""
