"""Per-request log context and the formatters that write it: JSON in production, readable lines in development.

Each MCP request's mutable ``RequestInfo`` lives in a context variable shared by the tasks it spawns, so fields
bound late (``bind``) reach every line of the request; ``RequestContextFilter`` copies them onto every record, and
both formatters scrub anything shaped like an agent token or a bearer credential. ``logging_config`` puts the one
handler on the root logger, so each record is written exactly once whatever daphne's ``basicConfig`` did first.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

CONTEXT_FIELDS = ("request_id", "tenant", "server", "agent", "method", "era")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_SECRETS = re.compile(r"\bmcp_[0-9a-f]{8}_[A-Za-z0-9_\-]+|(?i:\bbearer\s+)[A-Za-z0-9._~+/=\-]+")
REDACTED = "[redacted]"


@dataclass
class RequestInfo:
    """What the log lines and metrics of one request say about it; filled in as the request is understood."""

    request_id: str
    http_method: str = ""
    path: str = ""
    tenant: str = ""
    server: str = ""
    agent: str = ""
    method: str = ""
    era: str = ""
    started: float = field(default_factory=time.perf_counter)


_current: contextvars.ContextVar[RequestInfo | None] = contextvars.ContextVar("mcp_request", default=None)


def new_request_id(offered: str | None = None) -> str:
    """The client's ``X-Request-ID`` when it is a plausible id (bounded, no spaces or control characters)."""
    if offered and _REQUEST_ID.match(offered):
        return offered
    return secrets.token_hex(8)


def start_request(info: RequestInfo) -> contextvars.Token[RequestInfo | None]:
    return _current.set(info)


def end_request(token: contextvars.Token[RequestInfo | None]) -> None:
    _current.reset(token)


def bind(**fields: str) -> None:
    """Attach fields (``tenant``, ``server``, ``agent``, ``method``, ``era``) to the current request's log lines
    (a no-op outside a request). Never bind a token, a secret or an argument value."""
    info = _current.get()
    if info is None:
        return
    for name, value in fields.items():
        setattr(info, name, value)


def redact(text: str) -> str:
    # No token starts "mcp_app" (a token has 8 hex digits after "mcp_"): the logger names in every line need no scan.
    if "earer" not in text and text.count("mcp_") == text.count("mcp_app"):
        return text
    return _SECRETS.sub(REDACTED, text)


class _SecondStamp:
    """The formatted time of the last second seen, so that a formatter runs ``strftime`` once per second, not once
    per record (one tuple, replaced whole: any thread reads a consistent pair)."""

    def __init__(self, render: Any) -> None:
        self._render = render
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = int(created)
        last = self._last
        if last[0] != second:
            last = self._last = (second, self._render(second))
        return last[1]


class RequestContextFilter(logging.Filter):
    """Adds the current request's fields to every record (``-`` when there is none or a field is unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = _current.get()
        for name in CONTEXT_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, (getattr(info, name) or "-") if info is not None else "-")
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the request fields, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, "-")
            if value and value != "-":
                entry[name] = value
        for name in ("status", "duration_ms", "http_method", "path"):
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return orjson.dumps(entry, default=str).decode()

    def __init__(self) -> None:
        super().__init__()
        self._stamp = _SecondStamp(lambda second: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return f"{self._stamp(record.created)}.{int(record.msecs):03d}Z"


class ConsoleFormatter(logging.Formatter):
    """``time LEVEL logger [request tenant/server agent method] message`` for development terminals."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(context)s%(message)s")
        self._stamp = _SecondStamp(lambda second: time.strftime(self.default_time_format, self.converter(second)))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        msec_format = self.default_msec_format
        if datefmt or not msec_format:
            return super().formatTime(record, datefmt)
        return msec_format % (self._stamp(record.created), record.msecs)

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", "-")
        if request_id != "-":
            where = "/".join(v for v in (getattr(record, "tenant", "-"), getattr(record, "server", "-")) if v != "-")
            parts = [request_id, where, getattr(record, "agent", "-"), getattr(record, "method", "-")]
            record.context = "[" + " ".join(p for p in parts if p and p != "-") + "] "
        else:
            record.context = ""
        return redact(super().format(record))


#: Where Celery logs each task's receipt and success (``celery.worker.strategy``, ``celery.app.trace``).
CELERY_TASK_LOGGERS = ("celery.worker.strategy", "celery.app.trace")


def logging_config(*, json: bool, level: str = "INFO", access_log: bool = True) -> dict[str, Any]:
    """A ``LOGGING`` dictionary: one stderr handler, on the root logger only (so each record is written once),
    JSON or console; mcp_app at ``level``, Celery's per-task lines only at ``DEBUG``, ``mcp_app.access`` (one line
    per MCP request) off with ``access_log=False``."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_context": {"()": "mcp_app.observability.logging.RequestContextFilter"}},
        "formatters": {
            "json": {"()": "mcp_app.observability.logging.JsonFormatter"},
            "console": {"()": "mcp_app.observability.logging.ConsoleFormatter"},
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "json" if json else "console",
                "filters": ["request_context"],
            }
        },
        "root": {"handlers": ["default"], "level": "WARNING"},
        "loggers": {
            # Django's defaults give "django" its own console handler (DEBUG only) and mail_admins; replacing the
            # logger leaves just propagation to the root handler.
            "django": {"level": "INFO", "handlers": [], "propagate": True},
            "daphne": {"level": "INFO"},
            "mcp_app": {"level": level},
            "mcp_app.access": {"level": "INFO" if access_log else "WARNING"},
            # Celery's two lines per task ("received", "succeeded") only at DEBUG: every worker call is in its
            # record and the audit already (docs/workers.md#performance). Failures and retries log at ERROR and WARNING.
            **{name: {"level": "INFO" if level == "DEBUG" else "WARNING"} for name in CELERY_TASK_LOGGERS},
            # The HTTP clients of webhooks and upstreams log every request's URL at INFO (and the SDK's client
            # its session ids): a URL may carry a key, so they speak only of failures, also in a Celery worker
            # (whose root logger is at INFO).
            **{name: {"level": "WARNING"} for name in ("httpx", "httpx2", "mcp.client")},
        },
    }
