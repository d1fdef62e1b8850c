"""Prometheus metrics of mcp_app, and the hooks that move them.

Every metric is defined here, once; other modules call the small functions below (cheap enough for the request
path), so names, labels and their bounded values live in one place. With ``PROMETHEUS_MULTIPROC_DIR``,
``exposition`` aggregates every process's values. The metrics: docs/deployment.md. Not owned here: ``/metrics``.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, multiprocess
from prometheus_client import generate_latest as _generate_latest

logger = logging.getLogger("mcp_app.observability")
NAMESPACE = "mcp"
HTTP_METHODS = frozenset({"GET", "POST", "DELETE"})
TOOL_OUTCOMES = ("ok", "tool_error", "invalid_arguments", "protocol_error", "cancelled", "exception")
DEPENDENCIES = ("database", "redis", "channel_layer", "cache")

REQUESTS = Counter(
    "requests",
    "MCP endpoint requests answered, by HTTP method, JSON-RPC method, protocol era and HTTP status.",
    ["http_method", "rpc_method", "era", "status"],
    namespace=NAMESPACE,
)
REQUEST_SECONDS = Histogram(
    "request_duration_seconds",
    "Time from the request's arrival to the end of its response (streams included), by HTTP method.",
    ["http_method"],
    namespace=NAMESPACE,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf")),
)
TOOL_CALL_SECONDS = Histogram(
    "tool_call_duration_seconds",
    "Duration of tools/call runs, by tool and outcome (one of TOOL_OUTCOMES).",
    ["tool", "outcome"],
    namespace=NAMESPACE,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf")),
)
UPSTREAM_CALL_SECONDS = Histogram(
    "upstream_call_duration_seconds",
    "Exchanges with upstream MCP servers (tools/call, resources/read, prompts/get), by upstream (the tenant's "
    "slug and the upstream's name) and outcome: ok (it answered, an error result included) or the failure's code.",
    ["upstream", "outcome"],
    namespace=NAMESPACE,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf")),
)
SSE_STREAMS = Gauge(
    "sse_streams",
    "Server-sent-event responses currently open.",
    namespace=NAMESPACE,
    multiprocess_mode="livesum",
)
WORKER_CALLS = Gauge(
    "worker_calls",
    "Tool calls handed to background work (durable tasks), by state: queued or running.",
    ["state"],
    namespace=NAMESPACE,
    multiprocess_mode="livesum",
)
WORKER_CALL_LEASES = Gauge(
    "worker_call_leases",
    "Worker-call slots (quota leases, mcp_app.limits.quotas) held by live processes: calls admitted and running.",
    namespace=NAMESPACE,
    multiprocess_mode="livesum",
)
USAGE_CALLS = Counter(
    "usage_calls",
    "Tool calls metered for the usage ledger, by tenant (its slug; past USAGE_METRICS_MAX_TENANTS: other).",
    ["tenant"],
    namespace=NAMESPACE,
)
USAGE_TOOL_SECONDS = Counter(
    "usage_tool_seconds",
    "Seconds tools ran, metered where they ran (failed and cancelled calls included), by tenant.",
    ["tenant"],
    namespace=NAMESPACE,
)
USAGE_COST = Counter(
    "usage_cost",
    "Cost of tool calls (the tool's price plus what the result reported), by tenant.",
    ["tenant"],
    namespace=NAMESPACE,
)
WORKER_QUOTA_REFUSALS = Counter(
    "worker_quota_refusals",
    "Worker calls refused because a concurrency limit was reached, by scope (tenant or agent).",
    ["scope"],
    namespace=NAMESPACE,
)
RATE_LIMITED = Counter(
    "rate_limited",
    "Requests refused with 429 because a rate limit was reached (mcp_app.limits.rates), by scope.",
    ["scope"],
    namespace=NAMESPACE,
)
BUDGET_REFUSALS = Counter(
    "budget_refusals",
    "Tool calls refused with 429 because a budget was spent (mcp_app.limits.budgets), by scope, metric and period.",
    ["scope", "metric", "period"],
    namespace=NAMESPACE,
)
BUDGET_ALERTS = Counter(
    "budget_alerts",
    "Budget alerts recorded: a counter reached a budget's alert_percent in a period (once per budget, metric, period).",
    ["metric", "period"],
    namespace=NAMESPACE,
)
CAP_REFUSALS = Counter(
    "cap_refusals",
    "Streams, sessions or tasks refused at a cap (mcp_app.limits.caps), by resource and scope (tenant, agent or "
    "process: the file-descriptor guard).",
    ["resource", "scope"],
    namespace=NAMESPACE,
)
AUTH_FAILURES = Counter(
    "auth_failures",
    "Failed authentications at the MCP endpoint, by outcome: refused (401) or throttled (429).",
    ["outcome"],
    namespace=NAMESPACE,
)
CACHE_LOOKUPS = Counter(
    "cache_lookups",
    "Lookups in mcp_app's caches, by cache and result (hit or miss); hit rate = hit / (hit + miss).",
    ["cache", "result"],
    namespace=NAMESPACE,
)
CATALOG_PENDING_CHANGES = Gauge(
    "catalog_pending_changes",
    "Upstream changes held for approval (pending catalog changes), by tenant (its slug; past "
    "USAGE_METRICS_MAX_TENANTS: other); read from the database at each scrape.",
    ["tenant"],
    namespace=NAMESPACE,
    multiprocess_mode="mostrecent",
)
DEPENDENCY_ERRORS = Counter(
    "dependency_errors",
    "Errors talking to a dependency (database, redis, channel_layer, cache), seen while serving or probing.",
    ["dependency"],
    namespace=NAMESPACE,
)

# Present from the first scrape, so dashboards and alerts see zeros instead of missing series.
for _state in ("queued", "running"):
    WORKER_CALLS.labels(state=_state).set(0)
for _scope in ("tenant", "agent"):
    WORKER_QUOTA_REFUSALS.labels(scope=_scope)
for _dependency in DEPENDENCIES:
    DEPENDENCY_ERRORS.labels(dependency=_dependency)
for _scope in ("tenant", "agent", "tool"):
    RATE_LIMITED.labels(scope=_scope)
for _outcome in ("refused", "throttled"):
    AUTH_FAILURES.labels(outcome=_outcome)


# The children of the per-request metrics, each looked up once per label set: ``labels`` validates and joins its
# values and takes the metric's lock on every call, a dict lookup does not. Every label value is bounded (HTTP
# method, known RPC method, era, status, catalog tool name, cache name), so these dicts are too; children are never
# removed from their metrics, so a cached one stays the metric's.
_request_children: dict[tuple[str, str, str, int], tuple[Any, Any]] = {}
_tool_call_children: dict[tuple[str, str], Any] = {}
_cache_children: dict[tuple[str, bool], Any] = {}


def record_request(http_method: str, rpc_method: str, era: str, status: int, seconds: float) -> None:
    """One answered request of the MCP endpoint (called by ``observability.asgi``)."""
    method = http_method if http_method in HTTP_METHODS else "other"  # a client's method is not a bounded key
    key = (method, rpc_method, era, status)
    children = _request_children.get(key)
    if children is None:
        children = (REQUESTS.labels(method, rpc_method, era, str(status)), REQUEST_SECONDS.labels(method))
        _request_children[key] = children
    children[0].inc()
    children[1].observe(seconds)


def record_tool_call(tool: str, outcome: str, seconds: float) -> None:
    """One finished ``tools/call`` run; ``outcome`` is one of ``TOOL_OUTCOMES``."""
    child = _tool_call_children.get((tool, outcome))
    if child is None:
        child = _tool_call_children[tool, outcome] = TOOL_CALL_SECONDS.labels(tool, outcome)
    child.observe(seconds)


# The usage counters of each tenant label, looked up once (a call pays one dict lookup, not three ``labels``).
_usage_counters: dict[str, tuple[Any, Any, Any]] = {}


def record_usage(tenant: str, calls: int, tool_seconds: float, cost: float) -> None:
    """A call's usage (``mcp_app.limits.metering``); ``tenant`` is already bounded by the caller."""
    counters = _usage_counters.get(tenant)
    if counters is None:
        counters = (USAGE_CALLS.labels(tenant), USAGE_TOOL_SECONDS.labels(tenant), USAGE_COST.labels(tenant))
        _usage_counters[tenant] = counters
    counters[0].inc(calls)
    counters[1].inc(tool_seconds)
    if cost:
        counters[2].inc(cost)


