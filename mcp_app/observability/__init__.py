"""Operations: metrics, per-request log context, health and readiness, traces.

Hooks for other modules, cheap enough for the request path: ``metrics.record_*`` and friends, ``logging.bind``,
``tracing.active()`` (the live tracing or ``None``, then nothing of OpenTelemetry is imported). ``asgi.instrument``
wraps the MCP consumer; ``endpoints`` serves ``/healthz``, ``/readyz`` and ``/metrics``.
"""
