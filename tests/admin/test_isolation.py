"""The admin part of the isolation matrix: Acme and Globex, each with an owner, an admin and a viewer (staff users
holding every mcp_app model permission). Every admin URL of every model is tried by each Globex role on Globex's
own objects and on Acme's; nothing crosses, viewers change nothing.

Expected values are written out per role, never read from the permission code under test.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from mcp_app.models import (
    AgentToken,
    McpSession,
    ServerTool,
    Tenant,
    TenantMembership,
    Tool,
    ToolTask,
    Upstream,
)

ROLES = ("owner", "admin", "viewer")
MODELS = [
    "tenant",
    "tenantmembership",
    "mcpserver",
    "agent",
    "agenttoken",
    "tool",
    "servertool",
    "resource",
    "serverresource",
    "prompt",
    "serverprompt",
    "mcpsession",
    "tooltask",
    "upstream",
    "approval",
    "catalogversion",
    "catalogchange",
]
# Who may open the add page, per model (sessions and tasks are records, never added by hand; tenants are the
# operator's; memberships the owners').
ADD = {model: {"owner", "admin"} for model in MODELS}
# Catalog versions and held changes are records too: written by publishing and by syncs, never by hand; and
# approvals are requested by parked calls and only decided.
RECORDS = {"catalogversion", "catalogchange", "approval"}
ADD.update({"tenant": set(), "tenantmembership": {"owner"}, "mcpsession": set(), "tooltask": set()})
ADD.update({model: set() for model in RECORDS})
DELETE = {model: {"owner", "admin"} for model in MODELS}
DELETE.update({"tenant": set(), "tenantmembership": {"owner"}, **{model: set() for model in RECORDS}})
CHANGE = {model: {"owner", "admin"} for model in MODELS}
CHANGE.update({"tenant": {"owner"}, "tenantmembership": {"owner"}, **{model: set() for model in RECORDS}})


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mcp_app_{model}_{view}", args=args)


def change_link(obj) -> str:
    return url(obj._meta.model_name, "change", obj.pk)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("model", MODELS)
def test_changelists_show_only_the_own_tenant(acme, globex, login, role, model):
    client = login(globex.users[role])
    response = client.get(url(model, "changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    assert change_link(globex[model]) in page
    assert change_link(acme[model]) not in page
    # Filters and every other text on the page: Acme is never named.
    assert "acme" not in page.lower()


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("model", MODELS)
def test_another_tenants_objects_are_404_on_every_object_url(acme, globex, login, role, model):
    client = login(globex.users[role])
    theirs = acme[model]
    for view in ("change", "delete", "history"):
        assert client.get(url(model, view, theirs.pk)).status_code == 404, view
    assert client.post(url(model, "delete", theirs.pk), {"post": "yes"}).status_code == 404
    assert client.post(url(model, "change", theirs.pk), {}).status_code == 404
    assert type(theirs).objects.filter(pk=theirs.pk).exists()


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("model", MODELS)
def test_own_objects_by_role(globex, login, role, model):
    client = login(globex.users[role])
    mine = globex[model]
    change_page = client.get(url(model, "change", mine.pk))
    assert change_page.status_code == 200
    assert "acme" not in change_page.content.decode().lower()  # inlines and choices included
    editable = 'name="_save"' in change_page.content.decode()
    read_only_record = model in ("mcpsession", "tooltask", "approval")
    assert editable == (role in CHANGE[model] and not read_only_record)
    assert client.get(url(model, "add")).status_code == (200 if role in ADD[model] else 403)
    assert client.get(url(model, "delete", mine.pk)).status_code == (200 if role in DELETE[model] else 403)
    assert client.get(url(model, "history", mine.pk)).status_code == 200


@pytest.mark.parametrize("model", ["mcpserver", "agent", "tool", "resource", "prompt"])
def test_viewers_change_nothing_by_posting(globex, login, model):
    client = login(globex.users["viewer"])
    mine = globex[model]
    mine.refresh_from_db()
    before = {f.attname: getattr(mine, f.attname) for f in mine._meta.concrete_fields}
    assert client.post(url(model, "change", mine.pk), {"name": "renamed"}).status_code == 403
    assert client.post(url(model, "delete", mine.pk), {"post": "yes"}).status_code == 403
    mine.refresh_from_db()
    assert {f.attname: getattr(mine, f.attname) for f in mine._meta.concrete_fields} == before


def test_admins_delete_their_own_objects(globex, login):
    tool = globex["tool"]
    response = login(globex.users["admin"]).post(url("tool", "delete", tool.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Tool.objects.filter(pk=tool.pk).exists()


# -- actions -------------------------------------------------------------------------------------------------------

ACTIONS = [
    ("agenttoken", "revoke_tokens", lambda obj: AgentToken.objects.get(pk=obj.pk).revoked_at is not None),
    ("mcpsession", "terminate_sessions", lambda obj: McpSession.objects.get(pk=obj.pk).terminated_at is not None),
    ("tooltask", "cancel_tasks", lambda obj: ToolTask.objects.get(pk=obj.pk).status == "cancelled"),
    ("tool", "delete_selected", lambda obj: not Tool.objects.filter(pk=obj.pk).exists()),
    ("agenttoken", "delete_selected", lambda obj: not AgentToken.objects.filter(pk=obj.pk).exists()),
    ("upstream", "delete_selected", lambda obj: not Upstream.objects.filter(pk=obj.pk).exists()),
]


def run_action(client, model, action, *objs):
    return client.post(
        url(model, "changelist"), {"action": action, "_selected_action": [obj.pk for obj in objs], "post": "yes"}
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("model", "action", "done"), ACTIONS)
def test_actions_never_reach_another_tenant(acme, globex, login, role, model, action, done):
    run_action(login(globex.users[role]), model, action, acme[model])
    assert not done(acme[model])


@pytest.mark.parametrize(("model", "action", "done"), ACTIONS)
def test_actions_by_role_on_own_objects(globex, login, model, action, done):
    run_action(login(globex.users["viewer"]), model, action, globex[model])
    assert not done(globex[model])
    run_action(login(globex.users["admin"]), model, action, globex[model])
    assert done(globex[model])


@pytest.mark.parametrize(("model", "action", "done"), ACTIONS)
def test_a_viewer_elsewhere_cannot_act_there_with_an_admin_role_here(acme, globex, login, model, action, done):
    """Admin in Globex and viewer in Acme: sees Acme's objects, but an action selecting them changes nothing."""
    user = globex.users["admin"]
    TenantMembership.objects.create(tenant=acme.tenant, user=user, role="viewer")
    client = login(user)
    assert change_link(acme[model]) in client.get(url(model, "changelist")).content.decode()
    run_action(client, model, action, acme[model], globex[model])
    assert not done(acme[model])
    assert done(globex[model])


