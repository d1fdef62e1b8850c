"""Opt-in conformance fixtures: the tools, prompts and resources the official MCP conformance suite calls.

Add ``"mcp_app.contrib.conformance"`` to ``INSTALLED_APPS`` to register them (``mcp_tools``), then call
``mcp_app.contrib.conformance.setup.ensure_conformance()`` (``manage.py mcp_demo`` does) to create the demo
tenant's ``conformance`` server exposing them. They mirror the reference "everything" servers the suite
(``@modelcontextprotocol/conformance``) was written against: names, content and multi-round-trip shapes are the
suite's, not this project's. Nothing here is needed to serve MCP; it exists to measure mcp-host against the
suite (``tests/e2e/test_conformance.py``).
"""
