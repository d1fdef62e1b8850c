"""mcp_app: multi-tenant hosting of MCP servers as a reusable Django app.

Add ``"mcp_app"`` to ``INSTALLED_APPS``, route ``mcp_app.transport.routing.http_urlpatterns`` in your ASGI
application, and configure it through the single ``MCP_APP`` settings dictionary (see ``mcp_app.conf``).
"""

__version__ = "0.1.0"

PRODUCT_NAME = "mcp-host"
