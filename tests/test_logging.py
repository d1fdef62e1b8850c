"""The reference deployment writes each log record, and each traceback, once under daphne."""

from __future__ import annotations

import io
import logging
import logging.config

from django.conf import settings


def test_an_mcp_app_traceback_is_written_once_when_daphne_configured_the_root_logger() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    daphne_like = io.StringIO()
    try:
        logging.config.dictConfig(settings.LOGGING)
        # What ``daphne`` does on its command line (logging.basicConfig): a handler on the root logger.
        root.addHandler(logging.StreamHandler(daphne_like))
        app_stream = io.StringIO()
        logging.getLogger("mcp_app").handlers[0].setStream(app_stream)
        try:
            raise RuntimeError("boom-" + "once")  # the source line must not spell the message
        except RuntimeError:
            logging.getLogger("mcp_app.transport").exception("unhandled")
        written = app_stream.getvalue() + daphne_like.getvalue()
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    assert written.count("Traceback (most recent call last)") == 1
    assert written.count("boom-once") == 1