def record_upstream_call(upstream: str, outcome: str, seconds: float) -> None:
    """One exchange with an upstream MCP server (``federation.calls``); ``outcome``: ``ok`` or a failure code."""
    UPSTREAM_CALL_SECONDS.labels(upstream, outcome).observe(seconds)


def stream_opened() -> None:
    SSE_STREAMS.inc()


def stream_closed() -> None:
    SSE_STREAMS.dec()


def worker_call(state: str, delta: int) -> None:
    """A call entered (``delta=1``) or left (``-1``) background work in ``state`` ("queued" or "running")."""
    WORKER_CALLS.labels(state=state).inc(delta)


def worker_call_lease(delta: int) -> None:
    """A worker-call slot was taken (``delta=1``) or given back (``-1``) by this process."""
    WORKER_CALL_LEASES.inc(delta)


def worker_quota_refused(scope: str) -> None:
    """A worker call was refused at its ``scope``'s limit ("tenant" or "agent")."""
    WORKER_QUOTA_REFUSALS.labels(scope=scope).inc()


def rate_limited(scope: str) -> None:
    """A request was refused at its ``scope``'s rate ("tenant", "agent", "tool" or "registration")."""
    RATE_LIMITED.labels(scope=scope).inc()


def budget_refused(scope: str, metric: str, period: str) -> None:
    """A tool call was refused over a budget of ``scope`` ("tenant" or "agent")."""
    BUDGET_REFUSALS.labels(scope=scope, metric=metric, period=period).inc()


