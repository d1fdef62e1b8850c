"""The one settings object of mcp_app, read from ``MCP_APP`` in the project's Django settings.

``AppSettings`` declares every setting once: its annotation is its type (with its rule, if any), its value the
default. ``mcp_settings``, the singleton every module reads, rejects unknown keys (a typo must not silently fall
back to a default), validates types and rules, and reloads when tests change ``MCP_APP`` (``on_reload`` hooks).
It does not own Django's own settings (databases, caches, channel layers): those belong to the project.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, cast, get_args, get_origin, get_type_hints

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .netguard import parse_allow_list

Rule = Callable[[Any], str | None]  # a value's complaint (completing "MCP_APP['KEY'] ..."), or None when it is fine


def _rule(holds: Callable[[Any], object], complaint: str) -> Rule:
    return lambda value: None if holds(value) else complaint


def _parses(parse: Callable[[Any], object], error: type[Exception], complaint: str) -> Rule:
    """The rule that ``parse(value)`` raises no ``error`` (whose message ends the complaint)."""

    def rule(value: Any) -> str | None:
        try:
            parse(value)
        except error as exc:
            return f"{complaint}: {exc}"
        return None

    return rule


# The named backends of shared state (mcp_app.backends) and their embedded defaults.
DEFAULT_BACKENDS: dict[str, dict[str, Any]] = {
    "EVENT_STORE": {"BACKEND": "mcp_app.transport.eventstore.MemoryEventStore", "OPTIONS": {}},
    # DatabaseInvalidation: several processes without Redis follow a table instead.
    "INVALIDATION": {"BACKEND": "mcp_app.invalidation.LocalInvalidation", "OPTIONS": {}},
    "HEARTBEAT": {"BACKEND": "mcp_app.heartbeat.LocalHeartbeats", "OPTIONS": {}},
    "WORKER_QUOTAS": {"BACKEND": "mcp_app.limits.quotas.LocalQuotas", "OPTIONS": {}},
    "STREAM_CAPS": {"BACKEND": "mcp_app.limits.quotas.LocalQuotas", "OPTIONS": {}},
    "RATE_LIMITS": {"BACKEND": "mcp_app.limits.rates.LocalRates", "OPTIONS": {}},
    "BUDGETS": {"BACKEND": "mcp_app.limits.budget_counters.LocalBudgets", "OPTIONS": {}},
    "BREAKERS": {"BACKEND": "mcp_app.federation.breaker.LocalBreakers", "OPTIONS": {}},
}


def _backends(value: dict[str, Any]) -> str | None:
    for name, config in value.items():
        if name not in DEFAULT_BACKENDS:
            return f"name {name!r} is no backend of {', '.join(DEFAULT_BACKENDS)}"
        if not isinstance(config, dict) or "BACKEND" not in config:
            return f"entry {name!r} needs a BACKEND dotted path"
    return None


# DRF's rate format: a count, "/", and a period of which DRF reads the first letter.
_RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")

Count = Annotated[int, _rule(lambda v: v >= 1, "must be at least 1")]
Positive = Annotated[float, _rule(lambda v: v > 0, "must be positive")]
NotNegative = Annotated[int, _rule(lambda v: v >= 0, "must not be negative")]
Unlimited = Annotated[int, _rule(lambda v: v >= 0, "must not be negative (0: unlimited)")]
UnlimitedRate = Annotated[float, _rule(lambda v: v >= 0, "must not be negative (0: unlimited)")]
Backends = Annotated[dict[str, Any], _backends]
Networks = Annotated[Sequence[str], _parses(parse_allow_list, ValueError, "is not a valid allow-list")]
ApiRate = Annotated[
    str | None,
    _rule(lambda v: v is None or _RATE.fullmatch(v), "must be like '300/minute' (second, minute, hour, day) or None"),
]
JsonDepth = Annotated[int, _rule(lambda v: 1 <= v <= 200, "must be between 1 and 200")]
HeaderBytes = Annotated[int, _rule(lambda v: 1 <= v <= 16 * 1024, "must be between 1 and 16384 (Twisted's line limit)")]
RedisConnections = Annotated[int, _rule(lambda v: v >= 2, "must be at least 2 (a blocking receive holds one)")]
SecretKeys = Annotated[
    Sequence[str], _rule(lambda v: all(isinstance(k, str) and k for k in v), "must be a list of non-empty strings")
]
Role = Annotated[str, _rule(lambda v: v in ("viewer", "admin", "owner"), "must be 'viewer', 'admin' or 'owner'")]
RegistrationRate = Annotated[float, _rule(lambda v: v >= 0, "must not be negative (0: none)")]
FlushInterval = Annotated[float, _rule(lambda v: 0 < v <= 1, "must be in (0, 1]: it bounds what a crash loses")]
Pattern = Annotated[str, _parses(re.compile, re.error, "is not a regular expression")]

# What a declared type accepts at run time (an int is a float; a tuple a list).
_ACCEPTED: dict[object, tuple[type, ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
    str | None: (str, type(None)),
    Sequence[str]: (list, tuple),
    dict[str, Any]: (dict,),
}


@dataclass(frozen=True)
class AppSettings:
    """Every ``MCP_APP`` setting, once: its type (the annotation), its default (the value) and its meaning (the
    attribute docstring under it, which IDEs and Sphinx show; one may cover the few settings after it)."""

    MAX_BODY_BYTES: Count = 4 * 1024 * 1024
    """Largest accepted POST body, in bytes. Larger bodies are refused with 400 (-32600) while they are read."""
    EDGE_LIMITS: bool = True
    """Limits daphne applies before the application (mcp_app.transport.edge_limits): 414 over the request line
    limit, 431 over the header limit (request line included), 408 when a request is not fully received this many
    seconds after its first byte, 400 over MAX_BODY_BYTES. False leaves daphne as it is."""
    DAPHNE_TUNING: bool = False
    """Two version-guarded daphne/Twisted levers (mcp_app.transport.daphne_tuning; docs/performance.md): reap
    finished requests at once, not at daphne's 1-second sweep, and do not parse every POST's Content-Type as a form."""
    GC_FREEZE_AT_STARTUP: bool = True
    """Move everything alive once the ASGI application is built (Django's whole start-up heap) into the garbage
    collector's permanent generation (gc.freeze), so that full collections stop walking it (docs/performance.md)."""
    MAX_REQUEST_LINE_BYTES: Count = 8 * 1024
    MAX_HEADER_BYTES: HeaderBytes = 16 * 1024
    REQUEST_DEADLINE_SECONDS: Positive = 30.0
    IDLE_TIMEOUT_SECONDS: float = 60.0
    """daphne (EDGE_LIMITS): a connection that neither received nor sent a byte for this long is closed (a client slowly
    reading a long answer is not idle), and one with more than MAX_PENDING_BYTES written but unread is ended with an SSE
    error event, then aborted."""
    MAX_PENDING_BYTES: int = 8 * 1024 * 1024
    MAX_BATCH_SIZE: Count = 50
    """Largest JSON-RPC batch (array) accepted in one POST."""
    MAX_JSON_DEPTH: JsonDepth = 64
    """Deepest nesting of arrays/objects accepted in a body, checked before decoding (400 -32600 beyond it). At most
    200: encoders refuse deeper values, and stored values get wrapped a few levels deeper."""
    MAX_CLIENT_INFO_BYTES: Count = 16 * 1024
    """Largest encoded clientInfo + capabilities a client may declare (initialize, the 2026-07-28 _meta), in bytes;
    larger declarations are refused with -32602 instead of being stored."""
    MAX_ECHOED_BYTES: int = 1024
    """Largest request id and _meta.progressToken (encoded, in bytes) a client may send: the server repeats them in
    every answer, progress notification and stored event. Beyond it: -32602 (a token) or -32600 (an id)."""
    SSE_KEEPALIVE_SECONDS: Positive = 25.0
    """Seconds between keep-alive comments on idle SSE streams."""
    SSE_OPEN_AFTER_SECONDS: float = 1.0
    """A handshake-era tool call on a session that has sent nothing for this long opens its SSE stream (headers, the
    priming event, then keep-alives), so a proxy's read timeout never cuts a silent call; a call with a progress token
    opens it at once."""
    TOKEN_LAST_USED_INTERVAL_SECONDS: float = 60
    """A token's last-used timestamp is written at most this often (seconds), to keep writes off the hot path."""
    API_RATE_PER_KEY: ApiRate = "300/minute"
    """REST API throttling (DRF's, mcp_app.api.throttling): requests per personal API key and per user (all of a
    user's keys and browser session together), as "N/second|minute|hour|day" (None: no limit), counted in the
    API_THROTTLE_CACHE Django cache (Redis in production: shared); over a rate, 429 "throttled" with Retry-After."""
    API_RATE_PER_USER: ApiRate = "600/minute"
    API_THROTTLE_CACHE: str = "default"
    ALLOWED_ORIGINS: Sequence[str] = ()
    """Origins accepted on every server in addition to each server's own allowed origins (also for CORS)."""
    CORS_MAX_AGE_SECONDS: int = 600
    """How long browsers may cache a CORS preflight answer (Access-Control-Max-Age), in seconds."""
    TOOLS_MODULE: str = "mcp_tools"
    """Module name autodiscovered in every installed app for ``@tool`` registrations."""
    CATALOG_CACHE_SIZE: Count = 512
    """Largest number of resolved server catalogs kept in each process's memory."""
    CACHE_TTL_MS: NotNegative = 30_000
    """ttlMs on cacheable 2026-07-28 results (discover, lists, reads): how long a client may reuse them."""
    SESSION_IDLE_SECONDS: float = 3600
    """A handshake-era session idle for longer than this (seconds) expires."""
    CLIENT_REQUEST_TIMEOUT_SECONDS: float = 300
    """How long a tool waits for the client to answer a sampling/elicitation request (seconds)."""
    REDIS_MAX_CONNECTIONS: RedisConnections = 50
    """Redis connections per pool of a process (mcp_app.redis_pool: one pool per event loop); a command waits for a
    free one at most REDIS_POOL_WAIT_SECONDS (then fails as Redis being unreachable), and a connection idle for
    REDIS_IDLE_SECONDS is closed. docs/deployment.md sizes Redis's maxclients from these."""
    REDIS_IDLE_SECONDS: Positive = 10.0
    REDIS_POOL_WAIT_SECONDS: Positive = 5.0
    BACKENDS: Backends = field(default_factory=dict)
    """Where each piece of state processes share lives (mcp_app.backends; the table: docs/architecture.md): a name of
    DEFAULT_BACKENDS maps to {"BACKEND": dotted path, "OPTIONS": {...}}; a name left out keeps its embedded default."""
    EVENT_STORE_TTL_SECONDS: float = 300
    """SSE events kept for Last-Event-ID resumption (EVENT_STORE) expire this long after their stream's last event:
    clients resume within seconds (SSE_RETRY_MS), and a stream nobody resumes must not pin memory for long."""
    EVENT_STORE_MAX_BYTES: Count = 1024 * 1024
    """Bytes of events kept per stream (the oldest dropped first; the newest event is always kept)."""
    EVENT_STORE_MAX_BYTES_PER_AGENT: int = 16 * 1024 * 1024
    """Bytes of events one agent, and one tenant, may store per EVENT_STORE_TTL_SECONDS (0: unlimited). Beyond, their
    events are still delivered live but not stored (a resume replays none of them; docs/reliability.md)."""
    EVENT_STORE_MAX_BYTES_PER_TENANT: int = 64 * 1024 * 1024
    SSE_RETRY_MS: int = 1000
    """The reconnection delay (retry:) announced on resumable streams, in milliseconds."""
    SSE_RESUME_IDLE_SECONDS: float = 60.0
    """A stream resumed by Last-Event-ID ends after this many seconds without an event (its producer may have died); the
    client resumes again from its last id."""
    TASK_IMMEDIATE_SECONDS: float = 0.2
    """Tasks (2026 extension and 2025-11-25 experimental): how long a task-capable call may run before it becomes a task
    (2026), how long tasks are kept (a 2025-11-25 client's requested ttl is capped at it), and the polling interval
    suggested to clients."""
    TASK_TTL_MS: int = 3_600_000
    TASK_POLL_INTERVAL_MS: int = 500
    PAGE_SIZE: Count = 100
    """Items per page of tools/list, resources/list, resources/templates/list, prompts/list and tasks/list."""
    PAGE_MAX_BYTES: int = 512 * 1024
    """A list page (tools/list, resources/list, ...) also ends before its entries pass this many bytes of JSON (at least
    one entry per page), so a catalog of large entries is paged instead of sent in one message."""
    SECRET_KEYS: SecretKeys = ()
    """Keys that encrypt secrets at rest (secret headers of http tools): the first encrypts, every one decrypts, so a
    new key goes first and old ones stay until ``mcp_rotate_secrets`` has re-encrypted. Any high-entropy strings; empty:
    keys derived from Django's SECRET_KEY and SECRET_KEY_FALLBACKS."""
    OUTBOUND_ALLOWED_NETWORKS: Networks = ()
    """Addresses every outbound connection (webhooks, upstreams, client ID metadata documents; mcp_app.outbound)
    may reach although not public: CIDRs or addresses ("10.1.0.0/16", "127.0.0.1"), optionally with a port
    ("[::1]:8080"), or host names ("hooks.internal:8443", matched on the URL's host). Empty: public addresses only."""
    HTTP_TOOL_ALLOWED_NETWORKS: Networks = ()
    """http tools (webhooks) only: more entries, in addition to OUTBOUND_ALLOWED_NETWORKS (same syntax)."""
    OAUTH_CIMD_ALLOWED_NETWORKS: Networks = ()
    """OAuth (mcp_app.oauth) only: more networks a client ID metadata document may be fetched from, in addition to
    OUTBOUND_ALLOWED_NETWORKS (same syntax)."""
    BUDGET_ALERT_ALLOWED_NETWORKS: Networks = ()
    """Budget alert webhooks (docs/budgets.md) only: more entries, in addition to OUTBOUND_ALLOWED_NETWORKS."""
    BUDGET_ALERT_ATTEMPTS: Count = 5
    """Deliveries of one budget alert tried (1 s, 2 s, 4 s… apart, off the request path) before it is given up; the
    outcome is stored on the ``BudgetAlert`` row."""
    BUDGET_ALERT_TIMEOUT_SECONDS: Positive = 5.0
    """Time one delivery of a budget alert may take (connect, send, read the answer)."""
    BUDGET_FLUSH_INTERVAL_SECONDS: FlushInterval = 1.0
    """Tool-seconds and cost that ended calls spent reach the shared budget counters this often (in (0, 1]): it
    bounds how far past a tool-seconds or cost budget calls may go, with the calls in flight (docs/budgets.md)."""
    APPROVAL_WAIT_SECONDS: Positive = 10.0
    """A call that requires approval, of a client that cannot take a task: how long it waits for the decision before
    it is answered with the pending error (its approval's id in ``data``); re-issued once approved, it runs."""
    APPROVAL_TTL_SECONDS: Positive = 86_400.0
    """How long an approval request may be decided, and an approved one used, after the call asked for it."""
    APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS: bool = True
    """Upstream tools whose ``destructiveHint`` is true require approval unless their ``requires approval`` is set
    off (docs/approvals.md). Off: only tools set to require it."""
    OAUTH_REGISTRATIONS_PER_HOUR: RegistrationRate = 600
    """Dynamic client registrations (RFC 7591) per source address: a rate per hour and a burst (the buckets of
    RATE_LIMITS; docs/oauth.md); over it, 429 with Retry-After. A rate of 0: no registration at all."""
    OAUTH_REGISTRATION_BURST: Count = 60
    OAUTH_DENIED_REDIRECT_SCHEMES: Sequence[str] = (
        "ftp",
        "ws",
        "wss",
        "mailto",
        "tel",
        "sms",
        "intent",
        "jar",
        "ldap",
        "gopher",
    )
    """Private-use redirect URI schemes (RFC 8252 §7.1, e.g. cursor://) refused besides those a browser handles itself
    (javascript, data, file, blob, about…: always refused; mcp_app.oauth.redirects)."""
    OAUTH_CIMD_FETCHES_PER_HOST: Count = 2
    """Client ID metadata documents fetched at once from one host, per process; more wait for a slot within the fetch's
    deadline (CIMD_FETCH_TIMEOUT_SECONDS of OAUTH2_PROVIDER, 5 s, over the whole fetch)."""
    OAUTH_CONSENT_ROLE: Role = "viewer"
    """The least tenant role ("viewer", "admin", "owner") that may authorize OAuth clients for the tenant's servers and
    keep the tokens: a member below it (or removed) loses them on every process within a second."""
    HTTP_TOOL_MAX_TIMEOUT_SECONDS: Positive = 60.0
    """The longest timeout a tenant may give an http tool (seconds), and the default one."""
    HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS: float = 10.0
    HTTP_TOOL_MAX_RESPONSE_BYTES: Count = 1024 * 1024
    """Largest reply body an http tool may return (bytes); more is an error, and never read past the bound."""
    UPSTREAM_MAX_TIMEOUT_SECONDS: float = 600.0
    """Upstream MCP servers (mcp_app.federation). Every upstream connection is SSRF-guarded like an http tool's. The
    longest timeout a tenant may give an upstream call (seconds), and the default one."""
    UPSTREAM_DEFAULT_TIMEOUT_SECONDS: float = 60.0
    UPSTREAM_CONNECT_TIMEOUT_SECONDS: float = 10.0
    """How long connecting (and the handshake or discovery) to an upstream may take."""
    UPSTREAM_MAX_RESPONSE_BYTES: int = 4 * 1024 * 1024
    """Largest message an upstream may send (bytes): a bigger SSE event or JSON reply fails the call."""
    UPSTREAM_MAX_ENTRIES: int = 1000
    """Most entries one sync imports of each kind (tools, resources, templates, prompts); the rest is refused."""
    UPSTREAM_MAX_DESCRIPTION_CHARS: int = 8192
    """Every process holds every imported entry: an entry's description is cut at UPSTREAM_MAX_DESCRIPTION_CHARS, an
    entry whose JSON is larger than UPSTREAM_MAX_ENTRY_BYTES is not imported, nor what goes past
    UPSTREAM_MAX_CATALOG_BYTES for the whole upstream (the sync report says which)."""
    UPSTREAM_MAX_ENTRY_BYTES: int = 64 * 1024
    UPSTREAM_MAX_CATALOG_BYTES: int = 2 * 1024 * 1024
    UPSTREAM_SYNC_INTERVAL_SECONDS: float = 3600
    """Catalog re-read by Celery beat (mcp_app.sync_upstreams) every so often (seconds); 0: only on demand."""
    UPSTREAM_POOL_IDLE_SECONDS: float = 300.0
    """A process's connection to an upstream (shared by all its calls) is closed after this long unused (seconds)."""
    UPSTREAM_MAX_CONCURRENT_CALLS: int = 24
    """Calls one process has in flight to one upstream at once (each holds one HTTP connection of its pool, which has
    room for these plus the upstream's standalone stream); more wait their turn within their own timeout, and one still
    waiting when it ends answers UPSTREAM_BUSY (the shared connection is never torn down for it)."""
    UPSTREAM_BREAKER_FAILURES: int = 5
    """Circuit breaker per upstream, shared by every process through Redis (in-process without it): this many failures
    within the window open it; open, calls fail at once for the cool-down, then one call probes."""
    UPSTREAM_BREAKER_WINDOW_SECONDS: float = 30.0
    UPSTREAM_BREAKER_COOLDOWN_SECONDS: float = 30.0
    AUDIT_ENABLED: bool = True
    """Audit log (one ToolCall row per tools/call, see mcp_app.runtime.audit). Records are buffered in memory and
    written in batches at least every AUDIT_FLUSH_INTERVAL_SECONDS (the most a crash can lose) and at shutdown."""
    AUDIT_FLUSH_INTERVAL_SECONDS: FlushInterval = 1.0
    AUDIT_BUFFER_SIZE: Count = 10_000
    """Most records held in memory (pending plus awaiting retry); beyond it new records are dropped, and logged."""
    AUDIT_BATCH_SIZE: Count = 500
    """Rows per INSERT, and how many failed flushes a batch survives before it is dropped (and logged)."""
    AUDIT_FLUSH_RETRIES: Count = 5
    AUDIT_RETENTION_DAYS: Count = 90
    """Tool calls older than this are deleted by ``mcp_purge`` (mcp_app.maintenance.purge_expired)."""
    AUDIT_REDACT_KEYS: Pattern = (
        r"pass(word|phrase)?|secret|token|api[-_]?key|auth|credential|private[-_]?key|cookie|session"
    )
    """Argument keys matching this regular expression (searched, case-insensitively) are stored as "[redacted]"."""
    AUDIT_MAX_VALUE_CHARS: Count = 256
    """Redacted copies keep strings up to this many characters, and this many items per list or object."""
    AUDIT_MAX_ITEMS: Count = 50
    USAGE_BUFFER_SIZE: Count = 10_000
    """Most usage-ledger rows (tenant, agent, server, tool, day) a process holds between flushes, which the audit
    flusher writes with the audit log (docs/budgets.md); beyond it a new row's usage is dropped, and logged."""
    USAGE_METRICS_MAX_TENANTS: Count = 100
    """Tenants a process labels the mcp_usage_* metrics with (the first ones it sees); the others count as "other"."""
    METRICS_TOKEN: str = ""
    """Bearer token a Prometheus scraper sends to /metrics; empty: the endpoint answers 404."""
    HEALTH_CHECK_TIMEOUT_SECONDS: Positive = 2.0
    """Longest time each /readyz dependency probe may take (seconds) before it counts as down."""
    TRACING: bool = False
    """OpenTelemetry traces of MCP requests, tool calls (also on workers) and webhook requests; needs the mcp-host[otel]
    extra. The SDK is configured from the standard OTEL_* variables (docs/observability.md)."""
    INVALIDATION_STALENESS_SECONDS: Positive = 0.75
    """Caches serve only while the invalidation log was heard from within this many seconds; otherwise every request is
    resolved from the database. The bound on how stale a cached token, server or session can be."""
    IDENTITY_CACHE_SIZE: Count = 10_000
    """Cached token, server and session snapshots per process, and their maximum age (a backstop for changes made behind
    the ORM's back; ordinary changes invalidate at once)."""
    IDENTITY_CACHE_MAX_AGE_SECONDS: Positive = 300
    WRITE_BEHIND_INTERVAL_SECONDS: Positive = 2.0
    """Last-used stamps and session activity are written by a background thread this often (seconds), and at most this
    many rows wait at once."""
    WRITE_BEHIND_MAX_PENDING: Count = 50_000
    WORKER_CALL_TIMEOUT_SECONDS: float = 300
    """Worker calls (tool bindings with execution "worker", see mcp_app.workers): how long one may run before it is
    failed (a binding's timeout_seconds overrides it), and what happens to a call whose worker died mid-run: "requeue"
    (run it again, at most WORKER_CALL_MAX_ATTEMPTS times in all) or "fail"."""
    WORKER_LOST_CALLS: str = "requeue"
    WORKER_CALL_MAX_ATTEMPTS: int = 2
    WORKER_CALLS_PER_TENANT: Unlimited = 50
    """Concurrent worker calls allowed per tenant and per agent unless the tenant or agent sets its own
    (max_worker_calls); 0: unlimited."""
    WORKER_CALLS_PER_AGENT: Unlimited = 20
    WORKER_CALL_LEASE_SECONDS: Positive = 30.0
    """A running call holds its slot by a lease its process renews every third of this (seconds); the slot of a process
    that died (SIGKILL, OOM) frees itself at most this long after its last renewal."""
    RATE_LIMIT_PER_TENANT: UnlimitedRate = 1000.0
    """Request rates (docs/limits.md): requests per second and bursts per tenant, agent and tool, unless the tenant,
    agent or tool sets its own; a rate of 0 is unlimited. Over a rate: HTTP 429 with Retry-After, JSON-RPC -32011."""
    RATE_BURST_PER_TENANT: Count = 2000
    RATE_LIMIT_PER_AGENT: UnlimitedRate = 200.0
    RATE_BURST_PER_AGENT: Count = 400
    RATE_LIMIT_PER_TOOL: UnlimitedRate = 0.0
    RATE_BURST_PER_TOOL: Count = 100
    STREAMS_PER_TENANT: NotNegative = 5000
    """Caps (docs/limits.md): concurrent GET/listen streams and live sessions per tenant and per agent (0: unlimited;
    over a cap, 429 and -32012). Stream slots are leases renewed every third of CAP_LEASE_SECONDS."""
    STREAMS_PER_AGENT: NotNegative = 1000
    SESSIONS_PER_TENANT: NotNegative = 10_000
    SESSIONS_PER_AGENT: NotNegative = 1000
    CAP_LEASE_SECONDS: Positive = 30.0
    INLINE_TASKS_PER_TENANT: NotNegative = 1000
    """Tasks (either era) running inline, in the serving processes, per agent and per tenant (0: unlimited); a call that
    would become one more is answered JSON-RPC -32012 (counted in the database, as sessions are)."""
    INLINE_TASKS_PER_AGENT: NotNegative = 100
    FD_RESERVE: NotNegative = 128
    """New streams are refused with 503 once fewer than this many file descriptors are left under the process's
    RLIMIT_NOFILE (docs/deployment.md: ulimit -n), so that other requests still find one."""
    AUTH_FAILURE_RATE: Positive = 1.0
    """Brute force (docs/limits.md): failed authentications per second and in a burst, per source address and per
    token prefix, before they get 429 instead of 401 (a valid token is never refused); how long an unknown token is
    refused without a query; at most one failure log line per this many seconds."""
    AUTH_FAILURE_BURST: Count = 20
    AUTH_NEGATIVE_CACHE_SECONDS: float = 10.0
    AUTH_FAILURE_LOG_INTERVAL_SECONDS: float = 10.0
    IDEMPOTENCY_TTL_SECONDS: float = 3600
    """How long an idempotency key (_meta) attaches a re-issued call to the first one (seconds)."""
    WORKER_DISPATCH: str = "auto"
    """Where worker calls run: "auto" (on Celery workers when the project's Celery app has a real broker, i.e. not eager
    and not memory://; else in the serving process, same behaviour), "celery" or "in_process"."""
    WORKER_QUEUE: str = ""
    """The Celery queue worker calls are sent to ("": Celery's default queue); workers consume it with -Q."""
    HEARTBEAT_INTERVAL_SECONDS: Positive = 1.0
    """Liveness (docs/workers.md): every process that owns records beats this often; one silent for
    HEARTBEAT_TIMEOUT_SECONDS is dead (its calls re-queued or failed, its tasks failed). Serving processes sweep dead
    owners' records every LIVENESS_SWEEP_SECONDS; a worker call no worker takes within WORKER_QUEUE_TIMEOUT_SECONDS
    fails; READYZ_REQUIRES_WORKER: /readyz answers 503 while no worker consumes the queue (else reported, still 200)."""
    HEARTBEAT_TIMEOUT_SECONDS: Positive = 5.0
    LIVENESS_SWEEP_SECONDS: Positive = 2.0
    WORKER_QUEUE_TIMEOUT_SECONDS: Positive = 30.0
    READYZ_REQUIRES_WORKER: bool = False

    def __post_init__(self) -> None:
        for key, (accepted, rules) in _DECLARED.items():
            value = getattr(self, key)
            if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be {' or '.join(t.__name__ for t in accepted)}.")
            for rule in rules:
                complaint = rule(value)
                if complaint is not None:
                    raise ImproperlyConfigured(f"MCP_APP[{key!r}] {complaint}.")
        if self.HEARTBEAT_TIMEOUT_SECONDS < 2 * self.HEARTBEAT_INTERVAL_SECONDS:
            raise ImproperlyConfigured("MCP_APP['HEARTBEAT_TIMEOUT_SECONDS'] must be at least two intervals.")
        if not 0 < self.HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS <= self.HTTP_TOOL_MAX_TIMEOUT_SECONDS:
            raise ImproperlyConfigured(
                "MCP_APP['HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS'] must be positive and at most HTTP_TOOL_MAX_TIMEOUT_SECONDS."
            )


def _declared(hint: Any) -> tuple[tuple[type, ...], tuple[Rule, ...]]:
    if get_origin(hint) is Annotated:
        base, *rules = get_args(hint)
        return _ACCEPTED[base], tuple(rules)
    return _ACCEPTED[hint], ()


# Each setting's accepted run-time types and rules, read from the annotations above.
_DECLARED = {key: _declared(hint) for key, hint in get_type_hints(AppSettings, include_extras=True).items()}


def load() -> AppSettings:
    """``MCP_APP`` over the defaults, validated; raises ``ImproperlyConfigured`` when it is not valid."""
    from django.conf import settings

    user = getattr(settings, "MCP_APP", {}) or {}
    if not isinstance(user, dict):
        raise ImproperlyConfigured("MCP_APP must be a dict.")
    unknown = sorted(set(user) - set(_DECLARED))
    if unknown:
        raise ImproperlyConfigured(f"Unknown MCP_APP setting(s): {', '.join(unknown)}.")
    return AppSettings(**user)


class _Current:
    """The values of the current ``MCP_APP``, loaded at first use and again after a change: an instance attribute
    each once loaded, so that reading a setting on the hot path is a plain attribute lookup."""

    def __getattr__(self, name: str) -> Any:
        # Reached only for a name the instance lacks: nothing is loaded yet, or the name is no setting.
        if name.startswith("_") or self.__dict__:
            raise AttributeError(f"Unknown MCP_APP setting {name!r}.")
        self.__dict__.update(vars(load()))
        return getattr(self, name)

    def reload(self) -> None:
        self.__dict__.clear()


_current = _Current()
# Reads as the AppSettings it stands for.
mcp_settings = cast(AppSettings, _current)

# What must forget state built from the settings when they change (a backend made from a dotted path, say).
# Modules that build such state register here when imported; the settings never import them (conf is the
# bottom layer: everything reads it, it reads nothing of mcp_app but the stdlib-only netguard).
_reload_hooks: list[Callable[[], None]] = []


def pace(name: str, fallback: float) -> float:
    """A background thread's interval: the setting ``name``, or ``fallback`` while ``MCP_APP`` is invalid (an
    override being refused must fail the code that set it, never kill a flusher thread that reads it)."""
    try:
        return float(getattr(mcp_settings, name))
    except ImproperlyConfigured:
        return fallback


def on_reload(hook: Callable[[], None]) -> Callable[[], None]:
    """Call ``hook`` after ``MCP_APP`` changes (``override_settings``); usable as a decorator."""
    _reload_hooks.append(hook)
    return hook


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "MCP_APP":
        _current.reload()
        for hook in tuple(_reload_hooks):
            hook()
