"""``mcp_upstream add|sync|list|remove`` against a real upstream MCP server (the SDK's ``MCPServer``, its own
process, requiring a bearer token).

What the command did is checked in the database and in the catalog a server resolves for its clients
(``mcp_catalog --json``, what the endpoint lists), never against the command's own output alone.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from mcp_app.models import Prompt, Resource, Tool, Upstream, UpstreamBinding
from tests.federation.upstream_server import UpstreamProcess
from tests.upstreams import TOKEN, UPSTREAM_PROMPTS, UPSTREAM_RESOURCES, UPSTREAM_TOOLS, prefixed

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def exposed(server_id: str, tenant: str) -> dict[str, list[str]]:
    """The server's catalog as its clients list it."""
    wire = json.loads(run("mcp_catalog", "--tenant", tenant, "--server", server_id, "--json")[0])
    return {
        "tools": sorted(tool["name"] for tool in wire["tools"]),
        "resources": sorted(resource["uri"] for resource in wire["resources"]),
        "prompts": sorted(prompt["name"] for prompt in wire["prompts"]),
    }


def add(upstream: UpstreamProcess, *extra: str, tenant: str = "acme", name: str = "docs") -> dict[str, Any]:
    out, _ = run(
        "mcp_upstream",
        "add",
        "--tenant",
        tenant,
        "--name",
        name,
        "--url",
        upstream.url,
        "--header",
        f"Authorization: {TOKEN}",
        "--json",
        *extra,
    )
    return json.loads(out)


ENTRIES = len(UPSTREAM_TOOLS) + len(UPSTREAM_RESOURCES) + len(UPSTREAM_PROMPTS)


@pytest.fixture
def acme(tenant_factory: Any) -> Any:
    return tenant_factory(slug="acme")


def test_add_registers_syncs_and_binds_with_the_header_stored_secret(
    protected_upstream: UpstreamProcess, acme: Any, server_factory: Any
) -> None:
    server = server_factory(tenant=acme)
    result = add(protected_upstream, "--prefix", "gh_", "--bind", server.server_id)

    entries = {
        "tools": prefixed("gh_"),
        "resources": sorted(UPSTREAM_RESOURCES),
        "prompts": prefixed("gh_", UPSTREAM_PROMPTS),
    }
    assert result["entries"] == entries
    assert result["bound"] == [server.server_id]
    assert result["sync"]["ok"] is True
    assert result["server_info"]["name"] == "upstream"
    assert result["secret_headers"] == ["Authorization"]
    assert exposed(server.server_id, "acme") == {
        "tools": entries["tools"],
        "resources": ["note://readme"],  # templates are listed apart
        "prompts": entries["prompts"],
    }
    upstream = Upstream.objects.get(tenant=acme, name="docs")
    assert upstream.reveal_secret_headers() == {"Authorization": TOKEN}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret_headers_encrypted, headers FROM {Upstream._meta.db_table}")
        encrypted, plain = cursor.fetchone()
    assert "upstream-secret" not in encrypted and "upstream-secret" not in str(plain)
    assert TOKEN not in json.dumps(result)


def test_the_human_output_lists_what_was_imported(protected_upstream: UpstreamProcess, acme: Any) -> None:
    out, _ = run(
        "mcp_upstream",
        "add",
        "--tenant",
        "acme",
        "--name",
        "docs",
        "--url",
        protected_upstream.url,
        "--prefix",
        "d_",
        "--header",
        f"Authorization: {TOKEN}",
    )
    assert "Registered upstream docs of acme" in out
    assert "  d_echo" in out and "  note://readme" in out and "  d_greet" in out
    assert "Secret headers (stored encrypted): Authorization" in out
    assert "upstream-secret" not in out


def test_a_failed_first_sync_registers_nothing(
    protected_upstream: UpstreamProcess, acme: Any, server_factory: Any
) -> None:
    server = server_factory(tenant=acme)
    with pytest.raises(
        CommandError,
        match=r"the first sync failed, nothing was registered: Could not connect: the upstream answered HTTP 401 \(check its credentials\)",
    ):
        run(
            "mcp_upstream",
            "add",
            "--tenant",
            "acme",
            "--name",
            "docs",
            "--url",
            protected_upstream.url,
            "--bind",
            server.server_id,
        )  # no Authorization: the upstream answers 401
    assert not Upstream.objects.exists()
    assert not Tool.objects.filter(kind="upstream").exists()
    assert exposed(server.server_id, "acme")["tools"] == []


