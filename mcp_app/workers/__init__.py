"""Worker calls: tool calls that run on Celery workers (``execution="worker"``), with the same context as inline.

- ``runner.RoutingRunner``: the ``ToolRunner`` the serving process uses (worker tools dispatched, others inline);
- ``execute``: running one call where it runs (a worker, or the serving process without a broker);
- ``records``: what of the durable record is the workers' (``call_spec``; its state changes are ``ToolTask.objects``');
- ``tasks``: the Celery tasks (``run_tool_call``, the reaper ``reap_worker_calls``);
- ``quotas`` / ``admission``: per-tenant and per-agent concurrency limits (leases in Redis or in memory).

See docs/workers.md for the design and the settings.
"""
