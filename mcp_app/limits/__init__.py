"""Limits that keep one tenant or agent from starving the others, fleet-wide (docs/limits.md, docs/quotas.md).

- ``rates``: request rates per tenant, agent and tool (token buckets; 429 with ``Retry-After``);
- ``caps``: concurrent streams and live sessions per tenant and agent, and the file-descriptor guard (503);
- ``bruteforce``: failed authentication throttled per source address and per token prefix, a negative cache;
- ``quotas``: leases, the slots of running worker calls (admitted by ``workers.admission``) and of streams;
- ``admit``: the one question the edge asks them all, ``admit(caller, ...)``: a ``Refusal`` or ``None``.

Each has an in-process backend and a Redis one, named backends of ``mcp_app.backends``. Nothing here imports
``mcp_app.workers`` (an import-linter contract). Limits come from the cached token snapshot and catalog and the
settings: never a query on the request path.
"""
