"""Which tools require approval, decided when the catalog is resolved (``ToolDescriptor.requires_approval``): a
tool's own setting wins; unset, an upstream tool whose ``destructiveHint`` is true requires it while
``APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS`` is on, and no other tool does."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import Tool, Upstream

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed(server_factory: Any, tool_factory: Any) -> Any:
    """A server with upstream tools (destructive or not, set or not) and a static tool marked destructive."""
    server = server_factory()
    upstream = Upstream.objects.create(tenant=server.tenant, name="docs", url="https://mcp.example.com/mcp")

    def remote(name: str, destructive: bool | None, requires: bool | None = None) -> None:
        annotations = {} if destructive is None else {"destructiveHint": destructive}
        tool_factory(
            server,
            name,
            kind=Tool.Kind.UPSTREAM,
            upstream=upstream,
            remote_name=name,
            annotations=annotations,
            requires_approval=requires,
        )

    remote("drop_table", True)
    remote("read_table", False)
    remote("unannotated", None)
    remote("drop_but_trusted", True, requires=False)
    remote("read_but_guarded", False, requires=True)
    tool_factory(
        server,
        "static_destructive",
        annotations={"destructiveHint": True},
        static_result={"content": [{"type": "text", "text": "ok"}]},
    )
    tool_factory(
        server, "static_guarded", static_result={"content": [{"type": "text", "text": "ok"}]}, requires_approval=True
    )
    return server


def _rule(server: Any) -> dict[str, bool]:
    server.refresh_from_db()  # the catalog cache keys on the server's catalog_version
    return {tool.name: tool.requires_approval for tool in resolve_catalog(server).tools}


def test_destructive_upstream_tools_require_approval_by_default(mixed: Any) -> None:
    assert _rule(mixed) == {
        "drop_table": True,
        "read_table": False,
        "unannotated": False,
        "drop_but_trusted": False,
        "read_but_guarded": True,
        "static_destructive": False,  # the default rule is for upstream tools only
        "static_guarded": True,
    }


def test_the_setting_turns_the_default_off_but_not_a_tools_own_setting(mixed: Any, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS": False}
    required = {name for name, required in _rule(mixed).items() if required}
    assert required == {"read_but_guarded", "static_guarded"}


def _reviewing(server: Any, capture: Any) -> None:
    server.review_edits = True
    with capture(execute=True):
        server.save()  # publishes the draft, after commit, as the version it serves while edits wait


def test_an_upstream_that_drops_its_hint_does_not_lift_the_approval_before_it_is_published(
    mixed: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from mcp_app.catalog.versions import publish

    _reviewing(mixed, django_capture_on_commit_callbacks)
    drop = Tool.objects.get(tenant=mixed.tenant, name="drop_table")
    drop.annotations = {"destructiveHint": False}  # what a sync of a changed upstream writes in the draft
    drop.save()
    mixed.refresh_from_db()
    served = {tool.name: tool for tool in resolve_catalog(mixed).tools}
    assert served["drop_table"].annotations == {"destructiveHint": True}
    assert served["drop_table"].requires_approval is True

    publish(mixed)  # the change approved: the tool no longer says it is destructive
    assert _rule(mixed)["drop_table"] is False


def test_an_upstream_that_adds_the_hint_is_believed_at_once(
    mixed: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _reviewing(mixed, django_capture_on_commit_callbacks)
    read = Tool.objects.get(tenant=mixed.tenant, name="read_table")
    read.annotations = {"destructiveHint": True}
    read.save()
    mixed.refresh_from_db()
    served = {tool.name: tool for tool in resolve_catalog(mixed).tools}
    assert served["read_table"].annotations == {"destructiveHint": False}
    assert served["read_table"].requires_approval is True