def test_sync_picks_up_a_new_upstream_tool_on_every_bound_server(
    protected_upstream: UpstreamProcess, acme: Any, server_factory: Any
) -> None:
    server = server_factory(tenant=acme)
    add(protected_upstream, "--prefix", "gh_", "--bind", server.server_id)
    protected_upstream.add_tool("lookup")

    report = json.loads(run("mcp_upstream", "sync", "--tenant", "acme", "--name", "docs", "--json")[0])
    assert report == {
        "ok": True,
        "error": "",
        "added": ["gh_lookup"],
        "updated": [],
        "removed": [],
        "skipped": [],
        "flagged": [],
    }
    assert exposed(server.server_id, "acme")["tools"] == sorted([*prefixed("gh_"), "gh_lookup"])
    out, _ = run("mcp_upstream", "sync", "--tenant", "acme", "--name", "docs")
    assert out.strip() == "Nothing changed."


def test_a_failed_sync_keeps_the_entries_and_says_why(protected_upstream: UpstreamProcess, acme: Any) -> None:
    add(protected_upstream)
    Upstream.objects.filter(name="docs").update(url=protected_upstream.url.replace("/mcp", "/nowhere"))
    with pytest.raises(CommandError, match="sync of 'docs' failed"):
        run("mcp_upstream", "sync", "--tenant", "acme", "--name", "docs")
    assert Tool.objects.filter(upstream__name="docs").count() == len(UPSTREAM_TOOLS)
    assert Upstream.objects.get(name="docs").last_sync_error


def test_list_shows_upstreams_with_entries_sync_and_bindings(
    protected_upstream: UpstreamProcess, acme: Any, server_factory: Any, tenant_factory: Any
) -> None:
    server = server_factory(tenant=acme)
    add(protected_upstream, "--prefix", "a_", "--bind", server.server_id)
    tenant_factory(slug="globex")
    add(protected_upstream, "--prefix", "g_", tenant="globex", name="other")

    rows = json.loads(run("mcp_upstream", "list", "--json")[0])
    assert [(row["tenant"], row["name"]) for row in rows] == [("acme", "docs"), ("globex", "other")]
    docs = rows[0]
    assert docs["url"] == protected_upstream.url
    assert docs["prefix"] == "a_"
    assert docs["entries"] == ENTRIES
    assert docs["last_synced_at"] and docs["last_sync_error"] == ""
    assert docs["bound"] == [server.server_id]

    only_globex = json.loads(run("mcp_upstream", "list", "--tenant", "globex", "--json")[0])
    assert [row["name"] for row in only_globex] == ["other"]
    text, _ = run("mcp_upstream", "list", "--tenant", "acme")
    assert "docs\tacme\t" in text and f"{ENTRIES} entries" in text and f"bound to {server.server_id}" in text


def test_list_hides_the_query_string(acme: Any, settings: Any) -> None:
    Upstream.objects.create(tenant=acme, name="keyed", url="https://mcp.example.com/mcp?key=s3cret")
    rows = json.loads(run("mcp_upstream", "list", "--json")[0])
    assert rows[0]["url"] == "https://mcp.example.com/mcp?…"
    assert "s3cret" not in run("mcp_upstream", "list")[0]


def test_remove_takes_the_entries_with_it(protected_upstream: UpstreamProcess, acme: Any, server_factory: Any) -> None:
    server = server_factory(tenant=acme)
    add(protected_upstream, "--prefix", "gh_", "--bind", server.server_id)
    out, _ = run("mcp_upstream", "remove", "--tenant", "acme", "--name", "docs")
    assert f"Removed upstream docs of acme and its {ENTRIES} entries." in out
    assert not Upstream.objects.exists() and not UpstreamBinding.objects.exists()
    assert not Tool.objects.filter(name="gh_echo").exists()
    assert not Resource.objects.filter(uri="note://readme").exists()
    assert not Prompt.objects.filter(name="gh_greet").exists()
    assert exposed(server.server_id, "acme") == {"tools": [], "resources": [], "prompts": []}


