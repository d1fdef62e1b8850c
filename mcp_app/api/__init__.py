"""The REST API of mcp_app (``/api/v1/``, Django REST framework): a front door onto the same models, managers
and permission rules as the admin, for automation.

Owns: serializers, viewsets, filters, the DRF glue to ``mcp_app.permissions``, authentication by browser
session (with CSRF) or personal API key (``mcpk_…``, stored as a digest), the JSON error format and the
OpenAPI schema. It holds no business logic of its own: tokens are issued and revoked, sessions terminated,
through the managers' and models' verbs.

Every view configures itself (authentication, permissions, pagination, filtering, exception handler, schema
class), so a project only needs ``path("api/", include("mcp_app.api.urls"))`` and the apps ``rest_framework``,
``django_filters``, ``drf_spectacular`` and ``drf_spectacular_sidecar`` installed; its own ``REST_FRAMEWORK``
settings do not change how this API behaves. See ``docs/api.md``.
"""
