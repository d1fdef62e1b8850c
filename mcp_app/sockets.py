"""Whether an idle kept-alive connection's socket has something to read: ``readable(fd)``.

An idle connection (an HTTP/1.1 link between replies, a database connection between queries) is owed nothing by its
server, so a readable socket means the server closed it or sent a notice (a restart, an idle timeout) that the
process has not read yet. The check is one ``poll(2)`` that does not wait: no round trip. httpcore checks its pooled
connections the same way.
"""

from __future__ import annotations

import select


def readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (or is closed: ``POLLNVAL``, also an answer)."""
    poller = select.poll()  # not select(): a descriptor may be above FD_SETSIZE
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
