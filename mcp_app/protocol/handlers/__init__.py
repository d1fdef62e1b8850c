"""MCP method handlers, one module per method family, registered on the shared ``dispatcher``."""

from . import lifecycle, prompts, resources, subscriptions, tasks, tools  # registration side effects
from .base import dispatcher

__all__ = ["dispatcher", "lifecycle", "prompts", "resources", "subscriptions", "tasks", "tools"]
