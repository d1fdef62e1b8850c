"""The webhook of an http tool: validation on every save, secret headers encrypted at rest, key rotation."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from mcp_app.definitions.http_tools import SecretHeadersUnavailable, parse_secret_headers
from mcp_app.models import Tool, Upstream, Webhook

SECRET = "Bearer tok-7f3a9c1e5d"


@pytest.fixture
def http_tool(server_factory):
    server = server_factory()
    return Tool.objects.create(tenant=server.tenant, name="hook", kind=Tool.Kind.HTTP)


def raw_column(obj: Webhook | Upstream) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret_headers_encrypted FROM {type(obj)._meta.db_table} WHERE id = %s", [obj.pk])
        return cursor.fetchone()[0]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"url": "ftp://example.com/x"}, "url", "http:// or https://"),
        ({"url": "https://user:pw@example.com/x"}, "url", "credentials"),
        ({"url": "https://token@example.com/x"}, "url", "credentials"),
        ({"url": "https://example.com/x#frag"}, "url", "fragment"),
        ({"url": "https:///nohost"}, "url", "host"),
        ({"url": "https://example.com:99999/"}, "url", "valid URL"),
        ({"url": "http://10.0.0.1/hook"}, "url", "private"),
        ({"url": "http://[::ffff:127.0.0.1]/hook"}, "url", "127.0.0.1"),
        ({"method": "GET"}, "method", "POST, PUT, PATCH"),
        ({"timeout_seconds": 0}, "timeout_seconds", "more than 0"),
        ({"timeout_seconds": 61}, "timeout_seconds", "at most 60"),
        ({"headers": {"Host": "evil.example"}}, "headers", "set by mcp-host"),
        ({"headers": {"X-A": "one\r\nX-B: two"}}, "headers", "line breaks"),
        ({"headers": {"X-A": "caf\u00e9"}}, "headers", "printable ASCII"),
        ({"headers": {"bad name": "x"}}, "headers", "not a valid header name"),
        ({"headers": {"X-A": 5}}, "headers", "must be a string"),
        ({"headers": ["X-A"]}, "headers", "object"),
    ],
)
def test_invalid_configuration_is_refused_on_a_plain_save(http_tool, fields, field, message):
    webhook = Webhook(tool=http_tool, **{"url": "https://hooks.example.com/x", **fields})
    with pytest.raises(ValidationError) as caught:
        webhook.save()
    assert message in " ".join(caught.value.message_dict[field])
    assert not Webhook.objects.exists()


def test_allow_listed_literal_addresses_may_be_saved(http_tool):
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": ["10.0.0.0/8"]}):
        Webhook.objects.create(tool=http_tool, url="http://10.0.0.1/hook", timeout_seconds=60)


def test_only_http_tools_have_a_webhook(server_factory):
    server = server_factory()
    static = Tool.objects.create(tenant=server.tenant, name="s", static_result={"content": []})
    with pytest.raises(ValidationError, match="kind http"):
        Webhook(tool=static, url="https://hooks.example.com/x").full_clean()


def test_secret_headers_are_encrypted_at_rest_and_absent_from_str_and_repr(http_tool):
    webhook = Webhook(tool=http_tool, url="https://hooks.example.com/x?key=query-secret")
    webhook.set_secret_headers({"Authorization": SECRET, "X-Api-Key": "k-99"})
    webhook.save()
    stored = raw_column(webhook)
    assert stored and SECRET not in stored and "tok-7f3a9c1e5d" not in stored and "k-99" not in stored
    fresh = Webhook.objects.get(pk=webhook.pk)
    assert fresh.reveal_secret_headers() == {"Authorization": SECRET, "X-Api-Key": "k-99"}
    for text in (str(fresh), repr(fresh), str(http_tool)):
        assert SECRET not in text and "query-secret" not in text and stored not in text
    assert fresh.secret_headers == {"Authorization": "set", "X-Api-Key": "set"}  # all any display gets
    assert SECRET not in repr(fresh.secret_headers)


@pytest.mark.parametrize("model", [Webhook, Upstream])
def test_write_only_updates_keep_replace_or_clear(http_tool, model):
    """One rule for the secret headers of webhooks and upstreams: assigning replaces them all, ``"set"`` (what
    displays show) keeps a stored value, ``{}`` removes them."""
    if model is Webhook:
        obj = Webhook(tool=http_tool, url="https://hooks.example.com/x")
    else:
        obj = Upstream(tenant=http_tool.tenant, name="docs", url="https://mcp.example.com/mcp")
    obj.secret_headers = parse_secret_headers("Authorization: Bearer one\n\nX-Key: two")
    obj.save()
    assert obj.reveal_secret_headers() == {"Authorization": "Bearer one", "X-Key": "two"}
    before = obj.secret_headers_encrypted
    obj.secret_headers = obj.secret_headers  # what a display shows, written back: nothing changes
    assert obj.secret_headers_encrypted == before
    obj.secret_headers = {"Authorization": "set", "X-Team": "t"}
    assert obj.reveal_secret_headers() == {"Authorization": "Bearer one", "X-Team": "t"}
    obj.secret_headers = {"Authorization": "Bearer three"}
    assert obj.reveal_secret_headers() == {"Authorization": "Bearer three"}
    obj.secret_headers = {}
    obj.save()
    assert raw_column(obj) == "" and obj.secret_header_names == [] and obj.secret_headers == {}
    with pytest.raises(ValueError, match="Line 1"):
        parse_secret_headers("no colon here")
    with pytest.raises(ValidationError, match="set by mcp-host"):
        obj.secret_headers = {"Host": "evil.example"}


def test_an_oauth_client_secret_is_write_only(http_tool):
    upstream = Upstream(tenant=http_tool.tenant, name="docs", url="https://mcp.example.com/mcp")
    assert upstream.oauth_client_secret is False
    upstream.oauth_client_secret = SECRET
    assert upstream.oauth_client_secret is True and SECRET not in upstream.oauth_client_secret_encrypted
    assert upstream.reveal_oauth_client_secret() == SECRET
    upstream.oauth_client_secret = ""
    assert upstream.oauth_client_secret_encrypted == "" and upstream.reveal_oauth_client_secret() == ""


def test_a_header_cannot_be_both_plain_and_secret(http_tool):
    webhook = Webhook(tool=http_tool, url="https://hooks.example.com/x", headers={"authorization": "plain"})
    webhook.set_secret_headers({"Authorization": SECRET})
    with pytest.raises(ValidationError, match="secret header"):
        webhook.save()


def test_keys_rotate(http_tool):
    with override_settings(MCP_APP={"SECRET_KEYS": ["old-key-" + "a" * 32]}):
        webhook = Webhook(tool=http_tool, url="https://hooks.example.com/x")
        webhook.set_secret_headers({"Authorization": SECRET})
        webhook.save()
        under_old = raw_column(webhook)
    with override_settings(MCP_APP={"SECRET_KEYS": ["new-key-" + "b" * 32, "old-key-" + "a" * 32]}):
        assert Webhook.objects.get().reveal_secret_headers() == {"Authorization": SECRET}
        call_command("mcp_rotate_secrets", verbosity=0)
        assert raw_column(webhook) != under_old
    with override_settings(MCP_APP={"SECRET_KEYS": ["new-key-" + "b" * 32]}):
        assert Webhook.objects.get().reveal_secret_headers() == {"Authorization": SECRET}
    with (
        override_settings(MCP_APP={"SECRET_KEYS": ["another-key-" + "c" * 32]}),
        pytest.raises(SecretHeadersUnavailable),
    ):
        Webhook.objects.get().reveal_secret_headers()


def test_rotation_with_a_missing_key_changes_nothing_and_says_so(http_tool):
    webhook = Webhook(tool=http_tool, url="https://hooks.example.com/x")
    webhook.set_secret_headers({"Authorization": SECRET})
    webhook.save()
    before = raw_column(webhook)
    with (
        override_settings(MCP_APP={"SECRET_KEYS": ["unrelated-key-" + "d" * 32]}),
        pytest.raises(CommandError, match="cannot be decrypted"),
    ):
        call_command("mcp_rotate_secrets", verbosity=0)
    assert raw_column(webhook) == before


def test_without_secret_keys_the_key_derives_from_django_secret_key(http_tool, settings):
    webhook = Webhook(tool=http_tool, url="https://hooks.example.com/x")
    webhook.set_secret_headers({"Authorization": SECRET})
    webhook.save()
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-django-secret-key-" + "z" * 30
    with pytest.raises(SecretHeadersUnavailable):
        Webhook.objects.get().reveal_secret_headers()
    settings.SECRET_KEY_FALLBACKS = [old]
    assert Webhook.objects.get().reveal_secret_headers() == {"Authorization": SECRET}
