"""``manage.py mcp_versions list|diff|publish|rollback``: a server's catalog versions from the command line, checked
against the rows it leaves and what the server then serves; every mistake a clear ``CommandError``."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import CatalogVersion, McpServer, Tool

pytestmark = pytest.mark.django_db

ANSWER = {"content": [{"type": "text", "text": "ok"}]}


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp_versions", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def site(tenant_factory: Any, server_factory: Any, tool_factory: Any) -> Any:
    server = server_factory(tenant=tenant_factory(slug="acme"), server_id="acme-docs", review_edits=True)
    tool = tool_factory(server, "lookup", kind=Tool.Kind.STATIC, static_result=ANSWER, description="First.")
    return server, tool


def _describe(tool: Tool, text: str) -> None:
    Tool.objects.filter(pk=tool.pk).update(description=text)  # the draft changes; nothing is published


def _served_description(server: McpServer) -> str:
    return resolve_catalog(McpServer.objects.get(pk=server.pk)).tool("lookup").description


def test_publish_list_rollback_and_diff(site: Any) -> None:
    server, tool = site
    assert run("list", "--tenant", "acme", "--server", "acme-docs", "--json") == "[]\n"
    first = json.loads(run("publish", "--tenant", "acme", "--server", "acme-docs", "--note", "go", "--json"))
    assert (first["version"], first["written"], first["note"], first["source"]) == (1, True, "go", "publish")
    again = run("publish", "--tenant", "acme", "--server", "acme-docs")
    assert again == "acme-docs already serves this content as v1; nothing written.\n"
    _describe(tool, "Second.")

    diff = json.loads(run("diff", "--tenant", "acme", "--server", "acme-docs", "--json"))
    assert (diff["from"], diff["to"]) == (1, "draft")
    assert diff["changes"] == [
        {
            "list": "tools",
            "key": "lookup",
            "change": "changed",
            "old": {"name": "lookup", "description": "First.", "inputSchema": {"type": "object", "properties": {}}},
            "new": {"name": "lookup", "description": "Second.", "inputSchema": {"type": "object", "properties": {}}},
            "fields": [{"field": "description", "old": "First.", "new": "Second."}],
        }
    ]
    assert run("diff", "--tenant", "acme", "--server", "acme-docs") == (
        "acme-docs: v1 (published) -> draft, 1 change(s)\n  ~ tools lookup: description\n"
    )
    assert _served_description(server) == "First."
    assert run("publish", "--tenant", "acme", "--server", "acme-docs").startswith("Published acme-docs v2 (digest ")
    assert _served_description(server) == "Second."

    listed = json.loads(run("list", "--tenant", "acme", "--server", "acme-docs", "--json"))
    assert [(row["version"], row["published"]) for row in listed] == [(2, True), (1, False)]

    back = json.loads(run("rollback", "--tenant", "acme", "--server", "acme-docs", "--json"))
    assert (back["version"], back["source"], back["rolled_back_to"], back["written"]) == (3, "rollback", 1, True)
    assert _served_description(server) == "First."
    between = json.loads(
        run("diff", "--tenant", "acme", "--server", "acme-docs", "--against", "2", "--version", "3", "--json")
    )
    assert [(c["change"], c["old"]["description"], c["new"]["description"]) for c in between["changes"]] == [
        ("changed", "Second.", "First.")
    ]
    # Republishing version 2 by number.
    assert (
        json.loads(run("publish", "--tenant", "acme", "--server", "acme-docs", "--version", "2", "--json"))["version"]
        == 4
    )
    assert _served_description(server) == "Second."
    text = run("list", "--tenant", "acme", "--server", "acme-docs")
    assert text.splitlines()[0].startswith("* v4  ") and "rollback of v2" in text.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("list", "--tenant", "nobody", "--server", "acme-docs"), "no server 'acme-docs' in tenant 'nobody'"),
        (("list", "--tenant", "acme", "--server", "nope"), "no server 'nope' in tenant 'acme'"),
        (("rollback", "--tenant", "acme", "--server", "acme-docs", "--version", "7"), "has no version 7"),
        (("diff", "--tenant", "acme", "--server", "acme-docs", "--against", "7"), "has no version 7"),
        (("rollback", "--tenant", "acme", "--server", "acme-docs"), "no version before the published one"),
    ],
)
def test_mistakes_are_command_errors_that_change_nothing(site: Any, args: tuple[str, ...], message: str) -> None:
    server, _tool = site
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert CatalogVersion.objects.filter(server=server).count() == 0


def test_a_server_of_another_tenant_is_refused(site: Any, tenant_factory: Any, server_factory: Any) -> None:
    server_factory(tenant=tenant_factory(slug="other"), server_id="other-docs")
    with pytest.raises(CommandError, match="no server 'acme-docs' in tenant 'other'"):
        run("publish", "--tenant", "other", "--server", "acme-docs")
    assert CatalogVersion.objects.count() == 0


def test_rollback_with_only_one_version_has_nothing_to_roll_back_to(site: Any) -> None:
    run("publish", "--tenant", "acme", "--server", "acme-docs")
    with pytest.raises(CommandError, match="no version before the published one"):
        run("rollback", "--tenant", "acme", "--server", "acme-docs")
