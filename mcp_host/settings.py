"""Settings of the reference deployment, read from the environment.

DATABASE_URL   unset: a SQLite file next to manage.py; e.g. postgres://postgres@127.0.0.1:5432/mcp
REDIS_URL      unset: in-memory channel layer and local-memory cache (one process); e.g. redis://127.0.0.1:6379/0
SECRET_KEY     unset: a development key (refused when DEBUG is off)
ALLOWED_HOSTS  comma-separated; default: localhost, 127.0.0.1, [::1]
DEBUG          "1"/"true" to enable; default off
STATIC_ROOT    where collectstatic puts static files (served by WhiteNoise); default: staticfiles/ next to manage.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _env_flag("DEBUG")
_DEV_SECRET = "insecure-development-key-do-not-use-in-production"  # noqa: S105
SECRET_KEY = os.environ.get("SECRET_KEY") or _DEV_SECRET
if SECRET_KEY == _DEV_SECRET and not DEBUG and _env_flag("MCP_PRODUCTION"):
    raise ImproperlyConfigured("Set SECRET_KEY in production.")
ALLOWED_HOSTS = [
    host.strip() for host in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if host.strip()
]

INSTALLED_APPS = [
    "daphne",
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
    "mcp_app",
    "mcp_app.contrib.demo",
    "mcp_app.contrib.conformance",
]

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
]

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
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": os.environ.get("MCP_CHANNEL_PREFIX", "mcp")},
        }
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
CELERY_TASK_ALWAYS_EAGER = REDIS_URL is None

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
    # Several daphne processes: SSE events must be resumable on any of them.
    MCP_APP["EVENT_STORE"] = {"BACKEND": "mcp_app.transport.eventstore.RedisEventStore", "OPTIONS": {"url": REDIS_URL}}
if os.environ.get("MCP_SSE_KEEPALIVE_SECONDS"):
    MCP_APP["SSE_KEEPALIVE_SECONDS"] = float(os.environ["MCP_SSE_KEEPALIVE_SECONDS"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"mcp_app": {"handlers": ["console"], "level": os.environ.get("MCP_LOG_LEVEL", "INFO")}},
}
