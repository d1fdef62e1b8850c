"""Running a tool call: argument validation, invocation, result conversion, progress.

Tools see a ``ToolContext``; they signal a refusal the client should read with ``ToolError``, and may return a
``ToolResult`` for full control over the content blocks. The ``Runner`` implements the protocol's
``ToolRunner`` interface.
"""

from ..definitions.context import ClientRequestError, InputRequired, ToolContext, ToolError, ToolResult

__all__ = ["ClientRequestError", "InputRequired", "ToolContext", "ToolError", "ToolResult"]
