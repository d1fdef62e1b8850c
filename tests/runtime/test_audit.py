"""The audit buffer without the wire: a failed flush keeps its rows and logs once, retries are bounded (then the
loss is logged with a count), the buffer is bounded, and redaction follows the configured key pattern."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError
from django.test import override_settings

from mcp_app.models import ToolCall
from mcp_app.runtime.audit import Caller, PendingCall, audit_log, redact


@pytest.fixture
def caller(db: Any, access_factory: Any) -> Caller:
    access = access_factory(tools=())
    return Caller(
        tenant_id=access.tenant.pk,
        server_pk=access.server.pk,
        server_key=access.server.server_id,
        agent_pk=access.agent.pk,
        agent_key=access.agent.agent_id,
        token_prefix=access.token.prefix,
        era="legacy",
        protocol_version="2025-11-25",
    )


def pending(caller: Caller, tool: str = "echo") -> PendingCall:
    now = time.time()
    return PendingCall(
        caller=caller,
        tool_name=tool,
        arguments={"text": "hi"},
        request_id="1",
        status="ok",
        error_code=None,
        error_message="",
        started=now,
        finished=now,
        task_id="",
        appended=time.monotonic(),
    )


def audit_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mcp_app.audit" and r.levelno == level]


def test_a_failed_flush_keeps_the_rows_logs_once_and_recovers(
    caller: Caller, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = ToolCall.objects.insert_rows
    failures = iter([True, True, True])

    def flaky(rows: Any, *args: Any, **kwargs: Any) -> Any:
        if next(failures, False):
            raise OperationalError("database is down")
        return original(rows, *args, **kwargs)

    monkeypatch.setattr(ToolCall.objects, "insert_rows", flaky)
    caplog.set_level(logging.INFO, logger="mcp_app.audit")
    for _ in range(2):
        audit_log.append(pending(caller))
    assert audit_log.flush() == 0
    audit_log.append(pending(caller))  # the request path keeps buffering during the outage
    assert audit_log.flush() == 0
    assert audit_log.flush() == 0
    assert audit_log.pending() == 3 and ToolCall.objects.count() == 0
    assert audit_records(caplog, logging.WARNING) == [
        "audit log write failed (OperationalError); retrying on the next flush"
    ]
    assert audit_log.flush() == 3
    assert ToolCall.objects.count() == 3 and audit_log.pending() == 0 and audit_log.dropped == 0
    assert audit_records(caplog, logging.WARNING)[-1] == "audit log writes recovered"
    assert not audit_records(caplog, logging.ERROR)


def test_retries_are_bounded_and_a_loss_is_logged_with_its_count(
    caller: Caller, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(rows: Any, *args: Any, **kwargs: Any) -> Any:
        raise OperationalError("database is down")

    monkeypatch.setattr(ToolCall.objects, "insert_rows", broken)
    with override_settings(MCP_APP={**settings.MCP_APP, "AUDIT_FLUSH_RETRIES": 2}):
        for _ in range(4):
            audit_log.append(pending(caller))
        audit_log.flush()
        assert audit_log.pending() == 4
        audit_log.flush()
    assert audit_log.pending() == 0 and audit_log.dropped == 4
    assert audit_records(caplog, logging.ERROR) == ["audit log: dropped 4 tool-call record(s) after 2 failed writes"]


def test_the_buffer_is_bounded(caller: Caller, caplog: pytest.LogCaptureFixture) -> None:
    with override_settings(MCP_APP={**settings.MCP_APP, "AUDIT_BUFFER_SIZE": 3}):
        for _ in range(5):
            audit_log.append(pending(caller))
        assert audit_log.pending() == 3 and audit_log.dropped == 2
        assert len(audit_records(caplog, logging.ERROR)) == 1  # logged once per overflow, not per record
        assert audit_log.flush() == 3


def test_rows_of_a_deleted_server_keep_their_strings(caller: Caller) -> None:
    from mcp_app.models import McpServer

    audit_log.append(pending(caller))
    McpServer.objects.filter(pk=caller.server_pk).delete()
    assert audit_log.flush() == 1
    row = ToolCall.objects.get()
    assert row.server_id is None and row.server_key == caller.server_key


def test_redaction_follows_the_key_pattern() -> None:
    pattern = re.compile(r"secret|token", re.IGNORECASE)
    value = {"my_Token": "t", "deep": [{"SECRET": 1, "keep": "v"}], "n": None, "f": 1.5, "b": True}
    assert redact(value, pattern, 10, 10) == {
        "my_Token": "[redacted]",
        "deep": [{"SECRET": "[redacted]", "keep": "v"}],
        "n": None,
        "f": 1.5,
        "b": True,
    }
    nested: Any = "end"
    for _ in range(20):
        nested = {"k": nested}
    assert "[…]" in str(redact(nested, pattern, 10, 10))


def test_appending_never_raises_when_the_flusher_cannot_start(
    caller: Caller, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    def refuse(self: Any) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    audit_log.autostart = True
    audit_log.append(pending(caller))  # the request path carries on
    assert audit_log.pending() == 1
    assert "could not start" in caplog.text
    audit_log.autostart = False
    assert audit_log.flush() == 1


def test_a_forked_child_starts_with_an_empty_buffer_and_its_own_flusher(caller: Caller) -> None:
    audit_log.append(pending(caller))
    audit_log._after_fork()  # what os.register_at_fork runs in the child
    assert audit_log.pending() == 0 and audit_log._thread is None


def test_wait_written_returns_once_the_rows_are_written_and_false_after_its_bound(caller: Caller) -> None:
    """The flusher thread waking a waiter is tests/interaction/audit (a thread needs committed rows)."""
    assert audit_log.wait_written(0, 0.0)  # nothing asked for: at once
    before = time.monotonic()
    assert not audit_log.wait_written(1, 0.05)  # nothing written: the bound, then False
    assert time.monotonic() - before >= 0.05
    audit_log.append(pending(caller))
    assert audit_log.flush() == 1
    assert audit_log.wait_written(1, 0.0)


def test_the_arguments_digest_is_djangos_salted_hmac_under_the_current_secret_key() -> None:
    import orjson
    from django.utils.crypto import salted_hmac

    from mcp_app.runtime.audit_entries import DIGEST_SALT, arguments_digest

    arguments = {"b": [1, 2], "a": "x"}
    canonical = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    for secret in (settings.SECRET_KEY, "another-secret-key-" * 3, settings.SECRET_KEY):
        with override_settings(SECRET_KEY=secret):
            expected = salted_hmac(DIGEST_SALT, canonical, algorithm="sha256").hexdigest()
            assert arguments_digest(arguments) == arguments_digest(dict(reversed(arguments.items()))) == expected
