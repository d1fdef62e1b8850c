"""MCP method handlers, one module per method family, registered on the shared ``dispatcher``."""

from ..dispatcher import Dispatcher

dispatcher = Dispatcher()

from . import (  # noqa: E402  (registration side effects)
    handshake_tasks,
    lifecycle,
    prompts,
    resources,
    subscriptions,
    tasks,
    tools,
)

__all__ = ["dispatcher", "handshake_tasks", "lifecycle", "prompts", "resources", "subscriptions", "tasks", "tools"]