# Refusals: clear errors, nothing registered ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tenant", "nope"), "no tenant 'nope'"),
        (("--bind", "missing"), "no server 'missing' in tenant 'acme'"),
        (("--url", "ftp://mcp.example.com/"), "url: The URL must start with http:// or https://."),
        (("--url", "https://user:pw@mcp.example.com/"), "must not contain credentials"),
        (("--prefix", "gh prefix"), "prefix: A prefix is at most 64"),
        (("--name", "Not A Name"), "name: An upstream's name is"),
        (("--header", "no colon"), "--header: Line 1 is not of the form 'Name: value'."),
        (("--header", "Host: evil"), "--header: The Host header is set by mcp-host"),
        (("--url", "http://10.1.2.3/mcp"), "url: The address 10.1.2.3 is private; upstreams may not call it."),
        (("--url", "http://127.0.0.1:9/mcp"), "url: The address 127.0.0.1 is loopback"),
    ],
)
def test_add_refuses_with_a_clear_message(acme: Any, settings: Any, args: tuple[str, ...], message: str) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "HTTP_TOOL_ALLOWED_NETWORKS": []}
    options = {"--tenant": "acme", "--name": "docs", "--url": "https://mcp.example.com/mcp"}
    extra: list[str] = []
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in options:
            options[flag] = value
        else:
            extra += [flag, value]
    with pytest.raises(CommandError) as raised:
        run("mcp_upstream", "add", *[part for pair in options.items() for part in pair], *extra)
    assert message in str(raised.value)
    assert not Upstream.objects.exists()


def test_a_server_of_another_tenant_is_refused(
    protected_upstream: UpstreamProcess, acme: Any, tenant_factory: Any, server_factory: Any
) -> None:
    theirs = server_factory(tenant=tenant_factory(slug="globex"))
    with pytest.raises(CommandError, match="belongs to another tenant"):
        add(protected_upstream, "--bind", theirs.server_id)
    assert not Upstream.objects.exists()
    assert exposed(theirs.server_id, "globex")["tools"] == []


def test_a_taken_name_and_unknown_upstreams_are_refused(protected_upstream: UpstreamProcess, acme: Any) -> None:
    add(protected_upstream)
    with pytest.raises(CommandError, match="already has an upstream named 'docs'"):
        add(protected_upstream)
    for action in ("sync", "remove"):
        with pytest.raises(CommandError, match="no upstream 'nope' in tenant 'acme'"):
            run("mcp_upstream", action, "--tenant", "acme", "--name", "nope")
        with pytest.raises(CommandError, match="no upstream 'docs' in tenant 'globex'"):
            run("mcp_upstream", action, "--tenant", "globex", "--name", "docs")


# mcp_rotate_secrets ---------------------------------------------------------------------------------------------

OLD_KEY, NEW_KEY = "old-key-" + "a" * 32, "new-key-" + "b" * 32


def raw_secrets() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret_headers_encrypted, oauth_client_secret_encrypted FROM {Upstream._meta.db_table}")
        return cursor.fetchone()


def test_rotate_secrets_re_encrypts_upstream_secrets(acme: Any, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "SECRET_KEYS": [OLD_KEY]}
    upstream = Upstream(
        tenant=acme,
        name="docs",
        url="https://mcp.example.com/mcp",
        oauth_client_id="client",
        oauth_issuer="https://auth.example.com",
    )
    upstream.set_secret_headers({"X-Api-Key": "k-1"})
    upstream.oauth_client_secret = "client-secret"
    upstream.save()
    before = raw_secrets()

    settings.MCP_APP = {**settings.MCP_APP, "SECRET_KEYS": [NEW_KEY, OLD_KEY]}
    out, _ = run("mcp_rotate_secrets")
    assert "2 upstream secret(s)" in out
    after = raw_secrets()
    assert after[0] != before[0] and after[1] != before[1]

    settings.MCP_APP = {**settings.MCP_APP, "SECRET_KEYS": [NEW_KEY]}  # the old key is gone: still readable
    upstream = Upstream.objects.get()
    assert upstream.reveal_secret_headers() == {"X-Api-Key": "k-1"}
    assert upstream.reveal_oauth_client_secret() == "client-secret"

    settings.MCP_APP = {**settings.MCP_APP, "SECRET_KEYS": ["unrelated-key-" + "d" * 32]}
    with pytest.raises(CommandError, match="cannot be decrypted"):
        run("mcp_rotate_secrets")
    assert raw_secrets() == after


