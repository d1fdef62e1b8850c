"""MCP method handlers, one module per method family, registered on the shared ``dispatcher``."""

from . import (  # registration side effects
    handshake_tasks,
    lifecycle,
    prompts,
    resources,
    subscriptions,
    tasks,
    tools,
)
from .base import dispatcher

__all__ = ["dispatcher", "handshake_tasks", "lifecycle", "prompts", "resources", "subscriptions", "tasks", "tools"]
