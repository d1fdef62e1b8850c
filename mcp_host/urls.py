"""Django URLs of the reference deployment (the MCP endpoints are routed in ``asgi.py``)."""

from django.contrib import admin
from django.urls import include, path

from . import admin as _themed_auth_admin  # noqa: F401  (users and groups in the admin's theme)
from .views import index

urlpatterns = [
    path("", index, name="index"),
    path("admin/", admin.site.urls),
    path("api/", include("mcp_app.api.urls")),  # /api/v1/…, /api/schema/, /api/docs/ (docs/api.md)
    path("api/auth/", include("rest_framework.urls")),  # sign in/out links of the browsable API
    path("", include("mcp_app.oauth.urls")),  # OAuth 2.1: /.well-known/…, /oauth/… (docs/oauth.md)
]

# 403 and 404 in the admin's frame under /admin/, Django's own pages elsewhere (mcp_app.admin.errors).
handler403 = "mcp_app.admin.errors.permission_denied"
handler404 = "mcp_app.admin.errors.page_not_found"
