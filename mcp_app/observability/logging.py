"""Per-request log context and the formatters that write it: JSON in production, readable lines in development.

Each MCP request's mutable ``RequestInfo`` lives in a context variable shared by the tasks it spawns, so fields
bound late (``bind``) reach every line of the request; ``RequestContextFilter`` copies them onto every record, and
both formatters scrub anything shaped like an agent token or a bearer credential. ``logging_config`` puts the one
handler on the root logger, so each record is written exactly once whatever daphne's ``basicConfig`` did first.

``write_direct`` is the access line's own path (one line per request): when the one handler the record would reach
is a plain ``StreamHandler`` or ``FileHandler`` with one of these formatters (``logging_config``'s, or a deployment's
own of the same classes), it formats the line from the request's ``RequestInfo`` and writes it to that handler's
stream under the handler's lock, with no ``LogRecord``, filter or ``Handler.handle``. The text is byte for byte what
the logging path writes, in the same order on the same stream, flushed as the handler flushes. Any other handler,
a filter on the logger, or a second handler (``caplog``, a deployment's own) makes it answer ``False``: the caller
then logs the record, and every handler gets it as before.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
import sys
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


def _redacted(value: Any) -> Any:
    """An extra field as logged: a string (the path) redacted like the message, a number as it is."""
    return redact(value) if isinstance(value, str) else value


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


if sys.version_info >= (3, 13):

    def _now() -> tuple[float, float]:
        """A record's ``created`` and ``msecs`` for now, as ``LogRecord`` computes them."""
        ns = time.time_ns()
        return ns / 1e9, (ns % 1_000_000_000) // 1_000_000 + 0.0

else:

    def _now() -> tuple[float, float]:
        """A record's ``created`` and ``msecs`` for now, as ``LogRecord`` computes them."""
        created = time.time()
        return created, int((created - int(created)) * 1000) + 0.0


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
        entry = self._entry(
            self.formatTime(record),
            record.levelname,
            record.name,
            record.getMessage(),
            [getattr(record, name, "-") for name in CONTEXT_FIELDS],
        )
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                entry[name] = _redacted(getattr(record, name))
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return orjson.dumps(entry, default=str).decode()

    def format_direct(
        self, name: str, created: float, msecs: float, message: str, context: list[str], extra: dict[str, Any]
    ) -> str:
        """``format`` of an INFO record of logger ``name`` made at ``created`` (``msecs``) with ``extra`` and, from the
        request context filter, the fields ``context`` (in ``CONTEXT_FIELDS``' order), without the record."""
        entry = self._entry(self._time(created, msecs), "INFO", name, message, context)
        entry.update((key, _redacted(extra[key])) for key in _EXTRA_FIELDS if key in extra)
        return orjson.dumps(entry, default=str).decode()

    @staticmethod
    def _entry(time: str, level: str, name: str, message: str, context: list[str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"time": time, "level": level, "logger": name, "message": redact(message)}
        for key, value in zip(CONTEXT_FIELDS, context, strict=True):
            if value and value != "-":
                entry[key] = value
        return entry

    def __init__(self) -> None:
        super().__init__()
        self._stamp = _SecondStamp(lambda second: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self._time(record.created, record.msecs)

    def _time(self, created: float, msecs: float) -> str:
        return f"{self._stamp(created)}.{int(msecs):03d}Z"


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
        record.context = self._context([getattr(record, name, "-") for name in CONTEXT_FIELDS])
        return redact(super().format(record))

    def format_direct(
        self, name: str, created: float, msecs: float, message: str, context: list[str], extra: dict[str, Any]
    ) -> str:
        """``format`` of an INFO record of logger ``name`` made at ``created`` (see ``JsonFormatter.format_direct``;
        this format shows no ``extra`` field)."""
        stamp = (self.default_msec_format or "%s,%03d") % (self._stamp(created), msecs)
        return redact(f"{stamp} INFO {name} {self._context(context)}{message}")

    @staticmethod
    def _context(context: list[str]) -> str:
        request_id, tenant, server, agent, method, _era = context
        if request_id == "-":
            return ""
        where = "/".join(v for v in (tenant, server) if v != "-")
        return "[" + " ".join(p for p in (request_id, where, agent, method) if p and p != "-") + "] "


#: The fields a record's ``extra`` may give the JSON format (the access line's), in the order they are written.
_EXTRA_FIELDS = ("status", "duration_ms", "http_method", "path")
#: The formatters whose ``format_direct`` writes what their ``format`` would (exactly these classes).
_DIRECT_FORMATTERS = (JsonFormatter, ConsoleFormatter)
#: The handlers whose ``emit`` is a write of the formatted line and its terminator, then a flush (exactly these).
_DIRECT_HANDLERS = (logging.StreamHandler, logging.FileHandler)


def _only_handler(logger: logging.Logger) -> logging.Handler | None:
    """The one handler an INFO record of ``logger`` would reach when ``write_direct`` can stand in for it, else
    ``None``: no filter on the logger, exactly one handler in its propagation chain (none ignoring INFO), a plain
    stream or open file handler with one of this module's formatters and no filter but ``RequestContextFilter``."""
    if logger.filters or logger.disabled:
        return None
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None:
                return None
            found = handler
        current = current.parent if current.propagate else None
    if (
        found is None
        or type(found) not in _DIRECT_HANDLERS
        or type(found.formatter) not in _DIRECT_FORMATTERS
        or found.level > logging.INFO
        or getattr(found, "stream", None) is None  # a FileHandler opened on its first record
        or any(type(f) is not RequestContextFilter for f in found.filters)
    ):
        return None
    return found


def write_direct(logger: logging.Logger, message: str, extra: dict[str, Any], info: RequestInfo) -> bool:
    """Write ``logger``'s INFO line for ``message`` (formatted already) with ``extra``, in request ``info``, straight
    to its one handler's stream (see the module's docstring); ``False`` when the logging path must write it. The
    caller has checked ``logger.isEnabledFor(logging.INFO)``."""
    handler = _only_handler(logger)
    if handler is None:
        return False
    assert isinstance(handler, logging.StreamHandler)  # one of _DIRECT_HANDLERS
    formatter = handler.formatter
    assert isinstance(formatter, _DIRECT_FORMATTERS)
    # What RequestContextFilter would add (the caller's request is the current one); without it, no field.
    context = (
        [getattr(info, name) or "-" for name in CONTEXT_FIELDS] if handler.filters else ["-"] * len(CONTEXT_FIELDS)
    )
    try:
        line = formatter.format_direct(logger.name, *_now(), message, context, extra) + handler.terminator
    except Exception:  # the logging path reports it (Handler.handleError), as for any record
        return False
    handler.acquire()
    try:  # StreamHandler.emit's write and flush, under the lock handle() would hold
        stream = handler.stream
        stream.write(line)
        if hasattr(stream, "flush"):
            stream.flush()
    except Exception:  # a failing stream: the logging path writes the record and reports the failure as it would
        return False
    finally:
        handler.release()
    return True


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
