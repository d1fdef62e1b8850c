"""URL patterns for the ASGI router: mount ``http_urlpatterns`` in your ``URLRouter``."""

from django.urls import re_path

from .consumer import McpConsumer

http_urlpatterns = [
    re_path(r"^mcp/(?P<server_id>[-a-zA-Z0-9_]+)/?$", McpConsumer.as_asgi()),
]
