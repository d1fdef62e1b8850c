"""The persistent state of mcp_app, one module per aggregate. Managers own the domain verbs."""

from .agents import Agent, AgentToken
from .apikeys import ApiKey
from .approvals import Approval
from .audit import ToolCall
from .caching import CacheInvalidation
from .catalog import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from .oauth import OAuthAgent, OAuthClientProfile, OAuthConsent
from .servers import McpServer
from .sessions import McpSession
from .tasks import ToolTask
from .tenancy import Tenant, TenantMembership
from .upstreams import Upstream, UpstreamBinding
from .usage import Budget, BudgetAlert, BudgetAlertHook, UsageDay
from .versions import CatalogChange, CatalogVersion
from .webhooks import Webhook

__all__ = [
    "Agent",
    "AgentToken",
    "ApiKey",
    "Approval",
    "Budget",
    "BudgetAlert",
    "BudgetAlertHook",
    "CacheInvalidation",
    "CatalogChange",
    "CatalogVersion",
    "McpServer",
    "McpSession",
    "OAuthAgent",
    "OAuthClientProfile",
    "OAuthConsent",
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
    "Upstream",
    "UpstreamBinding",
    "UsageDay",
    "Webhook",
]
