"""The API's OpenAPI schema: it validates against the OpenAPI 3 meta-schema, describes every endpoint and the
error format, and the documentation page works offline (every asset is a local static file, no CDN)."""

from __future__ import annotations

import re

import jsonschema
import pytest
from django.contrib.staticfiles import finders
from rest_framework.test import APIClient

EXPECTED_PATHS = {
    "/api/v1/approvals/",
    "/api/v1/approvals/{id}/",
    "/api/v1/approvals/{id}/approve/",
    "/api/v1/approvals/{id}/deny/",
    "/api/v1/budgets/",
    "/api/v1/budgets/{id}/",
    "/api/v1/budget-alerts/",
    "/api/v1/budget-alerts/{id}/",
    "/api/v1/budget-alert-hook/",
    "/api/v1/budget-alert-hook/rotate/",
    "/api/v1/tenants/",
    "/api/v1/tenants/{id}/",
    "/api/v1/memberships/",
    "/api/v1/memberships/{id}/",
    "/api/v1/servers/",
    "/api/v1/servers/{id}/",
    "/api/v1/tools/",
    "/api/v1/tools/{id}/",
    "/api/v1/resources/",
    "/api/v1/resources/{id}/",
    "/api/v1/prompts/",
    "/api/v1/prompts/{id}/",
    "/api/v1/upstreams/",
    "/api/v1/upstreams/{id}/",
    "/api/v1/upstreams/{id}/sync/",
    "/api/v1/upstreams/{id}/test/",
    "/api/v1/upstreams/{id}/bind/",
    "/api/v1/upstreams/{id}/unbind/",
    "/api/v1/server-tools/",
    "/api/v1/server-tools/{id}/",
    "/api/v1/server-resources/",
    "/api/v1/server-resources/{id}/",
    "/api/v1/server-prompts/",
    "/api/v1/server-prompts/{id}/",
    "/api/v1/agents/",
    "/api/v1/agents/{id}/",
    "/api/v1/tokens/",
    "/api/v1/tokens/{id}/",
    "/api/v1/tokens/{id}/revoke/",
    "/api/v1/sessions/",
    "/api/v1/sessions/{id}/",
    "/api/v1/sessions/{id}/terminate/",
    "/api/v1/tool-calls/",
    "/api/v1/tool-calls/{id}/",
    "/api/v1/usage/",
    "/api/v1/api-keys/",
    "/api/v1/api-keys/{id}/",
    "/api/v1/api-keys/{id}/revoke/",
    "/api/v1/oauth-consents/",
    "/api/v1/oauth-consents/{id}/",
    "/api/v1/oauth-consents/{id}/withdraw/",
    "/api/v1/oauth-agents/",
    "/api/v1/oauth-agents/{id}/",
    "/api/v1/catalog-versions/",
    "/api/v1/catalog-versions/{id}/",
    "/api/v1/catalog-changes/",
    "/api/v1/catalog-changes/{id}/",
    "/api/v1/servers/{id}/draft/",
    "/api/v1/servers/{id}/diff/",
    "/api/v1/servers/{id}/publish/",
    "/api/v1/servers/{id}/rollback/",
}


@pytest.fixture
def schema(db):
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    return response.json()


def test_the_schema_validates_against_the_openapi_meta_schema(schema):
    from schemathesis.specs.openapi.definitions import OPENAPI_30

    assert schema["openapi"].startswith("3.0")
    jsonschema.Draft4Validator(OPENAPI_30).validate(schema)


def test_schemathesis_loads_and_validates_it(db):
    import schemathesis
    from django.core.wsgi import get_wsgi_application

    loaded = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())
    loaded.validate()  # raises on an invalid schema
    operations = [result.ok() for result in loaded.get_all_operations()]
    assert len(operations) >= 60


def test_the_schema_lists_exactly_the_api(schema):
    assert set(schema["paths"]) == EXPECTED_PATHS
    assert schema["paths"]["/api/v1/tenants/"].keys() == {"get"}
    assert schema["paths"]["/api/v1/sessions/{id}/"].keys() == {"get"}
    assert schema["paths"]["/api/v1/approvals/{id}/"].keys() == {"get"}
    for verb in ("approve", "deny"):
        decided = schema["paths"][f"/api/v1/approvals/{{id}}/{verb}/"]
        assert decided.keys() == {"post"}
        conflict = decided["post"]["responses"]["409"]["content"]["application/json"]["schema"]
        assert conflict == {"$ref": "#/components/schemas/Error"}
    assert schema["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "mcpk_<prefix>_<secret> (a personal API key)",
        "description": "A personal API key, issued once in the admin (API keys) or by POST /api/v1/api-keys/.",
    }
    assert "cookieAuth" in schema["components"]["securitySchemes"]


def test_the_schema_documents_the_error_body_and_the_raw_token_once(schema):
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    patch = schema["paths"]["/api/v1/tools/{id}/"]["patch"]["responses"]
    for code in ("400", "401", "403", "404"):
        assert patch[code]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    created = schema["paths"]["/api/v1/tokens/"]["post"]["responses"]["201"]["content"]["application/json"]
    created_schema = schema["components"]["schemas"][created["schema"]["$ref"].rsplit("/", 1)[1]]
    assert "token" in created_schema["properties"]
    listed = schema["components"]["schemas"]["AgentToken"]["properties"]
    assert "token" not in listed and "digest" not in listed
    # The request body of a token never takes a digest or prefix.
    request = schema["components"]["schemas"]["AgentTokenRequest"]["properties"]
    assert set(request) == {
        "agent",
        "name",
        "servers",
        "expires_at",
        "limit_to_grant",
        "granted_tools",
        "granted_resources",
        "granted_prompts",
        "read_only",
    }
    assert schema["paths"]["/api/v1/tool-calls/{id}/"].keys() == {"get"}


def test_the_docs_page_works_offline(db):
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/api/schema/" in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(asset.endswith("swagger-ui-bundle.js") for asset in assets)
    for asset in assets:
        assert not asset.startswith(("http://", "https://", "//")), asset
        if asset.startswith("/static/"):
            assert finders.find(asset.removeprefix("/static/")), asset
