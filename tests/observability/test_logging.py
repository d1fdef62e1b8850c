"""Structured logs: one line per record (tracebacks once), request fields on every line, secrets scrubbed.

The configuration test runs a fresh interpreter the way daphne starts: ``logging.basicConfig`` on the root logger
first (daphne's CLI does that), then Django's ``LOGGING`` from the reference settings. The old configuration
gave ``mcp_app`` a handler of its own that also propagated to daphne's root handler: every line twice.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_app.observability.logging import (
    ConsoleFormatter,
    JsonFormatter,
    RequestContextFilter,
    RequestInfo,
    bind,
    end_request,
    redact,
    start_request,
)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "mcp_0123abcd_" + "S" * 43

SCRIPT = """
import logging, os
logging.basicConfig(level=logging.INFO)  # what daphne's CLI does before it imports the application
import django
django.setup()
log = logging.getLogger("mcp_app.runtime")
try:
    raise RuntimeError("unique-failure-marker")
except RuntimeError:
    log.exception("tool boom raised")
"""


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_traceback_is_written_once_under_daphnes_root_handler(log_format: str) -> None:
    env = {key: value for key, value in os.environ.items() if key not in ("MCP_LOG_FORMAT", "MCP_PRODUCTION", "DEBUG")}
    env.update({"DJANGO_SETTINGS_MODULE": "mcp_host.settings", "MCP_LOG_FORMAT": log_format})
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stderr.count("unique-failure-marker") == 1, result.stderr
    assert result.stderr.count("tool boom raised") == 1, result.stderr
    if log_format == "json":
        (line,) = [line for line in result.stderr.splitlines() if "tool boom raised" in line]
        entry = json.loads(line)
        assert entry["level"] == "ERROR"
        assert entry["logger"] == "mcp_app.runtime"
        assert "Traceback" in entry["exception"]


def _record(message: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    record = logging.LogRecord("mcp_app.test", logging.INFO, __file__, 1, message, args, exc_info)  # type: ignore[arg-type]
    RequestContextFilter().filter(record)
    return record


def test_records_carry_the_bound_request_fields() -> None:
    token = start_request(RequestInfo(request_id="req-1", server="orders"))
    try:
        bind(tenant="acme", agent="bot", method="tools/call", era="modern")
        entry = json.loads(JsonFormatter().format(_record("hello %s", "world")))
    finally:
        end_request(token)
    assert entry["message"] == "hello world"
    assert {key: entry[key] for key in ("request_id", "tenant", "server", "agent", "method", "era")} == {
        "request_id": "req-1",
        "tenant": "acme",
        "server": "orders",
        "agent": "bot",
        "method": "tools/call",
        "era": "modern",
    }
    outside = json.loads(JsonFormatter().format(_record("no request")))
    assert "request_id" not in outside


def test_tokens_and_bearer_credentials_are_scrubbed() -> None:
    try:
        raise ValueError(f"bad token {TOKEN}")
    except ValueError:
        record = _record("headers %s", {"authorization": "Bearer abc.def-ghi"}, exc_info=sys.exc_info())
    for formatter in (JsonFormatter(), ConsoleFormatter()):
        text = formatter.format(record)
        assert TOKEN not in text
        assert "abc.def-ghi" not in text
        assert "[redacted]" in text


def test_a_token_beside_the_loggers_own_name_is_scrubbed() -> None:
    # Every line names an "mcp_app" logger; a token elsewhere in it is still found.
    record = _record("mcp_app saw %s", TOKEN)
    for formatter in (JsonFormatter(), ConsoleFormatter()):
        text = formatter.format(record)
        assert TOKEN not in text and "[redacted]" in text and "mcp_app" in text


def test_the_time_of_a_line_is_that_of_its_record_within_one_second() -> None:
    import time

    json_formatter, console = JsonFormatter(), ConsoleFormatter()  # one each: their stamp of the second is reused
    for created in (1_733_400_000.123, 1_733_400_000.987, 1_733_400_001.004, 1_733_399_999.5):
        record = _record("tick")
        record.created, record.msecs = created, (created - int(created)) * 1000
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        assert json.loads(json_formatter.format(record))["time"] == f"{stamp}.{int(record.msecs):03d}Z"
        assert console.formatTime(record) == logging.Formatter().formatTime(record)
        assert console.format(record).startswith(logging.Formatter().formatTime(record))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.django_db(transaction=True)
async def test_a_claimed_agent_id_that_is_no_slug_is_not_logged(
    access: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcp_host.asgi  # noqa: F401  (loading the application configures logging, dropping handlers added before)
    from mcp_app.observability import asgi
    from tests.helpers import call, rpc

    # 401 lines are sampled (one per interval): an earlier test's refusal must not leave this one out.
    monkeypatch.setitem(asgi._refusals, "next", 0.0)

    collect = _Collect()
    collect.addFilter(RequestContextFilter())
    access_logger = logging.getLogger("mcp_app.access")
    access_logger.addHandler(collect)
    try:
        reply = await call(access, rpc("ping"), query="agentId=evil%0Aforged-line", drop=("authorization",))
    finally:
        access_logger.removeHandler(collect)
    assert reply.status == 401
    (record,) = collect.records
    assert record.agent == "?"  # type: ignore[attr-defined]
    assert "forged" not in ConsoleFormatter().format(record)


@pytest.mark.parametrize("formatter_class", [ConsoleFormatter, JsonFormatter])
@pytest.mark.parametrize("with_filter", [True, False])
@pytest.mark.parametrize(
    ("info", "status", "skipped"),
    [
        (RequestInfo("req-7", "POST", "/mcp/orders", "acme", "orders", "bot", "tools/call", "modern"), 200, 0),
        (RequestInfo("req-8", "POST", f"/mcp/x/{TOKEN}", server="x"), 401, 3),  # the token in the path is scrubbed
        (RequestInfo("req-9", "GET", "/mcp/orders", agent="?"), 0, 0),  # no status: "-"
    ],
)
def test_the_access_lines_own_path_writes_what_the_logging_path_writes(
    formatter_class: type[logging.Formatter],
    with_filter: bool,
    info: RequestInfo,
    status: int,
    skipped: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import time

    from mcp_app.observability import asgi

    # One clock for both lines: LogRecord reads time.time() (time.time_ns() from Python 3.13).
    monkeypatch.setattr(time, "time", lambda: 1_733_400_000.0456)
    monkeypatch.setattr(time, "time_ns", lambda: 1_733_400_000_045_600_000)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_class())
    if with_filter:
        handler.addFilter(RequestContextFilter())
    access_logger = logging.getLogger("mcp_app.access")
    monkeypatch.setattr(access_logger, "handlers", [handler])
    monkeypatch.setattr(access_logger, "propagate", False)
    level = access_logger.level
    access_logger.setLevel(logging.INFO)
    token = start_request(info)
    try:
        # The access logger's only handler is a plain stream handler with mcp_app's formatter: no record is made.
        factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(lambda *args, **kwargs: pytest.fail("the logging path was taken"))
        try:
            asgi._write_access_line(status, skipped, info, 0.01234)
        finally:
            logging.setLogRecordFactory(factory)
        # A second handler (caplog, a deployment's own): every handler gets the record, by the logging path.
        collect = _Collect()
        access_logger.handlers.append(collect)
        asgi._write_access_line(status, skipped, info, 0.01234)
    finally:
        end_request(token)
        access_logger.setLevel(level)
    direct, logged = stream.getvalue().splitlines()
    assert direct == logged
    assert TOKEN not in direct  # nor in any field of its own (the JSON line's "path")
    (record,) = collect.records
    assert redact(record.getMessage()) in direct
