"""Personal API keys: stored as digests, shown once, usable as ``Bearer mcpk_…``, refused when revoked or
expired, managed by their owner in the admin and through ``/api/v1/api-keys/``."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from mcp_app.models import ApiKey

RAW_KEY = re.compile(r"mcpk_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_issue_key_stores_only_the_sha256_digest(user_factory):
    user = user_factory()
    key, raw = ApiKey.objects.issue_key(user, name="ci")
    assert RAW_KEY.fullmatch(raw)
    stored = ApiKey.objects.values().get(pk=key.pk)
    assert stored["digest"] == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in {str(value) for value in stored.values()}
    assert stored["prefix"] == raw.split("_")[1]
    assert ApiKey.objects.authenticate(raw) == key


def test_authenticate_refuses_wrong_revoked_expired_and_inactive(user_factory):
    user = user_factory()
    key, raw = ApiKey.objects.issue_key(user)
    assert ApiKey.objects.authenticate(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert ApiKey.objects.authenticate("mcp_" + raw[5:]) is None  # an agent-token-shaped value
    assert ApiKey.objects.authenticate(raw + "x" * 300) is None
    _expired, expired_raw = ApiKey.objects.issue_key(user, expires_at=timezone.now() - timedelta(seconds=1))
    assert ApiKey.objects.authenticate(expired_raw) is None
    key.revoke()
    first = key.revoked_at
    key.revoke()
    assert ApiKey.objects.get(pk=key.pk).revoked_at == first
    assert ApiKey.objects.authenticate(raw) is None
    _other, other_raw = ApiKey.objects.issue_key(user)
    user.is_active = False
    user.save()
    assert ApiKey.objects.authenticate(other_raw) is None


def test_authenticate_compares_in_constant_time(user_factory, monkeypatch):
    """The lookup is by digest, and the final comparison goes through hmac.compare_digest."""
    import mcp_app.models.credentials as credentials  # where ApiKey and AgentToken match a raw value

    calls = []
    real = credentials.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(credentials.hmac, "compare_digest", spy)
    key, raw = ApiKey.objects.issue_key(user_factory())
    assert ApiKey.objects.authenticate(raw) == key
    assert calls == [(key.digest, hashlib.sha256(raw.encode()).hexdigest())]


def test_a_key_authenticates_the_api_and_stamps_last_use(two_tenants):
    acme, _ = two_tenants
    key, raw = ApiKey.objects.issue_key(acme.users["viewer"])
    response = bearer(raw).get("/api/v1/tenants/")
    assert response.status_code == 200
    assert [tenant["slug"] for tenant in response.json()["results"]] == ["acme"]
    assert response.json()["results"][0]["role"] == "viewer"
    assert ApiKey.objects.get(pk=key.pk).last_used_at is not None


@pytest.mark.parametrize("state", ["revoked", "expired", "inactive user", "unknown", "malformed"])
def test_unusable_keys_are_401_with_one_message(two_tenants, state):
    acme, _ = two_tenants
    user = acme.users["admin"]
    key, raw = ApiKey.objects.issue_key(user)
    if state == "revoked":
        key.revoke()
    elif state == "expired":
        ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    elif state == "inactive user":
        user.is_active = False
        user.save()
    elif state == "unknown":
        raw = raw[:-4] + "zzzz"
    else:
        raw = "mcpk_ has spaces"
    response = bearer(raw).get("/api/v1/tools/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert response.json() == {
        "error": {"code": "authentication_failed", "message": "Invalid, revoked or expired API key."}
    }


def test_session_authentication_needs_the_csrf_token(two_tenants):
    acme, _ = two_tenants
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(acme.users["admin"])
    assert client.get("/api/v1/tools/").status_code == 200
    refused = client.patch(f"/api/v1/tools/{acme.tool.pk}/", {"title": "x"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    assert "CSRF" in refused.json()["error"]["message"]
    client.get("/admin/")  # renders a form, which sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    accepted = client.patch(f"/api/v1/tools/{acme.tool.pk}/", {"title": "x"}, format="json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 200


def test_a_key_needs_no_csrf_token(two_tenants, key_client):
    acme, _ = two_tenants
    client = key_client(acme.users["admin"])
    client.handler.enforce_csrf_checks = True
    assert client.patch(f"/api/v1/tools/{acme.tool.pk}/", {"title": "y"}, format="json").status_code == 200


def test_users_manage_their_own_keys_through_the_api(two_tenants, key_client):
    acme, globex = two_tenants
    client = key_client(acme.users["viewer"])
    created = client.post("/api/v1/api-keys/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    assert created["Cache-Control"] == "no-store"
    raw = created.json()["key"]
    assert RAW_KEY.fullmatch(raw)
    key_id = created.json()["id"]
    # Shown once: neither the list nor the detail repeats it.
    assert "key" not in client.get(f"/api/v1/api-keys/{key_id}/").json()
    assert raw not in client.get("/api/v1/api-keys/").content.decode()
    assert bearer(raw).get("/api/v1/tenants/").status_code == 200
    # Someone else's key is not found; one's own is revoked through the model's verb.
    foreign, _ = ApiKey.objects.issue_key(globex.users["owner"])
    assert client.post(f"/api/v1/api-keys/{foreign.pk}/revoke/").status_code == 404
    assert ApiKey.objects.get(pk=foreign.pk).revoked_at is None
    revoked = client.post(f"/api/v1/api-keys/{key_id}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert bearer(raw).get("/api/v1/tenants/").status_code == 401


def test_the_admin_page_issues_a_key_once_and_revokes_it(two_tenants, client):
    acme, globex = two_tenants
    user = acme.users["viewer"]
    client.force_login(user)
    response = client.post(
        reverse("admin:mcp_app_apikey_add"), {"name": "script", "expires_at_0": "", "expires_at_1": ""}, follow=True
    )
    assert response.status_code == 200
    shown = " ".join(str(message) for message in response.context["messages"])
    raw = RAW_KEY.search(shown).group(0)
    key = ApiKey.objects.authenticate(raw)
    assert key is not None and key.user == user and key.name == "script"
    change_page = client.get(reverse("admin:mcp_app_apikey_change", args=[key.pk])).content.decode()
    assert raw not in change_page and key.digest not in change_page
    # Only one's own keys are listed and reachable.
    foreign, _ = ApiKey.objects.issue_key(globex.users["owner"], name="not yours")
    listing = client.get(reverse("admin:mcp_app_apikey_changelist")).content.decode()
    assert "script" in listing and "not yours" not in listing
    assert client.get(reverse("admin:mcp_app_apikey_change", args=[foreign.pk])).status_code in (302, 404)
    response = client.post(
        reverse("admin:mcp_app_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [key.pk, foreign.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert ApiKey.objects.get(pk=foreign.pk).revoked_at is None
    assert ApiKey.objects.authenticate(raw) is None
