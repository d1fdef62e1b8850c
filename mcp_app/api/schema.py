"""The API's OpenAPI 3 description (drf-spectacular) and its offline documentation page: ``ApiAutoSchema`` adds
the ``Error`` body to every operation's 4xx answers; ``SCHEMA_SETTINGS`` apply to this API's schema view only
and ``only_this_api`` keeps the project's other views out; ``OfflineSwaggerView`` serves Swagger UI without a CDN.
"""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView, _get_sidecar_url
from rest_framework import permissions

from .. import __version__
from .exceptions import ERROR_CODES

DESCRIPTION = """REST API of mcp-host: tenants, memberships, MCP servers, the tool/resource/prompt catalog and its
bindings to servers, agents, agent tokens, MCP sessions.

Authenticate with a personal API key (`Authorization: Bearer mcpk_…`) or a logged-in Django session (send
`X-CSRFToken` on unsafe methods). You see the tenants you are a member of; `owner` and `admin` write, `viewer`
reads; only owners manage memberships. Another tenant's objects are 404.

Every error is `{"error": {"code", "message", "fields"?}}` with a stable `code`:
""" + "\n".join(f"- `{code}`: {meaning}" for code, meaning in ERROR_CODES.items())

SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "mcp-host API",
    "DESCRIPTION": DESCRIPTION,
    "VERSION": __version__,
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["mcp_app.api.schema.only_this_api"],
    "ENUM_NAME_OVERRIDES": {
        "RoleEnum": "mcp_app.models.tenancy.TenantMembership.Role",
        "ToolKindEnum": "mcp_app.models.catalog.Tool.Kind",
        "CatalogKindEnum": "mcp_app.models.catalog.Resource.Kind",
    },
}


#: The modules whose views are this API's operations.
VIEW_MODULES = ("mcp_app.api.views", "mcp_app.api.budgets", "mcp_app.api.approvals", "mcp_app.api.versions")


def only_this_api(endpoints: list[tuple[str, str, str, Any]], **kwargs: Any) -> list[tuple[str, str, str, Any]]:
    """drf-spectacular preprocessing hook: the resource endpoints of ``mcp_app.api.views`` only."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(getattr(endpoint[3], "cls", None), "__module__", "") in VIEW_MODULES
    ]


class ApiAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: Literal["request", "response"] = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        from .exceptions import ErrorSerializer

        codes = ["400", "401", "403"]
        if "{" in self.path:
            codes.append("404")
        for code in codes:
            responses.setdefault(code, self._get_response_for_code(ErrorSerializer, code, direction=direction))
            responses[code]["description"] = _ERROR_DESCRIPTIONS[code]
        return responses


_ERROR_DESCRIPTIONS = {
    "400": "validation_error or parse_error",
    "401": "not_authenticated or authentication_failed",
    "403": "permission_denied",
    "404": "not_found",
}


class SchemaView(SpectacularAPIView):
    """``GET /api/schema/``: the OpenAPI 3 document (YAML by default, ``?format=json`` for JSON)."""

    custom_settings = SCHEMA_SETTINGS
    permission_classes = (permissions.AllowAny,)
    schema = AutoSchema()


class OfflineSwaggerView(SpectacularSwaggerView):
    """``GET /api/docs/``: Swagger UI with every asset served locally by ``drf_spectacular_sidecar``."""

    permission_classes = (permissions.AllowAny,)
    schema = AutoSchema()
    title = "mcp-host API"
    url_name = "mcp_api:schema"

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return str(_get_sidecar_url(f"swagger-ui-dist/{filename}"))

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return str(_get_sidecar_url("swagger-ui-dist/favicon-32x32.png"))


def document(**kwargs: Any) -> Any:
    """``extend_schema`` for this API's view methods, without relying on the project's
    ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` (drf-spectacular falls back to it for methods)."""
    from drf_spectacular.utils import extend_schema

    def decorator(method: Any) -> Any:
        if not isinstance(getattr(method, "kwargs", None), dict):
            method.kwargs = {}
        method.kwargs.setdefault("schema", ApiAutoSchema)
        return extend_schema(**kwargs)(method)

    return decorator
