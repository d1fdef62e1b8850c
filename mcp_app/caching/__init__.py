"""Per-process caches of the request path and what keeps them true.

- ``identity``: tokens (with agent, tenant, server scope and grant), servers (with tenant) and sessions, as
  immutable snapshots loaded by the ORM on a miss.
- ``writebehind``: last-used stamps and session activity, buffered and written off the request path.
- ``signals``: model signals that turn every change of those rows into invalidation keys.

What keeps them true is ``mcp_app.invalidation``: the log every process follows (in-process, Redis stream, or a
database table) and the health rule that makes caches step aside when the log cannot be followed. It lies below
the models (whose verbs publish to it), these caches above them (they load from them).

The catalog cache itself lives in ``mcp_app.catalog.resolver``; it is keyed by the server's catalog version,
which comes from the cached server snapshot, so it needs no invalidation of its own.
"""