# -- autocomplete, choices, search, filters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "field", "target"),
    [
        ("servertool", "tool", "tool"),
        ("servertool", "server", "mcpserver"),
        ("serverresource", "resource", "resource"),
        ("serverprompt", "prompt", "prompt"),
        ("agenttoken", "agent", "agent"),
    ],
)
@pytest.mark.parametrize("role", ROLES)
def test_autocomplete_offers_only_the_own_tenant(acme, globex, login, role, model, field, target):
    response = login(globex.users[role]).get(
        reverse("admin:autocomplete"), {"app_label": "mcp_app", "model_name": model, "field_name": field, "term": ""}
    )
    assert response.status_code == 200
    ids = {int(item["id"]) for item in response.json()["results"]}
    # Viewers may not attach anything, so they are offered nothing; editors only their own tenant's objects.
    assert ids == (set() if role == "viewer" else {globex[target].pk})


def test_search_finds_nothing_across_tenants(acme, globex, login):
    client = login(globex.users["admin"])
    page = client.get(url("tool", "changelist"), {"q": "acme"}).content.decode()
    assert change_link(acme["tool"]) not in page
    page = client.get(url("tool", "changelist"), {"tenant__id__exact": acme.tenant.pk}).content.decode()
    assert change_link(acme["tool"]) not in page


