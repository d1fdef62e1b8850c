"""``runtime.durable.recover_orphaned_tasks``: the working tasks of a process that is gone are failed, judged by
the real process table and heartbeats; those of live processes, and worker calls, are left alone."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from mcp_app.models import ToolTask
from mcp_app.process import BOOT_ID, HOST, owner_id
from mcp_app.runtime.durable import recover_orphaned_tasks

MakeRecord = Callable[..., Awaitable[ToolTask]]


def exited_process_owner() -> str:
    """The owner id of a process of this host that is gone: a pid above the kernel's largest, which no process can
    hold (an exited child's pid could be reused at once by a process another test starts)."""
    return f"{HOST}:{int(Path('/proc/sys/kernel/pid_max').read_text()) + 1}:{BOOT_ID}"


def test_the_tasks_of_gone_processes_fail_and_the_others_stay(make_record: MakeRecord) -> None:
    make = async_to_sync(make_record)
    gone = make(owner=exited_process_owner())
    restarted = make(owner=f"{owner_id().rsplit(':', 1)[0]}:an-earlier-boot")  # this pid, reused after a restart
    mine = make(owner=owner_id())
    worker_call = make(owner=exited_process_owner(), execution="worker")  # its worker's (re-queue or reaper)

    assert recover_orphaned_tasks() == 2
    statuses = {row.pk: row.status for row in ToolTask.objects.all()}
    assert statuses == {gone.pk: "failed", restarted.pk: "failed", mine.pk: "working", worker_call.pk: "working"}
    assert "run the call again" in ToolTask.objects.get(pk=gone.pk).error["message"]
    assert recover_orphaned_tasks() == 0


@pytest.mark.parametrize(("quiet", "level"), [(False, logging.WARNING), (True, logging.DEBUG)])
def test_recovery_never_raises_without_a_database(quiet: bool, level: int, caplog: pytest.LogCaptureFixture) -> None:
    """No ``db`` fixture: the test runner refuses every query, as an unmigrated or unreachable database would."""
    with caplog.at_level(logging.DEBUG, logger="mcp_app.runtime.durable"):
        assert recover_orphaned_tasks(quiet=quiet) == 0
    [record] = [r for r in caplog.records if "could not recover the tasks of dead processes" in r.getMessage()]
    assert record.levelno == level