def budget_alerted(metric: str, period: str) -> None:
    """A budget alert was recorded (once per budget, metric, period and threshold, fleet-wide)."""
    BUDGET_ALERTS.labels(metric=metric, period=period).inc()


_pending_labels: set[str] = set()


def set_pending_changes(counts: dict[str, int]) -> None:
    """The pending changes of each tenant label now; a label this process set before and absent now is 0."""
    for label in _pending_labels - counts.keys():
        CATALOG_PENDING_CHANGES.labels(tenant=label).set(0)
    for label, count in counts.items():
        CATALOG_PENDING_CHANGES.labels(tenant=label).set(count)
    _pending_labels.update(counts)


def cap_refused(resource: str, scope: str) -> None:
    """A stream, session or task was refused at a cap of ``scope`` ("tenant", "agent" or "process")."""
    CAP_REFUSALS.labels(resource=resource, scope=scope).inc()


def auth_failed(outcome: str) -> None:
    """A failed authentication, ``refused`` (401) or ``throttled`` (429)."""
    AUTH_FAILURES.labels(outcome=outcome).inc()


def record_cache(cache: str, hit: bool) -> None:
    """One lookup in the cache named ``cache`` (e.g. ``catalog``, ``token``, ``session``): call it on every lookup."""
    child = _cache_children.get((cache, hit))
    if child is None:
        child = _cache_children[cache, hit] = CACHE_LOOKUPS.labels(cache, "hit" if hit else "miss")
    child.inc()


def record_dependency_error(dependency: str) -> None:
    """An error talking to ``dependency`` (one of ``DEPENDENCIES``)."""
    DEPENDENCY_ERRORS.labels(dependency=dependency).inc()


def dependency_of(exc: BaseException) -> str | None:
    """Which dependency an exception comes from (``database``, ``redis``), or ``None`` when it is none of them."""
    from django.db import Error as DatabaseError

    if isinstance(exc, DatabaseError):
        return "database"
    try:
        from redis.exceptions import RedisError
    except ImportError:  # the [redis] extra is not installed
        RedisError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, RedisError) or type(exc).__module__.startswith(("redis.", "channels_redis.")):
        return "redis"
    return None


def record_exception(exc: BaseException) -> None:
    """Count ``exc`` as a dependency error when it is one (unhandled errors while serving call this)."""
    dependency = dependency_of(exc)
    if dependency is not None:
        record_dependency_error(dependency)


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def _mark_dead() -> None:
    """At exit: drop this process's live gauges, so a restarted process does not leave its streams counted."""
    directory = multiprocess_dir()
    if directory:
        multiprocess.mark_process_dead(os.getpid(), directory)


if multiprocess_dir():
    atexit.register(_mark_dead)


def _registry() -> Any:
    """This process's registry, or every live process's values in multiprocess mode."""
    if not multiprocess_dir():
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


_samplers: list[Callable[[], None]] = []


def sample_at_scrape(sampler: Callable[[], None]) -> None:
    """Call ``sampler`` before each exposition: it sets gauges of state kept elsewhere (the database). A sampler
    that fails leaves its gauges as they were (logged), and the scrape is answered."""
    if sampler not in _samplers:
        _samplers.append(sampler)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (of all processes in multiprocess mode) and its content type."""
    for sampler in _samplers:
        try:
            sampler()
        except Exception:
            logger.warning("a metrics sampler failed: %s", sampler.__qualname__, exc_info=True)
    return _generate_latest(_registry()), CONTENT_TYPE_LATEST


def open_streams() -> int:
    """SSE responses open now: this process's, or every live process's in multiprocess mode (the admin's
    dashboard shows it to operators)."""
    return int(_registry().get_sample_value(f"{NAMESPACE}_sse_streams") or 0)


_known_methods: frozenset[str] | None = None


def rpc_method(payload: Any) -> str:
    """The bounded ``rpc_method`` label of a decoded body: a known request method, ``notification``,
    ``response`` (a client's answer), ``batch`` or ``other``."""
    global _known_methods
    if isinstance(payload, list):
        return "batch"
    if not isinstance(payload, dict):
        return "other"
    method = payload.get("method")
    if method is None:
        return "response"
    if not isinstance(method, str):
        return "other"
    if _known_methods is None:
        from ..protocol.handlers import dispatcher
        from ..protocol.versions import LEGACY, MODERN

        _known_methods = dispatcher.methods(LEGACY) | dispatcher.methods(MODERN)
    if method in _known_methods:
        return method
    return "notification" if method.startswith("notifications/") else "other"
