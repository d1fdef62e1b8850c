"""Opt-in conformance fixtures: the tools, prompts and resources the official MCP conformance suite calls.

Add ``"mcp_app.contrib.conformance"`` to ``INSTALLED_APPS`` to register them (``mcp_tools``), then call
``setup.ensure_conformance()`` (``manage.py mcp_demo`` does) to create the demo tenant's ``conformance`` server.
Names, content and multi-round-trip shapes are the suite's (``@modelcontextprotocol/conformance``), not this
project's; nothing here is needed to serve MCP (``tests/e2e/test_conformance.py`` measures mcp-host with it).
"""
