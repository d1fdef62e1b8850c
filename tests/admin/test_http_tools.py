"""The admin of http tools: the webhook inline, validation, and write-only secret headers (never on a page)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.urls import reverse
from django.views.debug import SafeExceptionReporterFilter

from mcp_app.models import Tool, Webhook

SECRET = "Bearer admin-secret-4e1d0b"


def tool_form(tenant: Any, **fields: Any) -> dict[str, Any]:
    return {
        "tenant": tenant.pk,
        "name": "forecast",
        "title": "",
        "description": "",
        "kind": "http",
        "task_support": "forbidden",
        "icons": "null",
        "input_schema": "{}",
        "output_schema": "null",
        "annotations": "null",
        "python_name": "",
        "static_result": "null",
        "static_error": "null",
        "static_cases": "[]",
        "static_delay_ms": "0",
        "static_progress_steps": "0",
        **fields,
    }


def webhook_form(webhook: Webhook | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "webhook-TOTAL_FORMS": "1",
        "webhook-INITIAL_FORMS": "1" if webhook else "0",
        "webhook-MIN_NUM_FORMS": "0",
        "webhook-MAX_NUM_FORMS": "1",
        "webhook-0-id": webhook.pk if webhook else "",
        "webhook-0-tool": webhook.tool_id if webhook else "",
        "webhook-0-url": "https://hooks.example.com/forecast",
        "webhook-0-method": "POST",
        "webhook-0-headers": '{"X-Team": "weather"}',
        "webhook-0-secret_headers": "",
        "webhook-0-timeout_seconds": "",
        **{f"webhook-0-{key}": value for key, value in fields.items()},
    }


def raw_secret_column() -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret_headers_encrypted FROM {Webhook._meta.db_table}")
        return cursor.fetchone()[0]


@pytest.fixture
def tenant(tenant_factory):
    return tenant_factory()


def test_an_http_tool_is_created_with_its_webhook_and_the_secret_never_shows_again(admin_client, tenant):
    response = admin_client.post(
        reverse("admin:mcp_app_tool_add"),
        {**tool_form(tenant), **webhook_form(secret_headers=f"Authorization: {SECRET}")},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    # Error reports of this request (ADMINS mail, debug page) would hide the posted values.
    report = SafeExceptionReporterFilter().get_post_parameters(response.wsgi_request)
    assert report["webhook-0-secret_headers"] != f"Authorization: {SECRET}"
    webhook = Webhook.objects.get(tool__name="forecast")
    assert webhook.reveal_secret_headers() == {"Authorization": SECRET}
    assert SECRET not in raw_secret_column()
    assert "admin-secret" not in raw_secret_column()

    page = admin_client.get(reverse("admin:mcp_app_tool_change", args=[webhook.tool_id])).content.decode()
    assert "Set: Authorization." in page
    assert SECRET not in page and "admin-secret" not in page
    assert webhook.secret_headers_encrypted not in page

    # Saving the page with the secret field left empty keeps the secret.
    keep = admin_client.post(
        reverse("admin:mcp_app_tool_change", args=[webhook.tool_id]), {**tool_form(tenant), **webhook_form(webhook)}
    )
    assert keep.status_code == 302
    assert Webhook.objects.get().reveal_secret_headers() == {"Authorization": SECRET}

    # Typing new ones replaces them all; "remove" clears them.
    admin_client.post(
        reverse("admin:mcp_app_tool_change", args=[webhook.tool_id]),
        {**tool_form(tenant), **webhook_form(webhook, secret_headers="X-Api-Key: k2")},
    )
    assert Webhook.objects.get().reveal_secret_headers() == {"X-Api-Key": "k2"}
    admin_client.post(
        reverse("admin:mcp_app_tool_change", args=[webhook.tool_id]),
        {**tool_form(tenant), **webhook_form(webhook, clear_secret_headers="on")},
    )
    assert Webhook.objects.get().reveal_secret_headers() == {}
    assert "Not set." in admin_client.get(reverse("admin:mcp_app_tool_change", args=[webhook.tool_id])).content.decode()


def test_a_form_with_errors_does_not_echo_the_secret(admin_client, tenant):
    response = admin_client.post(
        reverse("admin:mcp_app_tool_add"),
        {**tool_form(tenant), **webhook_form(url="ftp://nope.example.com/", secret_headers=f"Authorization: {SECRET}")},
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "http:// or https://" in page
    assert SECRET not in page and "admin-secret" not in page
    assert not Tool.objects.exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"url": "https://u:p@hooks.example.com/"}, "credentials"),
        ({"method": "GET"}, "Select a valid choice"),
        ({"timeout_seconds": "600"}, "at most 60"),
        ({"url": "http://169.254.169.254/latest/"}, "cloud metadata"),
        ({"secret_headers": "Host: evil.example"}, "set by mcp-host"),
    ],
)
def test_webhook_configuration_is_validated_in_the_admin(admin_client, tenant, fields, message):
    response = admin_client.post(reverse("admin:mcp_app_tool_add"), {**tool_form(tenant), **webhook_form(**fields)})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Tool.objects.exists()


def test_an_http_tool_needs_a_webhook_and_other_kinds_refuse_one(admin_client, tenant):
    empty = {**webhook_form(), "webhook-TOTAL_FORMS": "0"}
    missing = admin_client.post(reverse("admin:mcp_app_tool_add"), {**tool_form(tenant), **empty})
    assert missing.status_code == 200 and "needs its webhook" in missing.content.decode()
    static = admin_client.post(
        reverse("admin:mcp_app_tool_add"),
        {**tool_form(tenant, kind="static", static_result='{"content": []}'), **webhook_form()},
    )
    assert static.status_code == 200 and "Only tools of kind http" in static.content.decode()
    assert not Tool.objects.exists()


def test_a_tool_form_without_the_webhook_inline_data_still_saves(admin_client, tenant):
    response = admin_client.post(
        reverse("admin:mcp_app_tool_add"), tool_form(tenant, kind="static", static_result='{"content": []}')
    )
    assert response.status_code == 302
    assert Tool.objects.get().kind == "static" and not Webhook.objects.exists()
