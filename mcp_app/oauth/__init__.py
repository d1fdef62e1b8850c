"""OAuth 2.1 for hosted MCP servers, on django-oauth-toolkit (DOT): mcp-host is its own authorization server and
every MCP server a protected resource. This package adds only what is mcp-host's own, through DOT's hooks.

Design and the role of each module: docs/oauth.md ("How mcp_app.oauth is built").
"""
