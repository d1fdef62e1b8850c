"""MCP method handlers, one module per method family, registered on the shared ``dispatcher``."""

from . import handshake_tasks, lifecycle, prompts, resources, subscriptions, tasks, tools  # registration side effects
from .base import dispatcher

__all__ = ["dispatcher", "handshake_tasks", "lifecycle", "prompts", "resources", "subscriptions", "tasks", "tools"]
