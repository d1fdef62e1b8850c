"""Opt-in conformance fixtures: the tools, prompts and resources the official MCP conformance suite calls.

Add ``"mcp_app.contrib.conformance"`` to ``INSTALLED_APPS`` to register them, then ``setup.ensure_conformance()``
(``manage.py mcp_demo`` does) creates the demo tenant's ``conformance`` server. Nothing here is needed to serve MCP.
"""
