"""The API as a browser and as a program see it, and its throttles.

- ``/api/v1/`` is the API root: links to every resource list, JSON for a program (an API key, any ``Accept``
  but HTML) and DRF's browsable HTML page for a signed-in browser; anonymous callers get the documented 401.
- The resource pages are browsable too, scoped like the JSON (another tenant's objects never appear).
- Throttling per API key and per user (``API_RATE_PER_KEY``, ``API_RATE_PER_USER``) counts in the shared Django
  cache (Redis when ``REDIS_URL`` is set) and answers 429 ``throttled`` with ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import caches
from django.test import Client
from rest_framework.test import APIClient

from mcp_app.models import ApiKey

from .conftest import ENDPOINTS

RESOURCES = (
    *ENDPOINTS,
    "usage",
    "upstreams",
    "api-keys",
    "oauth-consents",
    "oauth-agents",
    "budgets",
    "budget-alerts",
    "approvals",
    "catalog-versions",
    "catalog-changes",
)
# What Chromium sends for a page it navigates to.
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def browser(user: Any) -> Client:
    client = Client(HTTP_ACCEPT=BROWSER_ACCEPT)
    client.force_login(user)
    return client


def key_for(user: Any) -> tuple[APIClient, str]:
    _, raw = ApiKey.objects.issue_key(user, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client, raw


# The root and the browsable pages --------------------------------------------------------------------------------


@pytest.mark.parametrize("accept", [None, "application/json", "*/*"])
def test_the_root_lists_every_resource_as_json_for_a_program(two_tenants, accept):
    acme, _ = two_tenants
    client, _ = key_for(acme.users["viewer"])
    response = client.get("/api/v1/", **({"HTTP_ACCEPT": accept} if accept else {}))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {name: f"http://testserver/api/v1/{name}/" for name in RESOURCES}
    for url in response.json().values():
        assert client.get(url).status_code == 200


def test_the_root_refuses_anonymous_callers_with_the_documented_error(db):
    response = APIClient().get("/api/v1/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_the_root_is_a_browsable_page_for_a_signed_in_browser(two_tenants):
    acme, _ = two_tenants
    response = browser(acme.users["viewer"]).get("/api/v1/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Api Root" in page
    for name in RESOURCES:
        assert f'href="http://testserver/api/v1/{name}/"' in page
    assert "acme-viewer" in page  # signed in as
    assert 'href="/api/auth/logout/' in page or "/api/auth/logout/" in page


def test_a_resource_page_is_browsable_and_scoped_to_the_tenant(two_tenants):
    acme, globex = two_tenants
    response = browser(acme.users["admin"]).get("/api/v1/servers/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "acme-server" in page
    assert "globex-server" not in page
    # Writes from the page post JSON (the API parses nothing else): the raw-data form, no choice lists that could
    # name another tenant's objects.
    assert 'name="_content_type"' in page and "application/json" in page
    assert "globex" not in page
    detail = browser(acme.users["admin"]).get(f"/api/v1/servers/{globex.server.pk}/")
    assert detail.status_code == 404
    assert "globex-server" not in detail.content.decode()


def test_an_anonymous_browser_gets_the_401_page_with_a_way_to_sign_in(db):
    response = Client(HTTP_ACCEPT=BROWSER_ACCEPT).get("/api/v1/tenants/")
    assert response.status_code == 401
    assert response["Content-Type"].startswith("text/html")
    assert "/api/auth/login/" in response.content.decode()
    login = Client().get("/api/auth/login/?next=/api/v1/")
    assert login.status_code == 200


# Throttling ------------------------------------------------------------------------------------------------------


@pytest.fixture
def rates(settings):
    def set_rates(per_key: str | None = None, per_user: str | None = None) -> None:
        settings.MCP_APP = {**settings.MCP_APP, "API_RATE_PER_KEY": per_key, "API_RATE_PER_USER": per_user}

    return set_rates


def assert_throttled(response: Any, window_seconds: int) -> None:
    assert response.status_code == 429
    body = response.json()
    assert body["error"]["code"] == "throttled"
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= window_seconds


def test_an_api_key_over_its_rate_gets_429_with_retry_after(two_tenants, rates, throttle_cache):
    acme, _ = two_tenants
    rates(per_key="3/minute")
    client, raw = key_for(acme.users["viewer"])
    assert [client.get("/api/v1/tenants/").status_code for _ in range(3)] == [200, 200, 200]
    assert_throttled(client.get("/api/v1/tenants/"), 60)
    assert_throttled(client.get("/api/v1/"), 60)  # the key, not the endpoint, is counted
    # Another key of the same user has its own count; the user has no limit here.
    other, _ = key_for(acme.users["viewer"])
    assert other.get("/api/v1/tenants/").status_code == 200
    # The count is in the shared cache (Redis with REDIS_URL), not in this process's memory.
    key = ApiKey.objects.get(digest=__import__("hashlib").sha256(raw.encode()).hexdigest())
    history = caches[throttle_cache].get(f"throttle_mcp_api_key_{key.pk}-{key.prefix}")
    assert len(history) == 3
    if django_settings.REDIS_URL:
        assert type(caches[throttle_cache]).__name__ == "RedisCache"


def test_a_user_over_its_rate_is_throttled_on_every_credential(two_tenants, rates):
    acme, globex = two_tenants
    rates(per_user="4/hour")
    session = browser(acme.users["admin"])
    client, _ = key_for(acme.users["admin"])
    assert session.get("/api/v1/tenants/", HTTP_ACCEPT="application/json").status_code == 200
    assert client.get("/api/v1/tenants/").status_code == 200
    assert session.get("/api/v1/").status_code == 200
    assert client.get("/api/v1/servers/").status_code == 200
    assert_throttled(client.get("/api/v1/tenants/"), 3600)
    assert_throttled(session.get("/api/v1/tenants/", HTTP_ACCEPT="application/json"), 3600)
    assert key_for(globex.users["admin"])[0].get("/api/v1/tenants/").status_code == 200  # another user


def test_a_throttled_browser_sees_the_429_page(two_tenants, rates):
    acme, _ = two_tenants
    rates(per_user="1/day")
    session = browser(acme.users["viewer"])
    assert session.get("/api/v1/").status_code == 200
    response = session.get("/api/v1/")
    assert response.status_code == 429
    assert response["Content-Type"].startswith("text/html")
    assert 1 <= int(response["Retry-After"]) <= 86400


def test_anonymous_and_failed_requests_are_not_counted(two_tenants, rates):
    acme, _ = two_tenants
    rates(per_key="1/minute", per_user="1/minute")
    for _ in range(3):
        assert APIClient().get("/api/v1/tenants/").status_code == 401
    client, _ = key_for(acme.users["viewer"])
    assert client.get("/api/v1/tenants/").status_code == 200
    assert client.get("/api/v1/tenants/").status_code == 429
