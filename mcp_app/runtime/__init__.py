"""Running a tool call: argument validation, invocation, result conversion, progress.

Tools see a ``ToolContext``; they signal a refusal the client should read with ``ToolError``, and may return a
``ToolResult`` for full control over the content blocks. The ``InlineRunner`` (``execution``) implements the
protocol's ``ToolRunner`` interface with one executor per kind of entry (``executors``).
"""

from ..definitions.context import ClientRequestError, InputRequired, ToolContext, ToolError, ToolResult

__all__ = ["ClientRequestError", "InputRequired", "ToolContext", "ToolError", "ToolResult"]
