"""Per-process caches of the request path and what keeps them true (docs/architecture.md).

``identity``: snapshots of tokens, servers and sessions, loaded by the ORM on a miss; ``writebehind``: last-used
stamps and session activity, written off the request path; ``signals``: every change of those rows turned into
invalidation keys for ``mcp_app.invalidation``, which lies below the models (their verbs publish to it), these
caches above them. The catalog cache lives in ``mcp_app.catalog.resolver``, keyed by the catalog version.
"""
