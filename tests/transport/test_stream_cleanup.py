"""A stream that ends leaves the channel layer cleanly: no error or warning logged (on Redis as in memory)."""

from __future__ import annotations

import asyncio
import logging

from tests.helpers import communicator


async def test_a_closed_get_stream_logs_no_clean_up_error(access, caplog, own_channel_layer):
    caplog.set_level(logging.INFO, logger="mcp_app")
    for _ in range(3):
        comm = communicator(access, method="GET", headers={"accept": "text/event-stream"})
        await comm.send_input({"type": "http.request", "body": b""})
        start = await comm.receive_output(timeout=5)
        assert start["status"] == 200
        ready = await comm.receive_output(timeout=5)
        assert b"ready" in ready["body"]
        await comm.send_input({"type": "http.disconnect"})
        await comm.wait(timeout=5)
    await asyncio.sleep(0)
    problems = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert problems == [], [record.getMessage() for record in problems]
