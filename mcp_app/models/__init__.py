"""The persistent state of mcp_app, one module per aggregate. Managers own the domain verbs."""

from .agents import Agent, AgentToken
from .audit import ToolCall
from .catalog import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from .servers import McpServer
from .sessions import McpSession
from .tasks import ToolTask
from .tenancy import Tenant, TenantMembership

__all__ = [
    "Agent",
    "AgentToken",
    "McpServer",
    "McpSession",
    "Prompt",
    "Resource",
    "ServerPrompt",
    "ServerResource",
    "ServerTool",
    "Tenant",
    "TenantMembership",
    "Tool",
    "ToolCall",
    "ToolTask",
]