def test_the_era_is_chosen_at_add_and_changed_with_set(protected_upstream: UpstreamProcess, acme: Any) -> None:
    added = add(protected_upstream, "--era", "2025-11-25")
    out, _ = run("mcp_upstream", "set", "--tenant", "acme", "--name", "docs", "--era", "auto")

    assert (added["era"], added["protocol_version"]) == ("2025-11-25", "2025-11-25")
    assert out.strip() == "Upstream docs of acme now speaks era auto."
    assert Upstream.objects.get(name="docs").era == "auto"
    with pytest.raises(CommandError, match="invalid choice"):
        run("mcp_upstream", "set", "--tenant", "acme", "--name", "docs", "--era", "2024-11-05")


def test_the_change_policy_is_hold_by_default_chosen_at_add_and_changed_with_set(
    protected_upstream: UpstreamProcess, acme: Any
) -> None:
    held = add(protected_upstream)
    blocked = add(protected_upstream, "--on-change", "block", name="strict")

    out, _ = run("mcp_upstream", "set", "--tenant", "acme", "--name", "docs", "--on-change", "publish")
    listed = json.loads(run("mcp_upstream", "list", "--tenant", "acme", "--json")[0])
    shown = json.loads(run("mcp_upstream", "set", "--tenant", "acme", "--name", "strict", "--era", "auto", "--json")[0])

    assert (held["on_change"], blocked["on_change"]) == ("hold", "block")
    assert out.strip() == "Upstream docs of acme now publishes its changes at once."
    assert dict(Upstream.objects.values_list("name", "on_change")) == {"docs": "publish", "strict": "block"}
    assert {row["name"]: row["on_change"] for row in listed} == {"docs": "publish", "strict": "block"}
    assert shown == {"tenant": "acme", "name": "strict", "era": "auto", "on_change": "block"}


def test_a_change_policy_that_does_not_exist_or_a_set_of_nothing_is_refused(
    protected_upstream: UpstreamProcess, acme: Any
) -> None:
    with pytest.raises(CommandError, match="invalid choice: 'ignore'"):
        add(protected_upstream, "--on-change", "ignore")
    assert not Upstream.objects.exists()
    add(protected_upstream)

    with pytest.raises(CommandError, match="invalid choice: 'later'"):
        run("mcp_upstream", "set", "--tenant", "acme", "--name", "docs", "--on-change", "later")
    with pytest.raises(CommandError, match="nothing to change: give --era or --on-change"):
        run("mcp_upstream", "set", "--tenant", "acme", "--name", "docs")
    assert Upstream.objects.get().on_change == "hold"


@pytest.mark.django_db(transaction=True)  # the alert thread reads the hook on a connection of its own
def test_sync_holds_a_new_tool_by_default_and_returns_once_the_webhook_has_it(
    protected_upstream: UpstreamProcess, acme: Any, server_factory: Any, webhook_server: Any, settings: Any
) -> None:
    from mcp_app.models import BudgetAlertHook, CatalogChange

    settings.MCP_APP = {**settings.MCP_APP, "BUDGET_ALERT_ALLOWED_NETWORKS": ["127.0.0.1"]}
    server = server_factory(tenant=acme)
    hook = BudgetAlertHook(tenant=acme, url=webhook_server.url("/content"))
    hook.new_signing_secret()
    hook.save()
    add(protected_upstream, "--prefix", "gh_", "--bind", server.server_id)
    protected_upstream.add_tool("lookup", "Look anything up.")

    out, _ = run("mcp_upstream", "sync", "--tenant", "acme", "--name", "docs")

    assert out.strip() == "Added (1):\n  gh_lookup"
    assert [request.json()["type"] for request in webhook_server.requests] == ["catalog.change_held"]
    assert webhook_server.requests[0].json()["new"]["description"] == "Look anything up."
    assert "gh_lookup" not in exposed(server.server_id, "acme")["tools"]  # held: not served until published
    assert CatalogChange.objects.pending().get(server=server).key == "gh_lookup"
