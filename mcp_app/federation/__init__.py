"""Upstream MCP servers federated into a tenant's catalog (issue 18)."""
