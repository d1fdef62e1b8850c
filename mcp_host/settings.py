"""Settings of the reference deployment, read from the environment.

Every variable read here is in the table of ``docs/deployment.md`` (a test keeps the two in step). The main ones:

DATABASE_URL    unset: SQLite at MCP_SQLITE_PATH (default: db.sqlite3 next to manage.py); e.g. postgres://…/mcp
REDIS_URL       unset: in-memory channel layer, local-memory cache, in-memory event store, eager Celery (one
                process); set: Redis for all four
SECRET_KEY      unset: a development key, refused when MCP_PRODUCTION is on and DEBUG is off
ALLOWED_HOSTS   comma-separated; default: localhost, 127.0.0.1, [::1]
DEBUG           "1"/"true"/"yes"/"on" to enable; default off
MCP_PRODUCTION  on: refuse the development key, JSON logs, and secure defaults (SSL redirect, HSTS, secure
                cookies) that the SECURE_* variables may still override
MCP_SECRET_KEYS comma-separated keys for secrets at rest (newest first); unset: derived from SECRET_KEY
MCP_INVALIDATION without Redis: "database" (processes follow cache invalidations in the database; what manage.py
                and mcp_host.asgi default to, so an edit from a shell reaches daphne) or "local" (one process;
                the default of these settings imported alone, e.g. by tests)
STATIC_ROOT     where collectstatic puts static files (served by WhiteNoise); default: staticfiles/ next to manage.py

``manage.py check --deploy --fail-level WARNING`` is clean with the production environment of
``docs/deployment.md`` (tests/test_deployment.py runs it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from mcp_app.channel_layer import redis_layer_config
from mcp_app.database import postgres_options
from mcp_app.oauth.provider import provider_settings
from mcp_app.observability.logging import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = _env_flag("DEBUG")
PRODUCTION = _env_flag("MCP_PRODUCTION")
_DEV_SECRET = "insecure-development-key-do-not-use-in-production"  # noqa: S105
SECRET_KEY = os.environ.get("SECRET_KEY") or _DEV_SECRET
if SECRET_KEY == _DEV_SECRET and not DEBUG and PRODUCTION:
    raise ImproperlyConfigured("Set SECRET_KEY in production.")
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS")

# HTTPS. In production the secure choices are the defaults; each variable can still turn its setting off (or on
# in development). /healthz, /readyz and /metrics are not Django views, so the SSL redirect never touches them.
SECURE_SSL_REDIRECT = _env_flag("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS") or (31_536_000 if PRODUCTION else 0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_flag("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = _env_flag("SECURE_HSTS_PRELOAD")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _env_flag("SECURE_COOKIES", PRODUCTION)
# Behind a TLS-terminating proxy that sets (and strips from clients) this header, e.g. X-Forwarded-Proto.
_PROXY_SSL_HEADER = os.environ.get("SECURE_PROXY_SSL_HEADER", "").strip()
if _PROXY_SSL_HEADER:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https")

INSTALLED_APPS = [
    "daphne",
    # Before unfold: its few overrides of unfold's templates win (object names in titles as written).
    "mcp_app",
    # The admin's theme (before django.contrib.admin: its templates win) and the JSON editor's assets.
    "unfold",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_json_widget",
    "oauth2_provider",
    "axes",
    "mcp_app.contrib.demo",
    "mcp_app.contrib.conformance",
]

# The admin: django-unfold, branded, its sidebar grouped and its index a dashboard (mcp_app.admin.theme).
UNFOLD = {
    "SITE_TITLE": "mcp-host",
    "SITE_HEADER": "mcp-host",
    "SITE_SUBHEADER": "MCP servers, hosted",
    "SITE_SYMBOL": "hub",
    "SHOW_HISTORY": True,
    "DASHBOARD_CALLBACK": "mcp_app.admin.dashboard.dashboard_callback",
    "SIDEBAR": {"show_search": True, "navigation": "mcp_app.admin.theme.sidebar"},
}

# The API's views choose their own schema class; drf-spectacular's `check --deploy` (drf_spectacular.E001)
# generates the whole schema with the project default, which must be its AutoSchema too.
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS and JS) served by the application itself, under daphne, DEBUG on or off.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A view failing on the database unavailable: 503 with Retry-After, one log line (docs/deployment.md).
    "mcp_app.database.middleware.DatabaseUnavailableMiddleware",
    # Last, as django-axes asks: answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]

# Brute force on logins (docs/limits.md): django-axes counts failed Django authenticate() calls (the admin's login
# and any other login form built on it), per client address, in the database every process shares; after
# AXES_FAILURE_LIMIT failures the address gets 429 for AXES_COOLOFF_TIME hours. A success resets the count.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("MCP_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = 0.25
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # no row per successful login
AXES_VERBOSE = False

ROOT_URLCONF = "mcp_host.urls"
ASGI_APPLICATION = "mcp_host.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

_SQLITE_PATH = os.environ.get("MCP_SQLITE_PATH") or str(BASE_DIR / "db.sqlite3")
DATABASES = {
    # Persistent connections: every request queries the database from a worker thread, and opening a connection
    # per request would cost more than the queries. Health checks drop connections the server closed.
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{_SQLITE_PATH}", conn_max_age=60, conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A bounded pool per process instead of a connection per thread (docs/deployment.md, "PostgreSQL
    # connections": processes x MCP_DATABASE_POOL_SIZE <= max_connections - reserve), and every wait bounded, so
    # a database that is down or partitioned gets 503s in seconds (mcp_app.database).
    DATABASES["default"]["ENGINE"] = "mcp_app.database"  # Django's, refusing at once while the database is down
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # pooled: Django's close hands the connection back to the pool
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update(
        postgres_options(
            pool_size=int(os.environ.get("MCP_DATABASE_POOL_SIZE") or 20),
            pool_timeout=float(os.environ.get("MCP_DATABASE_POOL_TIMEOUT") or 5),
            connect_timeout=int(os.environ.get("MCP_DATABASE_CONNECT_TIMEOUT") or 5),
            statement_timeout=float(os.environ.get("MCP_DATABASE_STATEMENT_TIMEOUT") or 10),
        )
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (daphne, workers, tests) share the file: wait for locks instead of failing at once, and
    # let a test run use a file that a separate daphne process can open.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
    # One file per test process, so concurrent test runs never share (and corrupt) a test database.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("MCP_TEST_SQLITE_PATH")
        or os.path.join(tempfile.gettempdir(), f"mcp-host-test-{os.getpid()}.sqlite3")
    }

REDIS_URL = os.environ.get("REDIS_URL") or None
if REDIS_URL:
    # Socket options that keep channels-redis's blocking receive from timing out (see mcp_app.channel_layer).
    CHANNEL_LAYERS = {"default": redis_layer_config(REDIS_URL, prefix=os.environ.get("MCP_CHANNEL_PREFIX", "mcp"))}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
CELERY_TASK_ALWAYS_EAGER = REDIS_URL is None
# Worker calls (mcp_app.workers) are long: each worker process takes one message at a time, acknowledged after
# the outcome is stored; a message whose whole worker died is redelivered after the visibility timeout.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes the worker's database connections around every task unless this is set; a worker
# call would then open a PostgreSQL connection each time (~4 ms measured, bench/workers.py). Django's CONN_MAX_AGE
# and health checks still retire old or broken connections (mcp_app.workers.running.execute calls close_old_connections
# before each call's first query).
CELERY_DB_REUSE_MAX = 1000
if REDIS_URL:
    # kombu's Redis transport with one client per channel (mcp_app.broker): the stock one builds a Redis client for
    # every publish and acknowledgement.
    CELERY_BROKER_TRANSPORT = "mcp_app.broker:Transport"
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": float(os.environ.get("MCP_BROKER_VISIBILITY_TIMEOUT") or 3600)}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# `manage.py collectstatic --noinput` (make run does it) fills STATIC_ROOT; WhiteNoise serves it. With DEBUG on it
# also serves straight from the apps, so a fresh checkout has a styled admin before collectstatic.
STATIC_ROOT = os.environ.get("STATIC_ROOT") or str(BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MCP_APP: dict[str, object] = {}
if REDIS_URL:
    # Several processes: every piece of shared state in Redis (docs/architecture.md, "Where shared state lives"),
    # so SSE events resume on any process, changes reach every process's caches, and limits, leases, heartbeats
    # and breakers hold across them all.
    MCP_APP["BACKENDS"] = {
        "EVENT_STORE": {"BACKEND": "mcp_app.transport.eventstore.RedisEventStore", "OPTIONS": {"url": REDIS_URL}},
        "INVALIDATION": {"BACKEND": "mcp_app.invalidation.RedisInvalidation", "OPTIONS": {"url": REDIS_URL}},
        "HEARTBEAT": {"BACKEND": "mcp_app.heartbeat.RedisHeartbeats", "OPTIONS": {"url": REDIS_URL}},
        "WORKER_QUOTAS": {"BACKEND": "mcp_app.limits.quotas.RedisQuotas", "OPTIONS": {"url": REDIS_URL}},
        "STREAM_CAPS": {
            "BACKEND": "mcp_app.limits.quotas.RedisQuotas",
            "OPTIONS": {"url": REDIS_URL, "prefix": "mcp:cap:streams"},
        },
        "RATE_LIMITS": {"BACKEND": "mcp_app.limits.rates.RedisRates", "OPTIONS": {"url": REDIS_URL}},
        "BUDGETS": {"BACKEND": "mcp_app.limits.budgets.RedisBudgets", "OPTIONS": {"url": REDIS_URL}},
        "BREAKERS": {"BACKEND": "mcp_app.federation.breaker.RedisBreakers", "OPTIONS": {"url": REDIS_URL}},
    }
elif os.environ.get("MCP_INVALIDATION") == "database":
    # Several processes without Redis: they follow a table of the shared database instead.
    MCP_APP["BACKENDS"] = {"INVALIDATION": {"BACKEND": "mcp_app.invalidation.DatabaseInvalidation", "OPTIONS": {}}}
# Rates per second (0: unlimited; the fields on tenants, agents and tools override them, docs/limits.md).
for _name in (
    "HEARTBEAT_INTERVAL_SECONDS",
    "HEARTBEAT_TIMEOUT_SECONDS",
    "WORKER_QUEUE_TIMEOUT_SECONDS",
    "RATE_LIMIT_PER_TENANT",
    "RATE_LIMIT_PER_AGENT",
):
    if os.environ.get(f"MCP_{_name}"):
        MCP_APP[_name] = float(os.environ[f"MCP_{_name}"])
if os.environ.get("MCP_WRITE_BEHIND_INTERVAL_SECONDS"):
    MCP_APP["WRITE_BEHIND_INTERVAL_SECONDS"] = float(os.environ["MCP_WRITE_BEHIND_INTERVAL_SECONDS"])
if os.environ.get("MCP_SSE_KEEPALIVE_SECONDS"):
    MCP_APP["SSE_KEEPALIVE_SECONDS"] = float(os.environ["MCP_SSE_KEEPALIVE_SECONDS"])
if _env_list("MCP_SECRET_KEYS"):
    MCP_APP["SECRET_KEYS"] = _env_list("MCP_SECRET_KEYS")
if _env_list("MCP_OUTBOUND_ALLOWED_NETWORKS"):
    MCP_APP["OUTBOUND_ALLOWED_NETWORKS"] = _env_list("MCP_OUTBOUND_ALLOWED_NETWORKS")
if _env_list("MCP_HTTP_TOOL_ALLOWED_NETWORKS"):
    MCP_APP["HTTP_TOOL_ALLOWED_NETWORKS"] = _env_list("MCP_HTTP_TOOL_ALLOWED_NETWORKS")
if _env_list("MCP_BUDGET_ALERT_ALLOWED_NETWORKS"):
    MCP_APP["BUDGET_ALERT_ALLOWED_NETWORKS"] = _env_list("MCP_BUDGET_ALERT_ALLOWED_NETWORKS")
if os.environ.get("MCP_METRICS_TOKEN"):
    MCP_APP["METRICS_TOKEN"] = os.environ["MCP_METRICS_TOKEN"]

if os.environ.get("MCP_GC_FREEZE"):
    MCP_APP["GC_FREEZE_AT_STARTUP"] = _env_flag("MCP_GC_FREEZE")
if os.environ.get("MCP_DAPHNE_TUNING"):
    MCP_APP["DAPHNE_TUNING"] = _env_flag("MCP_DAPHNE_TUNING")
if os.environ.get("MCP_WORKER_LOST_CALLS"):
    MCP_APP["WORKER_LOST_CALLS"] = os.environ["MCP_WORKER_LOST_CALLS"]
if os.environ.get("MCP_WORKER_CALL_MAX_ATTEMPTS"):
    MCP_APP["WORKER_CALL_MAX_ATTEMPTS"] = int(os.environ["MCP_WORKER_CALL_MAX_ATTEMPTS"])
if os.environ.get("MCP_WORKER_CALL_TIMEOUT_SECONDS"):
    MCP_APP["WORKER_CALL_TIMEOUT_SECONDS"] = float(os.environ["MCP_WORKER_CALL_TIMEOUT_SECONDS"])
if os.environ.get("MCP_WORKER_QUEUE"):
    MCP_APP["WORKER_QUEUE"] = os.environ["MCP_WORKER_QUEUE"]
if os.environ.get("MCP_WORKER_DISPATCH"):
    MCP_APP["WORKER_DISPATCH"] = os.environ["MCP_WORKER_DISPATCH"]
if os.environ.get("MCP_IDLE_TIMEOUT_SECONDS"):
    MCP_APP["IDLE_TIMEOUT_SECONDS"] = float(os.environ["MCP_IDLE_TIMEOUT_SECONDS"])
if os.environ.get("MCP_MAX_PENDING_BYTES"):
    MCP_APP["MAX_PENDING_BYTES"] = int(os.environ["MCP_MAX_PENDING_BYTES"])
if os.environ.get("MCP_EVENT_STORE_MAX_BYTES_PER_AGENT"):
    MCP_APP["EVENT_STORE_MAX_BYTES_PER_AGENT"] = int(os.environ["MCP_EVENT_STORE_MAX_BYTES_PER_AGENT"])
if os.environ.get("MCP_EVENT_STORE_MAX_BYTES_PER_TENANT"):
    MCP_APP["EVENT_STORE_MAX_BYTES_PER_TENANT"] = int(os.environ["MCP_EVENT_STORE_MAX_BYTES_PER_TENANT"])
if os.environ.get("MCP_REDIS_MAX_CONNECTIONS"):
    MCP_APP["REDIS_MAX_CONNECTIONS"] = int(os.environ["MCP_REDIS_MAX_CONNECTIONS"])
if os.environ.get("MCP_REQUEST_DEADLINE_SECONDS"):
    MCP_APP["REQUEST_DEADLINE_SECONDS"] = float(os.environ["MCP_REQUEST_DEADLINE_SECONDS"])
if os.environ.get("MCP_SSE_RESUME_IDLE_SECONDS"):
    MCP_APP["SSE_RESUME_IDLE_SECONDS"] = float(os.environ["MCP_SSE_RESUME_IDLE_SECONDS"])
# OpenTelemetry traces (docs/observability.md): MCP_TRACING=1, or on by default once an OTLP endpoint is set
# (OTEL_SDK_DISABLED=true keeps them off); the SDK reads the other OTEL_* variables itself.
_OTLP_ENDPOINT = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
MCP_APP["TRACING"] = _env_flag("MCP_TRACING", default=bool(_OTLP_ENDPOINT)) and not _env_flag("OTEL_SDK_DISABLED")

# OAuth 2.1 for MCP clients (mcp_app.oauth, docs/oauth.md): DOT configured by mcp_app, lifetimes from the env.
OAUTH2_PROVIDER = provider_settings(
    access_token_seconds=int(os.environ.get("MCP_OAUTH_ACCESS_TOKEN_SECONDS") or 3600),
    refresh_token_seconds=int(os.environ.get("MCP_OAUTH_REFRESH_TOKEN_SECONDS") or 30 * 86400),
)
# DOT warns that http redirect URIs are allowed: they are, for loopback hosts only (RFC 8252 native clients;
# mcp_app.oauth.validator refuses http anywhere else).
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]
if _env_list("MCP_OAUTH_CIMD_ALLOWED_NETWORKS"):
    MCP_APP["OAUTH_CIMD_ALLOWED_NETWORKS"] = _env_list("MCP_OAUTH_CIMD_ALLOWED_NETWORKS")
if os.environ.get("MCP_OAUTH_REGISTRATIONS_PER_HOUR"):
    MCP_APP["OAUTH_REGISTRATIONS_PER_HOUR"] = int(os.environ["MCP_OAUTH_REGISTRATIONS_PER_HOUR"])
if os.environ.get("MCP_OAUTH_REGISTRATION_BURST"):
    MCP_APP["OAUTH_REGISTRATION_BURST"] = int(os.environ["MCP_OAUTH_REGISTRATION_BURST"])
if os.environ.get("MCP_OAUTH_CONSENT_ROLE"):
    MCP_APP["OAUTH_CONSENT_ROLE"] = os.environ["MCP_OAUTH_CONSENT_ROLE"]

# One handler, on the root logger: each record and each traceback is written once (see observability.logging).
_LOG_FORMAT = os.environ.get("MCP_LOG_FORMAT") or ("json" if PRODUCTION else "console")
if _LOG_FORMAT not in ("json", "console"):
    raise ImproperlyConfigured("MCP_LOG_FORMAT must be json or console.")
LOGGING = logging_config(
    json=_LOG_FORMAT == "json",
    level=os.environ.get("MCP_LOG_LEVEL", "INFO"),
    access_log=_env_flag("MCP_ACCESS_LOG", True),
)