def test_form_choices_are_the_own_tenants(acme, globex, login):
    client = login(globex.users["admin"])
    for model in ("servertool", "agenttoken", "mcpserver", "tool", "agent"):
        page = client.get(url(model, "add")).content.decode()
        assert "acme" not in page.lower(), model


def test_binding_another_tenants_tool_is_refused(acme, globex, login):
    client = login(globex.users["admin"])
    response = client.post(
        url("servertool", "add"),
        {"server": globex["mcpserver"].pk, "tool": acme["tool"].pk, "enabled": "on", "position": 0},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not ServerTool.objects.filter(tool=acme["tool"], server=globex["mcpserver"]).exists()
    other = Tool.objects.create(tenant=globex.tenant, name="second", static_result={"content": []})
    response = client.post(
        url("servertool", "add"), {"server": globex["mcpserver"].pk, "tool": other.pk, "enabled": "on", "position": 1}
    )
    assert response.status_code == 302


def test_creating_in_another_tenant_is_refused(acme, globex, login):
    client = login(globex.users["admin"])
    tool = {
        "tenant": acme.tenant.pk,
        "name": "planted",
        "kind": "static",
        "task_support": "forbidden",
        "input_schema": "{}",
        "static_result": '{"content": []}',
        "static_cases": "[]",
        "static_delay_ms": 0,
        "static_progress_steps": 0,
    }
    response = client.post(url("tool", "add"), tool)
    assert response.status_code == 200
    assert "Select a valid choice" in str(response.context["adminform"].form.errors["tenant"])
    assert not Tool.objects.filter(name="planted").exists()
    # The same form with the own tenant is accepted: the refusal above is about the tenant only.
    assert client.post(url("tool", "add"), {**tool, "tenant": globex.tenant.pk}).status_code == 302
    agent = {"agent_id": "planted", "name": "x", "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"}
    response = client.post(url("agent", "add"), {**agent, "tenant": acme.tenant.pk})
    assert response.status_code == 200
    assert "Select a valid choice" in str(response.context["adminform"].form.errors["tenant"])
    assert not acme.tenant.agents.filter(agent_id="planted").exists()


def test_a_new_object_goes_into_the_only_tenant_without_asking(globex, login):
    client = login(globex.users["admin"])
    page = client.get(url("agent", "add")).content.decode()
    assert f'type="hidden" name="tenant" value="{globex.tenant.pk}"' in page
    response = client.post(
        url("agent", "add"),
        {
            "tenant": globex.tenant.pk,
            "agent_id": "new-bot",
            "name": "New bot",
            "is_active": "on",
            "tokens-TOTAL_FORMS": "0",
            "tokens-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    assert globex.tenant.agents.filter(agent_id="new-bot").exists()


def test_a_member_of_two_tenants_picks_one(acme, globex, login):
    user = globex.users["admin"]
    TenantMembership.objects.create(tenant=acme.tenant, user=user, role="admin")
    page = login(user).get(url("agent", "add")).content.decode()
    assert 'type="hidden" name="tenant"' not in page
    assert f'<option value="{acme.tenant.pk}">' in page and f'<option value="{globex.tenant.pk}">' in page


# -- the attack scenario -------------------------------------------------------------------------------------


def test_globex_admin_cannot_revoke_acmes_token_become_acme_owner_or_mint_acme_tokens(acme, globex, login):
    client = login(globex.users["admin"])
    me = globex.users["admin"]

    # Revoke Acme's token: through the action, the change form and the delete page.
    run_action(client, "agenttoken", "revoke_tokens", acme["agenttoken"])
    assert client.post(url("agenttoken", "change", acme["agenttoken"].pk), {"name": "x"}).status_code == 404
    assert client.post(url("agenttoken", "delete", acme["agenttoken"].pk), {"post": "yes"}).status_code == 404
    assert AgentToken.objects.authenticate(acme.raw_token) is not None

    # Make myself owner of Acme: add a membership, or edit mine (or the Acme owner's) into Acme ownership.
    for tenant in (acme.tenant, globex.tenant):
        response = client.post(
            url("tenantmembership", "add"), {"tenant": tenant.pk, "user": me.username, "role": "owner"}
        )
        assert response.status_code == 403
    my_membership = me.mcp_memberships.get()
    response = client.post(
        url("tenantmembership", "change", my_membership.pk), {"tenant": acme.tenant.pk, "role": "owner"}
    )
    assert response.status_code == 403
    assert (
        client.post(url("tenantmembership", "change", acme["tenantmembership"].pk), {"role": "viewer"}).status_code
        == 404
    )
    inline = {
        "slug": acme.tenant.slug,
        "name": "Acme",
        "memberships-TOTAL_FORMS": "1",
        "memberships-INITIAL_FORMS": "0",
        "memberships-0-user": me.username,
        "memberships-0-role": "owner",
    }
    assert client.post(url("tenant", "change", acme.tenant.pk), inline).status_code == 404
    assert client.post(url("tenant", "change", globex.tenant.pk), {**inline, "slug": "globex"}).status_code == 403
    assert list(TenantMembership.objects.filter(user=me).values_list("tenant__slug", "role")) == [("globex", "admin")]

    # Mint a token for Acme's agent, or for my agent on Acme's server.
    before = AgentToken.objects.count()
    for agent, server in (
        (acme["agent"], acme["mcpserver"]),
        (acme["agent"], globex["mcpserver"]),
        (globex["agent"], acme["mcpserver"]),
    ):
        response = client.post(
            url("agenttoken", "add"),
            {"agent": agent.pk, "name": "stolen", "servers": [server.pk], "expires_at_0": "", "expires_at_1": ""},
        )
        assert response.status_code == 200, (agent, server)
        assert "mcp-new-token" not in response.content.decode()
    assert AgentToken.objects.count() == before
    response = client.post(
        url("agenttoken", "add"),
        {
            "agent": globex["agent"].pk,
            "name": "mine",
            "servers": [globex["mcpserver"].pk],
            "expires_at_0": "",
            "expires_at_1": "",
        },
        follow=True,
    )
    assert "mcp-new-token" in response.content.decode()
    assert AgentToken.objects.count() == before + 1


def test_a_globex_owner_cannot_add_anyone_to_acme(acme, globex, login):
    client = login(globex.users["owner"])
    for username in ("globex-owner", "globex-viewer"):
        response = client.post(
            url("tenantmembership", "add"), {"tenant": acme.tenant.pk, "user": username, "role": "owner"}
        )
        assert response.status_code == 200
        assert "Select a valid choice" in response.content.decode()
    assert not TenantMembership.objects.filter(tenant=acme.tenant, user__username__startswith="globex").exists()
    # In their own tenant they manage memberships.
    response = client.post(
        url("tenantmembership", "add"), {"tenant": globex.tenant.pk, "user": "acme-viewer", "role": "viewer"}
    )
    assert response.status_code == 302
    assert TenantMembership.objects.filter(tenant=globex.tenant, user__username="acme-viewer").exists()


def test_owners_edit_the_tenant_but_not_the_operator_fields(globex, login):
    client = login(globex.users["owner"])
    response = client.post(
        url("tenant", "change", globex.tenant.pk),
        {
            "name": "Globex Corp",
            "slug": "stolen-slug",
            "is_active": "",
            "allowed_python_tools": '["*", "boom"]',
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    tenant = Tenant.objects.get(pk=globex.tenant.pk)
    assert (tenant.name, tenant.slug, tenant.is_active, tenant.allowed_python_tools) == (
        "Globex Corp",
        "globex",
        True,
        ["*"],
    )
