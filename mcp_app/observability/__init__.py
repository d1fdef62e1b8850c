"""Operations: metrics, per-request log context, health and readiness, traces.

Hooks for other modules (all cheap enough for the request path):

- ``metrics.record_cache(cache, hit)``, ``metrics.record_dependency_error(dependency)``,
  ``metrics.record_exception(exc)``, ``metrics.worker_call(state, delta)``, ``metrics.record_tool_call(...)``;
- ``logging.bind(tenant=..., server=..., agent=..., method=..., era=...)`` for the current request's log lines;
- ``tracing.active()``: the live OpenTelemetry tracing (``otel.Tracing``) when ``MCP_APP["TRACING"]`` is on, else
  ``None`` (then nothing of OpenTelemetry is imported).

``asgi.instrument`` wraps the MCP consumer; ``endpoints`` serves ``/healthz``, ``/readyz`` and ``/metrics``.
"""
