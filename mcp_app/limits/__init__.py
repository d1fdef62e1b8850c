"""Limits that keep one tenant or agent from starving the others, fleet-wide (docs/limits.md, docs/quotas.md).

``rates`` (request rates per tenant, agent and tool), ``caps`` (concurrent streams and live sessions, and the
file-descriptor guard), ``bruteforce`` (failed authentication throttled, a negative cache), ``quotas`` (leases of
worker calls and streams), all asked by the edge through one ``admit.admit(caller, ...)``: a ``Refusal`` or
``None``. Each has an in-process backend and a Redis one (``mcp_app.backends``). What calls spend
(docs/budgets.md): ``usage`` (the seam), ``metering`` (a call's ``Spent``, the usage metrics), ``ledger`` (its
buffer and writer), ``export`` (its rows as JSON and CSV); budgets: ``periods`` (the tenant's day and month),
``budgets`` (admission), ``budget_counters`` (their backends), ``budget_meter`` (ended calls' spending),
``budget_seed`` (a saved budget's counters from the ledger), ``budget_alerts``, ``burndown``. Nothing here imports
``mcp_app.workers`` (an import-linter contract), and no limit costs a query on the request path.
"""
