"""Reason phrases for every HTTP status daphne may send.

daphne writes a response's status line with Twisted's ``Request.setResponseCode(status)``, which takes the reason
phrase from ``twisted.web.http.RESPONSES`` and writes ``Unknown Status`` for a code missing there: 429 (our rate
limits and caps), 422 and 428 among them. ``install()`` adds the standard phrase (``http.HTTPStatus``) of each
missing code to that public table, once; the phrases Twisted has are left alone. It does nothing where Twisted is
not installed (uvicorn). ``mcp_host.asgi`` calls it.
"""

from __future__ import annotations

import http


def install() -> int:
    """Fill the phrases Twisted lacks; how many were added."""
    try:
        from twisted.web import http as twisted_http
    except ImportError:
        return 0
    added = 0
    for status in http.HTTPStatus:
        if status.value not in twisted_http.RESPONSES:
            twisted_http.RESPONSES[status.value] = status.phrase.encode("ascii")
            added += 1
    return added
