"""Limits that keep one tenant or agent from starving the others, fleet-wide (docs/limits.md).

- ``rates``: request rates per tenant, agent and tool (token buckets; 429 with ``Retry-After``);
- ``caps``: concurrent streams (leases) and live sessions per tenant and agent, and the process's guard on file
  descriptors (503 before they run out); running inline tasks are capped where their rows are written
  (``ToolTask.objects.check_inline_cap``);
- ``bruteforce``: failed authentication throttled per source address and per token prefix (never a valid token),
  a negative cache of unknown token prefixes, sampled failure logs;
- ``quotas``: leases, the slots of running worker calls (their admission, ``workers.admission``) and of streams.

The edge asks them all through one ``admit.admit(caller, ...)``: a ``Refusal`` (error, HTTP status,
``Retry-After``) or ``None``.

Each has an in-process backend (the embedded default) and a Redis backend shared by every process, named backends
of ``mcp_app.backends`` (``mcp_host.settings`` chooses the Redis ones whenever ``REDIS_URL`` is set). Nothing here
imports ``mcp_app.workers`` (an import-linter contract). Limits come from the cached token snapshot and
catalog (``mcp_app.caching.identity``, ``mcp_app.catalog``) and the settings: never a query on the request path.
"""
