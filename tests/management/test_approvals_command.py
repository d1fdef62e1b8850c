"""``manage.py mcp_approvals list|approve|deny``: a tenant's calls waiting for approval, decided from the command
line by one of its admins, never by an admin of another tenant, a viewer, or the person the agent acts for; every
refusal a clear ``CommandError`` that changes nothing."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from mcp_app.models import Approval, OAuthAgent

pytestmark = pytest.mark.django_db(transaction=True)  # decisions are announced after their transaction commits

ARGUMENTS = {"table": "users", "cascade": True}


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp_approvals", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def waiting(access_factory: Any, tenant_factory: Any) -> Any:
    """A pending approval of a call of ``drop_table`` by an agent of tenant ``acme``."""
    access = access_factory(tools=(), tenant=tenant_factory(slug="acme"))
    return Approval.objects.request(
        tenant_id=access.tenant.pk,
        server_id=access.server.pk,
        agent_id=access.agent.pk,
        tool_name="drop_table",
        arguments_digest=hashlib.sha256(b'{"cascade":true,"table":"users"}').hexdigest(),
        tool_ref=None,
        arguments=ARGUMENTS,
        reason="The tool is destructive",
    )


def test_list_shows_the_agent_the_tool_and_the_exact_arguments(waiting: Any) -> None:
    rows = json.loads(run("list", "--tenant", "acme", "--json"))
    assert [(row["id"], row["status"], row["tool"], row["arguments"]) for row in rows] == [
        (waiting.pk, "pending", "drop_table", ARGUMENTS)
    ]
    assert rows[0]["agent"] == waiting.agent.agent_id and rows[0]["server"] == waiting.server.server_id
    text = run("list", "--tenant", "acme")
    assert f"#{waiting.pk} pending: drop_table by agent {waiting.agent.agent_id}" in text
    assert "No approved approvals in acme." in run("list", "--tenant", "acme", "--status", "approved")


def test_an_admin_approves_and_the_decision_is_audited(waiting: Any, member_factory: Any, caplog: Any) -> None:
    admin = member_factory((waiting.tenant, "admin"), username="ada")
    with caplog.at_level(logging.INFO, logger="mcp_app.audit"):
        out = run("approve", "--tenant", "acme", str(waiting.pk), "--user", "ada", "--note", "ticket 42")
    assert out.startswith(f"Approved approval #{waiting.pk}: drop_table")
    decided = Approval.objects.get(pk=waiting.pk)
    assert (decided.status, decided.decided_by, decided.note) == ("approved", admin, "ticket 42")
    assert any(
        record.name == "mcp_app.audit"
        and "approved by ada" in record.getMessage()
        and "ticket 42" in record.getMessage()
        for record in caplog.records
    )
    with pytest.raises(CommandError, match=r"was already approved by .*: an approval is decided once"):
        run("deny", "--tenant", "acme", str(waiting.pk), "--user", "ada")


def test_an_admin_denies(waiting: Any, member_factory: Any) -> None:
    member_factory((waiting.tenant, "owner"), username="olga")
    decided = json.loads(run("deny", "--tenant", "acme", str(waiting.pk), "--user", "olga", "--json"))
    assert (decided["id"], decided["status"], decided["decided_by"]) == (waiting.pk, "denied", "olga")


def test_an_admin_of_another_tenant_cannot_decide(waiting: Any, member_factory: Any, tenant_factory: Any) -> None:
    member_factory((tenant_factory(slug="globex"), "admin"), username="mallory")
    with pytest.raises(CommandError, match="'mallory': Only the tenant's admins decide its approvals"):
        run("approve", "--tenant", "acme", str(waiting.pk), "--user", "mallory")
    # Through their own tenant the approval is not even there.
    with pytest.raises(CommandError, match=f"no approval {waiting.pk} in tenant 'globex'"):
        run("approve", "--tenant", "globex", str(waiting.pk), "--user", "mallory")
    assert Approval.objects.get(pk=waiting.pk).status == "pending"


def test_a_viewer_cannot_decide(waiting: Any, member_factory: Any) -> None:
    member_factory((waiting.tenant, "viewer"), username="vic")
    with pytest.raises(CommandError, match="'vic': Only the tenant's admins decide its approvals"):
        run("deny", "--tenant", "acme", str(waiting.pk), "--user", "vic")
    assert Approval.objects.get(pk=waiting.pk).status == "pending"


def test_the_person_the_agent_acts_for_cannot_decide(waiting: Any, member_factory: Any) -> None:
    from oauth2_provider.models import Application

    user = member_factory((waiting.tenant, "admin"), username="self")
    application = Application.objects.create(
        name="client",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1/cb",
    )
    OAuthAgent.objects.create(agent=waiting.agent, tenant=waiting.tenant, user=user, application=application)
    with pytest.raises(
        CommandError, match="You are the user this agent acts for: another admin of the tenant must decide its calls"
    ):
        run("approve", "--tenant", "acme", str(waiting.pk), "--user", "self")
    assert Approval.objects.get(pk=waiting.pk).status == "pending"


def test_an_expired_request_cannot_be_decided_and_is_listed_expired(waiting: Any, member_factory: Any) -> None:
    member_factory((waiting.tenant, "admin"), username="ada")
    Approval.objects.filter(pk=waiting.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(CommandError, match=r"expired at .*: it can no longer be decided"):
        run("approve", "--tenant", "acme", str(waiting.pk), "--user", "ada")
    assert [row["id"] for row in json.loads(run("list", "--tenant", "acme", "--status", "expired", "--json"))] == [
        waiting.pk
    ]


def test_unknown_tenant_user_or_id_are_clear_errors(waiting: Any, member_factory: Any) -> None:
    member_factory((waiting.tenant, "admin"), username="ada")
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        run("list", "--tenant", "nope")
    with pytest.raises(CommandError, match="no active user 'nobody'"):
        run("approve", "--tenant", "acme", str(waiting.pk), "--user", "nobody")
    with pytest.raises(CommandError, match="no approval 999999 in tenant 'acme'"):
        run("approve", "--tenant", "acme", "999999", "--user", "ada")


def test_mcp_purge_expires_what_is_due_and_deletes_ended_approvals_past_retention(waiting: Any, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "AUDIT_RETENTION_DAYS": 30}
    due = Approval.objects.filter(pk=waiting.pk)
    due.update(expires_at=timezone.now() - timedelta(seconds=1))
    old = Approval.objects.create(
        tenant=waiting.tenant,
        server=waiting.server,
        agent=waiting.agent,
        tool_name="drop_table",
        arguments_digest="0" * 64,
        status="used",
        created_at=timezone.now() - timedelta(days=31),
        expires_at=timezone.now() - timedelta(days=30),
    )
    dry = io.StringIO()
    call_command("mcp_purge", "--dry-run", stdout=dry)
    assert "would delete 1 expired approvals" in dry.getvalue().splitlines()
    assert due.get().status == "pending" and Approval.objects.filter(pk=old.pk).exists()  # a dry run changes nothing
    out = io.StringIO()
    call_command("mcp_purge", stdout=out)
    assert "deleted 1 expired approvals" in out.getvalue().splitlines()
    assert due.get().status == "expired"
    assert not Approval.objects.filter(pk=old.pk).exists()
