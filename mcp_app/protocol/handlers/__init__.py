"""MCP method handlers, one module per method family, registered on the shared ``dispatcher``."""

from ..dispatcher import Dispatcher

dispatcher = Dispatcher()

from . import lifecycle, prompts, resources, subscriptions, tasks, tools  # noqa: E402  (registration side effects)

__all__ = ["dispatcher", "lifecycle", "prompts", "resources", "subscriptions", "tasks", "tools"]
