"""Per-process caches of the request path and what keeps them true (docs/architecture.md).

- ``identity``: tokens (with agent, tenant, server scope and grant), servers (with tenant) and sessions, as
  immutable snapshots loaded by the ORM on a miss.
- ``writebehind``: last-used stamps and session activity, buffered and written off the request path.
- ``signals``: model signals that turn every change of those rows into invalidation keys.

What keeps them true is ``mcp_app.invalidation``, which lies below the models (whose verbs publish to it), these
caches above them. The catalog cache lives in ``mcp_app.catalog.resolver``, keyed by the server's catalog version.
"""
