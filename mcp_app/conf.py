"""The one settings object of mcp_app.

Projects configure the app with a single ``MCP_APP`` dictionary in their Django settings; defaults live here.
``mcp_settings`` is the singleton every module reads. It rejects unknown keys (a typo must not silently fall
back to a default), validates types, and reloads when tests change ``MCP_APP`` with ``override_settings``.

It does not own Django's own settings (databases, caches, channel layers): those belong to the project.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .netguard import parse_allow_list

DEFAULTS: dict[str, Any] = {
    # Largest accepted POST body, in bytes. Larger bodies are refused with 400 (-32600) while they are read.
    "MAX_BODY_BYTES": 4 * 1024 * 1024,
    # Limits daphne applies before the application (mcp_app.transport.edge_limits): 414 over the request line
    # limit, 431 over the header limit (request line included), 408 when a request is not fully received this
    # many seconds after its first byte, 400 over MAX_BODY_BYTES. EDGE_LIMITS False leaves daphne as it is.
    "EDGE_LIMITS": True,
    # Two daphne/Twisted levers (mcp_app.transport.daphne_tuning): reap finished requests at once instead of at
    # daphne's 1-second sweep, and do not parse every POST's Content-Type as a form. Version-guarded; off by
    # default (private internals). See docs/performance.md for what they are worth.
    "DAPHNE_TUNING": False,
    # Move everything alive once the ASGI application is built (modules, models, URL patterns, caches: Django's
    # whole start-up heap) into the garbage collector's permanent generation (gc.freeze), so that full
    # collections stop walking it. Measured: p99 at c=16 from ~80 ms to ~26 ms, 13 % less CPU per request.
    "GC_FREEZE_AT_STARTUP": True,
    "MAX_REQUEST_LINE_BYTES": 8 * 1024,
    "MAX_HEADER_BYTES": 16 * 1024,
    "REQUEST_DEADLINE_SECONDS": 30.0,
    # daphne (EDGE_LIMITS): a connection that neither received nor sent a byte for this long is closed (a client
    # slowly reading a long answer is not idle), and one with more than MAX_PENDING_BYTES written but unread is
    # ended with an SSE error event, then aborted.
    "IDLE_TIMEOUT_SECONDS": 60.0,
    "MAX_PENDING_BYTES": 8 * 1024 * 1024,
    # Largest JSON-RPC batch (array) accepted in one POST.
    "MAX_BATCH_SIZE": 50,
    # Deepest nesting of arrays/objects accepted in a body, checked before decoding (400 -32600 beyond it).
    # At most 200: encoders refuse deeper values, and stored values get wrapped a few levels deeper.
    "MAX_JSON_DEPTH": 64,
    # Largest encoded clientInfo + capabilities a client may declare (initialize, the 2026-07-28 _meta), in
    # bytes; larger declarations are refused with -32602 instead of being stored.
    "MAX_CLIENT_INFO_BYTES": 16 * 1024,
    # Largest request id and _meta.progressToken (encoded, in bytes) a client may send: the server repeats them in
    # every answer, progress notification and stored event. Beyond it: -32602 (a token) or -32600 (an id).
    "MAX_ECHOED_BYTES": 1024,
    # Seconds between keep-alive comments on idle SSE streams.
    "SSE_KEEPALIVE_SECONDS": 25.0,
    # A handshake-era tool call on a session that has sent nothing for this long opens its SSE stream (headers,
    # the priming event, then keep-alives), so a proxy's read timeout never cuts a silent call; a call with a
    # progress token opens it at once.
    "SSE_OPEN_AFTER_SECONDS": 1.0,
    # A token's last-used timestamp is written at most this often (seconds), to keep writes off the hot path.
    "TOKEN_LAST_USED_INTERVAL_SECONDS": 60,
    # REST API throttling (DRF's throttles, mcp_app.api.throttling): requests per personal API key and per user
    # (all of a user's keys and browser session together), as "N/second|minute|hour|day"; None: no limit. The
    # counts live in this Django cache (Redis in production, so every process shares them); over a rate the
    # API answers 429 "throttled" with Retry-After.
    "API_RATE_PER_KEY": "300/minute",
    "API_RATE_PER_USER": "600/minute",
    "API_THROTTLE_CACHE": "default",
    # Origins accepted on every server in addition to each server's own allowed origins (also for CORS).
    "ALLOWED_ORIGINS": [],
    # How long browsers may cache a CORS preflight answer (Access-Control-Max-Age), in seconds.
    "CORS_MAX_AGE_SECONDS": 600,
    # Module name autodiscovered in every installed app for ``@tool`` registrations.
    "TOOLS_MODULE": "mcp_tools",
    # Largest number of resolved server catalogs kept in each process's memory.
    "CATALOG_CACHE_SIZE": 512,
    # ttlMs on cacheable 2026-07-28 results (discover, lists, reads): how long a client may reuse them.
    "CACHE_TTL_MS": 30_000,
    # A handshake-era session idle for longer than this (seconds) expires.
    "SESSION_IDLE_SECONDS": 3600,
    # How long a tool waits for the client to answer a sampling/elicitation request (seconds).
    "CLIENT_REQUEST_TIMEOUT_SECONDS": 300,
    # Redis connections of a process (mcp_app.redis_pool): each pool (one per event loop, for the channel layer,
    # the event store, the rate/quota/breaker counters) opens at most REDIS_MAX_CONNECTIONS (a command waits
    # for a free one, at most REDIS_POOL_WAIT_SECONDS, then fails as Redis being unreachable), and closes a
    # connection idle for REDIS_IDLE_SECONDS. docs/deployment.md sizes Redis's maxclients from these.
    "REDIS_MAX_CONNECTIONS": 50,
    "REDIS_IDLE_SECONDS": 10.0,
    "REDIS_POOL_WAIT_SECONDS": 5.0,
    # Where each piece of state that processes share lives (mcp_app.backends; docs/architecture.md has the table):
    # a name maps to {"BACKEND": dotted path, "OPTIONS": {...}}, and a name left out keeps its embedded default.
    # mcp_host.settings puts every one in Redis whenever REDIS_URL is set.
    "BACKENDS": {
        "EVENT_STORE": {"BACKEND": "mcp_app.transport.eventstore.MemoryEventStore", "OPTIONS": {}},
        # DatabaseInvalidation: several processes without Redis follow a table instead.
        "INVALIDATION": {"BACKEND": "mcp_app.invalidation.LocalInvalidation", "OPTIONS": {}},
        "HEARTBEAT": {"BACKEND": "mcp_app.heartbeat.LocalHeartbeats", "OPTIONS": {}},
        "WORKER_QUOTAS": {"BACKEND": "mcp_app.limits.quotas.LocalQuotas", "OPTIONS": {}},
        "STREAM_CAPS": {"BACKEND": "mcp_app.limits.quotas.LocalQuotas", "OPTIONS": {}},
        "RATE_LIMITS": {"BACKEND": "mcp_app.limits.rates.LocalRates", "OPTIONS": {}},
        "BREAKERS": {"BACKEND": "mcp_app.federation.breaker.LocalBreakers", "OPTIONS": {}},
    },
    # SSE events kept for Last-Event-ID resumption (EVENT_STORE) expire this long after their stream's last event:
    # clients resume within seconds (SSE_RETRY_MS), and a stream nobody resumes must not pin memory for long.
    "EVENT_STORE_TTL_SECONDS": 300,
    # Bytes of events kept per stream (the oldest dropped first; the newest event is always kept).
    "EVENT_STORE_MAX_BYTES": 1024 * 1024,
    # Bytes of events one agent, and one tenant, may store per EVENT_STORE_TTL_SECONDS (0: unlimited). Beyond,
    # their events are still delivered live but not stored (a resume replays none of them; docs/reliability.md).
    "EVENT_STORE_MAX_BYTES_PER_AGENT": 16 * 1024 * 1024,
    "EVENT_STORE_MAX_BYTES_PER_TENANT": 64 * 1024 * 1024,
    # The reconnection delay (retry:) announced on resumable streams, in milliseconds.
    "SSE_RETRY_MS": 1000,
    # A stream resumed by Last-Event-ID ends after this many seconds without an event (its producer may have
    # died); the client resumes again from its last id.
    "SSE_RESUME_IDLE_SECONDS": 60.0,
    # Tasks (2026 extension and 2025-11-25 experimental): how long a task-capable call may run before it becomes
    # a task (2026), how long tasks are kept (a 2025-11-25 client's requested ttl is capped at it), and the
    # polling interval suggested to clients.
    "TASK_IMMEDIATE_SECONDS": 0.2,
    "TASK_TTL_MS": 3_600_000,
    "TASK_POLL_INTERVAL_MS": 500,
    # Items per page of tools/list, resources/list, resources/templates/list, prompts/list and tasks/list.
    "PAGE_SIZE": 100,
    # A list page (tools/list, resources/list, ...) also ends before its entries pass this many bytes of JSON
    # (at least one entry per page), so a catalog of large entries is paged instead of sent in one message.
    "PAGE_MAX_BYTES": 512 * 1024,
    # Keys that encrypt secrets at rest (secret headers of http tools): the first encrypts, every one decrypts,
    # so a new key goes first and old ones stay until ``mcp_rotate_secrets`` has re-encrypted. Any high-entropy
    # strings; empty: keys derived from Django's SECRET_KEY and SECRET_KEY_FALLBACKS.
    "SECRET_KEYS": [],
    # Every outbound connection (http tools' webhooks, upstream MCP servers, client ID metadata documents;
    # mcp_app.outbound): addresses it may reach although private, loopback, link-local…, as CIDRs or addresses
    # ("10.1.0.0/16", "127.0.0.1"), optionally with a port ("127.0.0.1:8080", "[::1]:8080"), or host names
    # ("hooks.internal" / "hooks.internal:8443", matched on the URL's host). Empty: public addresses only.
    "OUTBOUND_ALLOWED_NETWORKS": [],
    # http tools (webhooks) only: more entries, in addition to OUTBOUND_ALLOWED_NETWORKS (same syntax).
    "HTTP_TOOL_ALLOWED_NETWORKS": [],
    # OAuth (mcp_app.oauth) only: more networks a client ID metadata document may be fetched from, in addition
    # to OUTBOUND_ALLOWED_NETWORKS (same syntax).
    "OAUTH_CIMD_ALLOWED_NETWORKS": [],
    # Dynamic client registrations (RFC 7591) per source address: a rate per hour and a burst (GCRA, the buckets of
    # RATE_LIMITS); over it, 429 with Retry-After. Hosted connectors (Claude, ChatGPT) register once per person
    # from a few shared addresses. A rate of 0: no registration at all.
    "OAUTH_REGISTRATIONS_PER_HOUR": 600,
    "OAUTH_REGISTRATION_BURST": 60,
    # Private-use redirect URI schemes (RFC 8252 §7.1, e.g. cursor://) refused besides those a browser handles
    # itself (javascript, data, file, blob, about…: always refused; mcp_app.oauth.redirects).
    "OAUTH_DENIED_REDIRECT_SCHEMES": ["ftp", "ws", "wss", "mailto", "tel", "sms", "intent", "jar", "ldap", "gopher"],
    # Client ID metadata documents fetched at once from one host, per process; more wait for a slot within the
    # fetch's deadline (CIMD_FETCH_TIMEOUT_SECONDS of OAUTH2_PROVIDER, 5 s, over the whole fetch).
    "OAUTH_CIMD_FETCHES_PER_HOST": 2,
    # The least tenant role ("viewer", "admin", "owner") that may authorize OAuth clients for the tenant's
    # servers and keep the tokens: a member below it (or removed) loses them on every process within a second.
    "OAUTH_CONSENT_ROLE": "viewer",
    # The longest timeout a tenant may give an http tool (seconds), and the default one.
    "HTTP_TOOL_MAX_TIMEOUT_SECONDS": 60.0,
    "HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS": 10.0,
    # Largest reply body an http tool may return (bytes); more is an error, and never read past the bound.
    "HTTP_TOOL_MAX_RESPONSE_BYTES": 1024 * 1024,
    # Upstream MCP servers (mcp_app.federation). Every upstream connection is SSRF-guarded like an http tool's.
    # The longest timeout a tenant may give an upstream call (seconds), and the default one.
    "UPSTREAM_MAX_TIMEOUT_SECONDS": 600.0,
    "UPSTREAM_DEFAULT_TIMEOUT_SECONDS": 60.0,
    # How long connecting (and the handshake or discovery) to an upstream may take.
    "UPSTREAM_CONNECT_TIMEOUT_SECONDS": 10.0,
    # Largest message an upstream may send (bytes): a bigger SSE event or JSON reply fails the call.
    "UPSTREAM_MAX_RESPONSE_BYTES": 4 * 1024 * 1024,
    # Most entries one sync imports of each kind (tools, resources, templates, prompts); the rest is refused.
    "UPSTREAM_MAX_ENTRIES": 1000,
    # Every process holds every imported entry: an entry's description is cut at UPSTREAM_MAX_DESCRIPTION_CHARS,
    # an entry whose JSON is larger than UPSTREAM_MAX_ENTRY_BYTES is not imported, nor what goes past
    # UPSTREAM_MAX_CATALOG_BYTES for the whole upstream (the sync report says which).
    "UPSTREAM_MAX_DESCRIPTION_CHARS": 8192,
    "UPSTREAM_MAX_ENTRY_BYTES": 64 * 1024,
    "UPSTREAM_MAX_CATALOG_BYTES": 2 * 1024 * 1024,
    # Catalog re-read by Celery beat (mcp_app.sync_upstreams) every so often (seconds); 0: only on demand.
    "UPSTREAM_SYNC_INTERVAL_SECONDS": 3600,
    # A process's connection to an upstream (shared by all its calls) is closed after this long unused (seconds).
    "UPSTREAM_POOL_IDLE_SECONDS": 300.0,
    # Calls one process has in flight to one upstream at once (each holds one HTTP connection of its pool, which
    # has room for these plus the upstream's standalone stream); more wait their turn within their own timeout,
    # and one still waiting when it ends answers UPSTREAM_BUSY (the shared connection is never torn down for it).
    "UPSTREAM_MAX_CONCURRENT_CALLS": 24,
    # Circuit breaker per upstream (the BREAKERS backend, shared by every process through Redis): this many
    # failures within the window open it; open, calls fail at once for the cool-down, then one call probes.
    "UPSTREAM_BREAKER_FAILURES": 5,
    "UPSTREAM_BREAKER_WINDOW_SECONDS": 30.0,
    "UPSTREAM_BREAKER_COOLDOWN_SECONDS": 30.0,
    # Audit log (one ToolCall row per tools/call, see mcp_app.runtime.audit). Records are buffered in memory and
    # written in batches at least every AUDIT_FLUSH_INTERVAL_SECONDS (the most a crash can lose) and at shutdown.
    "AUDIT_ENABLED": True,
    "AUDIT_FLUSH_INTERVAL_SECONDS": 1.0,
    # Most records held in memory (pending plus awaiting retry); beyond it new records are dropped, and logged.
    "AUDIT_BUFFER_SIZE": 10_000,
    # Rows per INSERT, and how many failed flushes a batch survives before it is dropped (and logged).
    "AUDIT_BATCH_SIZE": 500,
    "AUDIT_FLUSH_RETRIES": 5,
    # Tool calls older than this are deleted by ``mcp_purge`` (mcp_app.maintenance.purge_expired).
    "AUDIT_RETENTION_DAYS": 90,
    # Argument keys matching this regular expression (searched, case-insensitively) are stored as "[redacted]".
    "AUDIT_REDACT_KEYS": r"pass(word|phrase)?|secret|token|api[-_]?key|auth|credential|private[-_]?key|cookie|session",
    # Redacted copies keep strings up to this many characters, and this many items per list or object.
    "AUDIT_MAX_VALUE_CHARS": 256,
    "AUDIT_MAX_ITEMS": 50,
    # Bearer token a Prometheus scraper sends to /metrics; empty: the endpoint answers 404.
    "METRICS_TOKEN": "",
    # Longest time each /readyz dependency probe may take (seconds) before it counts as down.
    "HEALTH_CHECK_TIMEOUT_SECONDS": 2.0,
    # OpenTelemetry traces of MCP requests, tool calls (also on workers) and webhook requests; needs the
    # mcp-host[otel] extra. The SDK is configured from the standard OTEL_* variables (docs/observability.md).
    "TRACING": False,
    # Caches serve only while the invalidation log was heard from within this many seconds; otherwise every
    # request is resolved from the database. The bound on how stale a cached token, server or session can be.
    "INVALIDATION_STALENESS_SECONDS": 0.75,
    # Cached token, server and session snapshots per process, and their maximum age (a backstop for changes
    # made behind the ORM's back; ordinary changes invalidate at once).
    "IDENTITY_CACHE_SIZE": 10_000,
    "IDENTITY_CACHE_MAX_AGE_SECONDS": 300,
    # Last-used stamps and session activity are written by a background thread this often (seconds), and
    # at most this many rows wait at once.
    "WRITE_BEHIND_INTERVAL_SECONDS": 2.0,
    "WRITE_BEHIND_MAX_PENDING": 50_000,
    # Worker calls (tool bindings with execution "worker", see mcp_app.workers): how long one may run before it
    # is failed (a binding's timeout_seconds overrides it), and what happens to a call whose worker died
    # mid-run: "requeue" (run it again, at most WORKER_CALL_MAX_ATTEMPTS times in all) or "fail".
    "WORKER_CALL_TIMEOUT_SECONDS": 300,
    "WORKER_LOST_CALLS": "requeue",
    "WORKER_CALL_MAX_ATTEMPTS": 2,
    # Concurrent worker calls allowed per tenant and per agent unless the tenant or agent sets its own
    # (max_worker_calls); 0: unlimited.
    "WORKER_CALLS_PER_TENANT": 50,
    "WORKER_CALLS_PER_AGENT": 20,
    # Running worker calls are counted in the WORKER_QUOTAS backend (mcp_app.limits.quotas): each holds its slot
    # by a lease its process renews every third of this (seconds); the slot of a process that died (SIGKILL, OOM)
    # frees itself at most this long after its last renewal.
    "WORKER_CALL_LEASE_SECONDS": 30.0,
    # Request rates (mcp_app.limits.rates, docs/limits.md): requests per second and bursts per tenant, agent
    # and tool (each tools/call draws from its tool's), unless the tenant, agent or tool sets its own rate_limit
    # and rate_burst; a rate of 0 is unlimited. Over a rate: HTTP 429 with Retry-After, JSON-RPC -32011.
    "RATE_LIMIT_PER_TENANT": 1000.0,
    "RATE_BURST_PER_TENANT": 2000,
    "RATE_LIMIT_PER_AGENT": 200.0,
    "RATE_BURST_PER_AGENT": 400,
    "RATE_LIMIT_PER_TOOL": 0.0,
    "RATE_BURST_PER_TOOL": 100,
    # Caps (mcp_app.limits.caps): concurrent GET/listen streams and live sessions per tenant and per agent (0:
    # unlimited); over a cap, 429 with Retry-After and JSON-RPC -32012. Stream slots are leases (counted in the
    # STREAM_CAPS backend) renewed every third of CAP_LEASE_SECONDS: a dead process's slots free themselves.
    "STREAMS_PER_TENANT": 5000,
    "STREAMS_PER_AGENT": 1000,
    "SESSIONS_PER_TENANT": 10_000,
    "SESSIONS_PER_AGENT": 1000,
    "CAP_LEASE_SECONDS": 30.0,
    # Tasks (either era) running inline, in the serving processes, per agent and per tenant (0: unlimited); a
    # call that would become one more is answered JSON-RPC -32012 (counted in the database, as sessions are).
    "INLINE_TASKS_PER_TENANT": 1000,
    "INLINE_TASKS_PER_AGENT": 100,
    # New streams are refused with 503 once fewer than this many file descriptors are left under the process's
    # RLIMIT_NOFILE (docs/deployment.md: ulimit -n), so that other requests still find one.
    "FD_RESERVE": 128,
    # Brute force (mcp_app.limits.bruteforce): failed authentications per source address and per token prefix, per
    # second and in a burst, before the address's (or prefix's) failures get 429 instead of 401 (a valid token is
    # never refused); how long an unknown token is refused without a query;
    # at most one failure log line per this many seconds.
    "AUTH_FAILURE_RATE": 1.0,
    "AUTH_FAILURE_BURST": 20,
    "AUTH_NEGATIVE_CACHE_SECONDS": 10.0,
    "AUTH_FAILURE_LOG_INTERVAL_SECONDS": 10.0,
    # How long an idempotency key (_meta) attaches a re-issued call to the first one (seconds).
    "IDEMPOTENCY_TTL_SECONDS": 3600,
    # Where worker calls run: "auto" (on Celery workers when the project's Celery app has a real broker, i.e.
    # not eager and not memory://; else in the serving process, same behaviour), "celery" or "in_process".
    "WORKER_DISPATCH": "auto",
    # The Celery queue worker calls are sent to ("": Celery's default queue); workers consume it with -Q.
    "WORKER_QUEUE": "",
    # Liveness (mcp_app.heartbeat, mcp_app.workers.liveness): every process that owns records beats this often
    # (seconds) in the HEARTBEAT backend, and counts as dead once silent for HEARTBEAT_TIMEOUT_SECONDS (its calls
    # are re-queued or failed, its tasks failed). The sweep of dead owners' records runs every
    # LIVENESS_SWEEP_SECONDS in serving processes. A worker call no worker takes within WORKER_QUEUE_TIMEOUT_SECONDS
    # fails. READYZ_REQUIRES_WORKER: /readyz answers 503 while
    # no worker consumes the queue (default: reported, still 200, since inline tools are served).
    "HEARTBEAT_INTERVAL_SECONDS": 1.0,
    "HEARTBEAT_TIMEOUT_SECONDS": 5.0,
    "LIVENESS_SWEEP_SECONDS": 2.0,
    "WORKER_QUEUE_TIMEOUT_SECONDS": 30.0,
    "READYZ_REQUIRES_WORKER": False,
}

_TYPES: dict[str, tuple[type, ...]] = {
    "MAX_BODY_BYTES": (int,),
    "MAX_BATCH_SIZE": (int,),
    "EDGE_LIMITS": (bool,),
    "DAPHNE_TUNING": (bool,),
    "GC_FREEZE_AT_STARTUP": (bool,),
    "MAX_REQUEST_LINE_BYTES": (int,),
    "MAX_HEADER_BYTES": (int,),
    "REQUEST_DEADLINE_SECONDS": (int, float),
    "IDLE_TIMEOUT_SECONDS": (int, float),
    "MAX_PENDING_BYTES": (int,),
    "MAX_JSON_DEPTH": (int,),
    "MAX_CLIENT_INFO_BYTES": (int,),
    "MAX_ECHOED_BYTES": (int,),
    "SSE_KEEPALIVE_SECONDS": (int, float),
    "SSE_OPEN_AFTER_SECONDS": (int, float),
    "TOKEN_LAST_USED_INTERVAL_SECONDS": (int, float),
    "API_RATE_PER_KEY": (str, type(None)),
    "API_RATE_PER_USER": (str, type(None)),
    "API_THROTTLE_CACHE": (str,),
    "ALLOWED_ORIGINS": (list, tuple),
    "CORS_MAX_AGE_SECONDS": (int,),
    "TOOLS_MODULE": (str,),
    "CATALOG_CACHE_SIZE": (int,),
    "CACHE_TTL_MS": (int,),
    "PAGE_SIZE": (int,),
    "PAGE_MAX_BYTES": (int,),
    "SESSION_IDLE_SECONDS": (int, float),
    "CLIENT_REQUEST_TIMEOUT_SECONDS": (int, float),
    "REDIS_MAX_CONNECTIONS": (int,),
    "REDIS_IDLE_SECONDS": (int, float),
    "REDIS_POOL_WAIT_SECONDS": (int, float),
    "BACKENDS": (dict,),
    "EVENT_STORE_TTL_SECONDS": (int, float),
    "EVENT_STORE_MAX_BYTES": (int,),
    "EVENT_STORE_MAX_BYTES_PER_AGENT": (int,),
    "EVENT_STORE_MAX_BYTES_PER_TENANT": (int,),
    "SSE_RETRY_MS": (int,),
    "SSE_RESUME_IDLE_SECONDS": (int, float),
    "TASK_IMMEDIATE_SECONDS": (int, float),
    "TASK_TTL_MS": (int,),
    "TASK_POLL_INTERVAL_MS": (int,),
    "WORKER_CALL_TIMEOUT_SECONDS": (int, float),
    "WORKER_LOST_CALLS": (str,),
    "WORKER_CALL_MAX_ATTEMPTS": (int,),
    "WORKER_CALLS_PER_TENANT": (int,),
    "WORKER_CALLS_PER_AGENT": (int,),
    "WORKER_CALL_LEASE_SECONDS": (int, float),
    "IDEMPOTENCY_TTL_SECONDS": (int, float),
    "RATE_LIMIT_PER_TENANT": (int, float),
    "RATE_BURST_PER_TENANT": (int,),
    "RATE_LIMIT_PER_AGENT": (int, float),
    "RATE_BURST_PER_AGENT": (int,),
    "RATE_LIMIT_PER_TOOL": (int, float),
    "RATE_BURST_PER_TOOL": (int,),
    "STREAMS_PER_TENANT": (int,),
    "STREAMS_PER_AGENT": (int,),
    "SESSIONS_PER_TENANT": (int,),
    "SESSIONS_PER_AGENT": (int,),
    "CAP_LEASE_SECONDS": (int, float),
    "INLINE_TASKS_PER_TENANT": (int,),
    "INLINE_TASKS_PER_AGENT": (int,),
    "FD_RESERVE": (int,),
    "AUTH_FAILURE_RATE": (int, float),
    "AUTH_FAILURE_BURST": (int,),
    "AUTH_NEGATIVE_CACHE_SECONDS": (int, float),
    "AUTH_FAILURE_LOG_INTERVAL_SECONDS": (int, float),
    "WORKER_DISPATCH": (str,),
    "WORKER_QUEUE": (str,),
    "SECRET_KEYS": (list, tuple),
    "OUTBOUND_ALLOWED_NETWORKS": (list, tuple),
    "HTTP_TOOL_ALLOWED_NETWORKS": (list, tuple),
    "OAUTH_CIMD_ALLOWED_NETWORKS": (list, tuple),
    "OAUTH_REGISTRATIONS_PER_HOUR": (int, float),
    "OAUTH_REGISTRATION_BURST": (int,),
    "OAUTH_DENIED_REDIRECT_SCHEMES": (list, tuple),
    "OAUTH_CIMD_FETCHES_PER_HOST": (int,),
    "OAUTH_CONSENT_ROLE": (str,),
    "HTTP_TOOL_MAX_TIMEOUT_SECONDS": (int, float),
    "HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS": (int, float),
    "HTTP_TOOL_MAX_RESPONSE_BYTES": (int,),
    "UPSTREAM_MAX_TIMEOUT_SECONDS": (int, float),
    "UPSTREAM_DEFAULT_TIMEOUT_SECONDS": (int, float),
    "UPSTREAM_CONNECT_TIMEOUT_SECONDS": (int, float),
    "UPSTREAM_MAX_RESPONSE_BYTES": (int,),
    "UPSTREAM_MAX_ENTRIES": (int,),
    "UPSTREAM_MAX_DESCRIPTION_CHARS": (int,),
    "UPSTREAM_MAX_ENTRY_BYTES": (int,),
    "UPSTREAM_MAX_CATALOG_BYTES": (int,),
    "UPSTREAM_SYNC_INTERVAL_SECONDS": (int, float),
    "UPSTREAM_POOL_IDLE_SECONDS": (int, float),
    "UPSTREAM_MAX_CONCURRENT_CALLS": (int,),
    "UPSTREAM_BREAKER_FAILURES": (int,),
    "UPSTREAM_BREAKER_WINDOW_SECONDS": (int, float),
    "UPSTREAM_BREAKER_COOLDOWN_SECONDS": (int, float),
    "AUDIT_ENABLED": (bool,),
    "AUDIT_FLUSH_INTERVAL_SECONDS": (int, float),
    "AUDIT_BUFFER_SIZE": (int,),
    "AUDIT_BATCH_SIZE": (int,),
    "AUDIT_FLUSH_RETRIES": (int,),
    "AUDIT_RETENTION_DAYS": (int,),
    "AUDIT_REDACT_KEYS": (str,),
    "AUDIT_MAX_VALUE_CHARS": (int,),
    "AUDIT_MAX_ITEMS": (int,),
    "METRICS_TOKEN": (str,),
    "HEALTH_CHECK_TIMEOUT_SECONDS": (int, float),
    "TRACING": (bool,),
    "HEARTBEAT_INTERVAL_SECONDS": (int, float),
    "HEARTBEAT_TIMEOUT_SECONDS": (int, float),
    "LIVENESS_SWEEP_SECONDS": (int, float),
    "WORKER_QUEUE_TIMEOUT_SECONDS": (int, float),
    "READYZ_REQUIRES_WORKER": (bool,),
    "INVALIDATION_STALENESS_SECONDS": (int, float),
    "IDENTITY_CACHE_SIZE": (int,),
    "IDENTITY_CACHE_MAX_AGE_SECONDS": (int, float),
    "WRITE_BEHIND_INTERVAL_SECONDS": (int, float),
    "WRITE_BEHIND_MAX_PENDING": (int,),
}


# DRF's rate format: a count, "/", and a period of which DRF reads the first letter.
_RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


class McpSettings:
    """Attribute access to ``MCP_APP`` merged over ``DEFAULTS``, validated once per load."""

    def __init__(self) -> None:
        self._values: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        from django.conf import settings

        user = getattr(settings, "MCP_APP", {}) or {}
        if not isinstance(user, dict):
            raise ImproperlyConfigured("MCP_APP must be a dict.")
        unknown = sorted(set(user) - set(DEFAULTS))
        if unknown:
            raise ImproperlyConfigured(f"Unknown MCP_APP setting(s): {', '.join(unknown)}.")
        values = {**DEFAULTS, **user}
        for key, value in values.items():
            expected = _TYPES[key]
            if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be {' or '.join(t.__name__ for t in expected)}.")
        if not 1 <= values["MAX_JSON_DEPTH"] <= 200:
            raise ImproperlyConfigured("MCP_APP['MAX_JSON_DEPTH'] must be between 1 and 200.")
        if not 1 <= values["MAX_HEADER_BYTES"] <= 16 * 1024:
            raise ImproperlyConfigured(
                "MCP_APP['MAX_HEADER_BYTES'] must be between 1 and 16384 (Twisted's line limit)."
            )
        if values["REQUEST_DEADLINE_SECONDS"] <= 0:
            raise ImproperlyConfigured("MCP_APP['REQUEST_DEADLINE_SECONDS'] must be positive.")
        for key in (
            "MAX_BODY_BYTES",
            "MAX_BATCH_SIZE",
            "CATALOG_CACHE_SIZE",
            "PAGE_SIZE",
            "AUDIT_BUFFER_SIZE",
            "AUDIT_BATCH_SIZE",
            "AUDIT_FLUSH_RETRIES",
            "AUDIT_RETENTION_DAYS",
            "AUDIT_MAX_VALUE_CHARS",
            "AUDIT_MAX_ITEMS",
            "MAX_CLIENT_INFO_BYTES",
            "MAX_REQUEST_LINE_BYTES",
            "IDENTITY_CACHE_SIZE",
            "WRITE_BEHIND_MAX_PENDING",
            "EVENT_STORE_MAX_BYTES",
            "OAUTH_REGISTRATION_BURST",
            "OAUTH_CIMD_FETCHES_PER_HOST",
        ):
            if values[key] < 1:
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be at least 1.")
        for name, config in values["BACKENDS"].items():
            if name not in DEFAULTS["BACKENDS"]:
                raise ImproperlyConfigured(f"Unknown MCP_APP['BACKENDS'] name {name!r}.")
            if not isinstance(config, dict) or "BACKEND" not in config:
                raise ImproperlyConfigured(f"MCP_APP['BACKENDS'][{name!r}] needs a BACKEND dotted path.")
        if values["CACHE_TTL_MS"] < 0:
            raise ImproperlyConfigured("MCP_APP['CACHE_TTL_MS'] must not be negative.")
        if values["HEALTH_CHECK_TIMEOUT_SECONDS"] <= 0:
            raise ImproperlyConfigured("MCP_APP['HEALTH_CHECK_TIMEOUT_SECONDS'] must be positive.")
        for key in (
            "HEARTBEAT_INTERVAL_SECONDS",
            "HEARTBEAT_TIMEOUT_SECONDS",
            "LIVENESS_SWEEP_SECONDS",
            "WORKER_QUEUE_TIMEOUT_SECONDS",
        ):
            if values[key] <= 0:
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be positive.")
        if values["HEARTBEAT_TIMEOUT_SECONDS"] < 2 * values["HEARTBEAT_INTERVAL_SECONDS"]:
            raise ImproperlyConfigured("MCP_APP['HEARTBEAT_TIMEOUT_SECONDS'] must be at least two intervals.")
        if values["WORKER_CALL_LEASE_SECONDS"] <= 0:
            raise ImproperlyConfigured("MCP_APP['WORKER_CALL_LEASE_SECONDS'] must be positive.")
        for key in ("WORKER_CALLS_PER_TENANT", "WORKER_CALLS_PER_AGENT"):
            if values[key] < 0:
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must not be negative (0: unlimited).")
        _check_limit_settings(values)
        for key in (
            "INVALIDATION_STALENESS_SECONDS",
            "IDENTITY_CACHE_MAX_AGE_SECONDS",
            "WRITE_BEHIND_INTERVAL_SECONDS",
        ):
            if values[key] <= 0:
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be positive.")
        if values["SSE_KEEPALIVE_SECONDS"] <= 0:
            raise ImproperlyConfigured("MCP_APP['SSE_KEEPALIVE_SECONDS'] must be positive.")
        _check_http_tool_settings(values)
        for key in ("API_RATE_PER_KEY", "API_RATE_PER_USER"):
            if values[key] is not None and not _RATE.fullmatch(values[key]):
                raise ImproperlyConfigured(
                    f"MCP_APP[{key!r}] must be like '300/minute' (second, minute, hour, day) or None."
                )
        if not 0 < values["AUDIT_FLUSH_INTERVAL_SECONDS"] <= 1:
            raise ImproperlyConfigured(
                "MCP_APP['AUDIT_FLUSH_INTERVAL_SECONDS'] must be in (0, 1]: it bounds what a crash loses."
            )
        try:
            re.compile(values["AUDIT_REDACT_KEYS"])
        except re.error as exc:
            raise ImproperlyConfigured(f"MCP_APP['AUDIT_REDACT_KEYS'] is not a regular expression: {exc}") from exc
        return values

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown MCP_APP setting {name!r}.")
        if self._values is None:
            self._values = self._load()
        return self._values[name]

    def reload(self) -> None:
        self._values = None


def _check_limit_settings(values: dict[str, Any]) -> None:
    for scope in ("TENANT", "AGENT", "TOOL"):
        if values[f"RATE_LIMIT_PER_{scope}"] < 0:
            raise ImproperlyConfigured(f"MCP_APP['RATE_LIMIT_PER_{scope}'] must not be negative (0: unlimited).")
        if values[f"RATE_BURST_PER_{scope}"] < 1:
            raise ImproperlyConfigured(f"MCP_APP['RATE_BURST_PER_{scope}'] must be at least 1.")
    for key in (
        "STREAMS_PER_TENANT",
        "STREAMS_PER_AGENT",
        "SESSIONS_PER_TENANT",
        "SESSIONS_PER_AGENT",
        "INLINE_TASKS_PER_TENANT",
        "INLINE_TASKS_PER_AGENT",
        "FD_RESERVE",
    ):
        if values[key] < 0:
            raise ImproperlyConfigured(f"MCP_APP[{key!r}] must not be negative.")
    if values["OAUTH_REGISTRATIONS_PER_HOUR"] < 0:
        raise ImproperlyConfigured("MCP_APP['OAUTH_REGISTRATIONS_PER_HOUR'] must not be negative (0: none).")
    if values["AUTH_FAILURE_RATE"] <= 0 or values["AUTH_FAILURE_BURST"] < 1:
        raise ImproperlyConfigured("MCP_APP['AUTH_FAILURE_RATE'] must be positive and AUTH_FAILURE_BURST at least 1.")
    if values["CAP_LEASE_SECONDS"] <= 0:
        raise ImproperlyConfigured("MCP_APP['CAP_LEASE_SECONDS'] must be positive.")
    if values["REDIS_MAX_CONNECTIONS"] < 2:
        raise ImproperlyConfigured(
            "MCP_APP['REDIS_MAX_CONNECTIONS'] must be at least 2 (a blocking receive holds one)."
        )
    if values["REDIS_IDLE_SECONDS"] <= 0 or values["REDIS_POOL_WAIT_SECONDS"] <= 0:
        raise ImproperlyConfigured("MCP_APP['REDIS_IDLE_SECONDS'] and REDIS_POOL_WAIT_SECONDS must be positive.")


def _check_http_tool_settings(values: dict[str, Any]) -> None:
    if not all(isinstance(key, str) and key for key in values["SECRET_KEYS"]):
        raise ImproperlyConfigured("MCP_APP['SECRET_KEYS'] must be a list of non-empty strings.")
    for key in ("OUTBOUND_ALLOWED_NETWORKS", "HTTP_TOOL_ALLOWED_NETWORKS", "OAUTH_CIMD_ALLOWED_NETWORKS"):
        try:
            parse_allow_list(values[key])
        except ValueError as exc:
            raise ImproperlyConfigured(f"MCP_APP[{key!r}]: {exc}") from exc
    if values["OAUTH_CONSENT_ROLE"] not in ("viewer", "admin", "owner"):
        raise ImproperlyConfigured("MCP_APP['OAUTH_CONSENT_ROLE'] must be 'viewer', 'admin' or 'owner'.")
    if values["HTTP_TOOL_MAX_TIMEOUT_SECONDS"] <= 0:
        raise ImproperlyConfigured("MCP_APP['HTTP_TOOL_MAX_TIMEOUT_SECONDS'] must be positive.")
    if not 0 < values["HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS"] <= values["HTTP_TOOL_MAX_TIMEOUT_SECONDS"]:
        raise ImproperlyConfigured(
            "MCP_APP['HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS'] must be positive and at most HTTP_TOOL_MAX_TIMEOUT_SECONDS."
        )
    if values["HTTP_TOOL_MAX_RESPONSE_BYTES"] < 1:
        raise ImproperlyConfigured("MCP_APP['HTTP_TOOL_MAX_RESPONSE_BYTES'] must be at least 1.")


mcp_settings = McpSettings()

# What must forget state built from the settings when they change (a backend made from a dotted path, say).
# Modules that build such state register here when imported; the settings never import them (conf is the
# bottom layer: everything reads it, it reads nothing of mcp_app but the stdlib-only netguard).
_reload_hooks: list[Callable[[], None]] = []


def on_reload(hook: Callable[[], None]) -> Callable[[], None]:
    """Call ``hook`` after ``MCP_APP`` changes (``override_settings``); usable as a decorator."""
    _reload_hooks.append(hook)
    return hook


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "MCP_APP":
        mcp_settings.reload()
        for hook in tuple(_reload_hooks):
            hook()
