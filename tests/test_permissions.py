"""``mcp_app.permissions``: roles per tenant (enough by themselves), every tenant-owned model scoped."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from mcp_app import permissions
from mcp_app.models import Tenant, TenantMembership
from mcp_app.permissions import (
    can_add,
    can_change,
    can_delete,
    can_manage_memberships,
    can_view,
    default_tenant,
    scope_queryset,
)

#: Models that belong to a user, not to a tenant: scoped by their user wherever they are shown.
PERSONAL_MODELS = {"mcp_app.apikey"}  # personal API keys (mcp_app.admin.apikeys, mcp_app.api.views.ApiKeyViewSet)


#: Models that belong to no tenant: the cross-process cache-invalidation log (infrastructure, never shown), and
#: what OAuth clients (site-wide, mcp_app.oauth) state about themselves, shown only on the consent page.
NOT_TENANT_OWNED = {"mcp_app.cacheinvalidation", "mcp_app.oauthclientprofile"}


def test_every_model_of_the_app_has_a_tenant_path():
    labels = {model._meta.label_lower for model in apps.get_app_config("mcp_app").get_models()}
    assert labels - set(permissions.TENANT_PATHS) == PERSONAL_MODELS | NOT_TENANT_OWNED


def test_an_unmapped_model_is_refused_not_shown_unscoped(member_factory):
    user = member_factory()
    with pytest.raises(LookupError):
        scope_queryset(user, get_user_model().objects.all())


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_a_member_sees_exactly_their_tenants_objects_of_every_model(acme, globex, member_factory, role):
    user = member_factory((globex.tenant, role))
    for label, obj in globex.objects.items():
        model = apps.get_model(label)
        visible = set(scope_queryset(user, model.objects.all()).values_list("pk", flat=True))
        if label == "mcp_app.tenantmembership":
            assert visible == set(TenantMembership.objects.filter(tenant=globex.tenant).values_list("pk", flat=True))
        else:
            assert visible == {obj.pk}, label
        assert acme.objects[label].pk not in visible
        assert can_view(user, obj)
        assert not can_view(user, acme.objects[label]), label


def test_scope_by_minimum_role(acme, globex, member_factory):
    user = member_factory((acme.tenant, "viewer"), (globex.tenant, "admin"))
    tools = apps.get_model("mcp_app.tool").objects.all()
    assert set(scope_queryset(user, tools)) == {acme.objects["mcp_app.tool"], globex.objects["mcp_app.tool"]}
    assert set(scope_queryset(user, tools, permissions.ADMIN)) == {globex.objects["mcp_app.tool"]}
    assert set(scope_queryset(user, tools, permissions.OWNER)) == set()
    access = permissions.access_for(user)
    assert access.tenant_ids() == {acme.tenant.pk, globex.tenant.pk}
    assert access.tenant_ids(permissions.ADMIN) == {globex.tenant.pk}
    assert access.tenant_ids(permissions.OWNER) == frozenset()


CATALOG_LABELS = [
    "mcp_app.mcpserver",
    "mcp_app.agent",
    "mcp_app.agenttoken",
    "mcp_app.tool",
    "mcp_app.servertool",
    "mcp_app.resource",
    "mcp_app.serverresource",
    "mcp_app.prompt",
    "mcp_app.serverprompt",
    "mcp_app.mcpsession",
    "mcp_app.tooltask",
]


@pytest.mark.parametrize("label", CATALOG_LABELS)
def test_owners_and_admins_edit_their_tenant_viewers_read_nobody_crosses(acme, globex, member_factory, label):
    owner, admin, viewer = (member_factory((globex.tenant, role)) for role in ("owner", "admin", "viewer"))
    mine, theirs = globex.objects[label], acme.objects[label]
    for user in (owner, admin):
        assert can_change(user, mine) and can_delete(user, mine) and can_add(user, mine)
        assert not can_change(user, theirs) and not can_delete(user, theirs) and not can_add(user, theirs)
        assert can_add(user, globex.tenant, type(mine)) and not can_add(user, acme.tenant, type(mine))
    assert can_view(viewer, mine)
    assert not can_change(viewer, mine) and not can_delete(viewer, mine) and not can_add(viewer, mine)
    assert not can_add(viewer, globex.tenant, type(mine))


def test_the_role_alone_grants_the_model_permissions_it_allows(globex, member_factory):
    viewer = get_user_model().objects.create_user("plain-viewer")
    assert not viewer.is_staff
    TenantMembership.objects.create(tenant=globex.tenant, user=viewer, role="viewer")
    viewer = get_user_model().objects.get(pk=viewer.pk)  # fresh: no cached roles or permissions
    assert viewer.is_staff and not viewer.groups.exists() and not viewer.user_permissions.exists()
    tool = globex.objects["mcp_app.tool"]
    assert permissions.has_model_permission(viewer, "view", type(tool))
    assert not permissions.has_model_permission(viewer, "change", type(tool))
    assert can_view(viewer, tool) and not can_change(viewer, tool)
    admin = member_factory((globex.tenant, "admin"))
    assert permissions.has_model_permission(admin, "change", type(tool)) and can_change(admin, tool)
    assert not permissions.has_model_permission(admin, "add", TenantMembership)  # owners only
    assert not permissions.has_model_permission(admin, "add", Tenant)  # superusers only


def test_django_permissions_without_a_role_open_no_tenant(globex, django_user_model):
    staff = django_user_model.objects.create_user("group-only", is_staff=True)
    staff.groups.add(permissions.ensure_staff_group())
    staff = django_user_model.objects.get(pk=staff.pk)
    tool = globex.objects["mcp_app.tool"]
    assert permissions.has_model_permission(staff, "change", type(tool))
    assert not can_view(staff, tool) and not scope_queryset(staff, type(tool).objects.all()).exists()


def test_existing_staff_status_is_kept_and_other_users_are_untouched(globex, django_user_model):
    bystander = django_user_model.objects.create_user("bystander")
    member = django_user_model.objects.create_user("member")
    membership = TenantMembership.objects.create(tenant=globex.tenant, user=member)
    membership.delete()
    assert django_user_model.objects.get(pk=member.pk).is_staff
    assert not django_user_model.objects.get(pk=bystander.pk).is_staff


def test_only_owners_manage_memberships(acme, globex, member_factory):
    owner, admin = member_factory((globex.tenant, "owner")), member_factory((globex.tenant, "admin"))
    assert can_manage_memberships(owner, globex.tenant) and can_manage_memberships(owner, globex.tenant.pk)
    assert not can_manage_memberships(admin, globex.tenant)
    assert not can_manage_memberships(owner, acme.tenant)
    membership = TenantMembership(tenant=globex.tenant, user=admin, role="owner")
    assert can_add(owner, membership) and not can_add(admin, membership)
    membership_elsewhere = TenantMembership(tenant=acme.tenant, user=admin, role="owner")
    assert not can_add(admin, membership_elsewhere) and not can_add(owner, membership_elsewhere)
    admin_membership = admin.mcp_memberships.get()
    assert can_view(admin, admin_membership) and not can_change(admin, admin_membership)
    assert not can_delete(admin, admin_membership)


def test_the_tenant_itself(acme, globex, member_factory):
    owner, admin = member_factory((globex.tenant, "owner")), member_factory((globex.tenant, "admin"))
    assert can_change(owner, globex.tenant) and not can_change(admin, globex.tenant)
    assert not can_change(owner, acme.tenant)
    assert not can_delete(owner, globex.tenant)
    assert not can_add(owner, Tenant(slug="new", name="New"))


def test_superusers_see_and_do_everything(acme, globex, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="pw")
    for world in (acme, globex):
        for label, obj in world.objects.items():
            assert can_view(root, obj) and can_change(root, obj) and can_delete(root, obj), label
            assert obj in scope_queryset(root, apps.get_model(label).objects.all())
    assert can_add(root, Tenant(slug="new", name="New"))
    assert default_tenant(root) is None


def test_anonymous_and_inactive_users_get_nothing(globex, member_factory):
    inactive = member_factory((globex.tenant, "owner"), is_active=False)
    tool = globex.objects["mcp_app.tool"]
    for user in (AnonymousUser(), inactive):
        assert not scope_queryset(user, type(tool).objects.all()).exists()
        assert not can_view(user, tool) and not can_change(user, tool)


def test_default_tenant_is_the_only_editable_one(acme, globex, member_factory):
    assert default_tenant(member_factory((globex.tenant, "admin"))) == globex.tenant
    assert default_tenant(member_factory((globex.tenant, "admin"), (acme.tenant, "viewer"))) == globex.tenant
    assert default_tenant(member_factory((globex.tenant, "owner"), (acme.tenant, "admin"))) is None
    assert default_tenant(member_factory((globex.tenant, "viewer"))) is None
    assert default_tenant(member_factory()) is None


@pytest.fixture
def acme(world_factory):
    return world_factory("acme")


@pytest.fixture
def globex(world_factory):
    return world_factory("globex")


def test_roles_are_read_once_per_user_object(acme, globex, member_factory, django_assert_num_queries):
    user = get_user_model().objects.get(pk=member_factory((globex.tenant, "admin")).pk)
    user.get_all_permissions()  # Django's own permission cache, filled once per user object as well
    objs = list(globex.objects.values()) + list(acme.objects.values())
    with django_assert_num_queries(1):
        for obj in objs:
            can_view(user, obj)
            can_change(user, obj)
        permissions.access_for(user).tenant_ids()
    permissions.forget(user)
    with django_assert_num_queries(1):
        can_view(user, globex.tenant)


def test_register_tenant_path_for_models_of_other_modules():
    user_model = get_user_model()
    try:
        permissions.register_tenant_path(user_model, "mcp_memberships__tenant", {"add": None})
        assert permissions.tenant_path(user_model) == "mcp_memberships__tenant"
        assert permissions.required_role(user_model, "add") is None
        assert permissions.required_role(user_model, "change") == permissions.ADMIN
        with pytest.raises(ValueError):
            permissions.register_tenant_path(user_model, "x", {"approve": "owner"})
    finally:
        permissions.TENANT_PATHS.pop(user_model._meta.label_lower, None)
        permissions.ROLES.pop(user_model._meta.label_lower, None)


def test_the_migration_makes_existing_members_staff(globex, django_user_model):
    """Members made before a membership made its user staff (0018_roles_admin) open the admin after migrating."""
    import importlib

    earlier = django_user_model.objects.create_user("earlier-member")
    bystander = django_user_model.objects.create_user("earlier-bystander")
    TenantMembership.objects.bulk_create([TenantMembership(tenant=globex.tenant, user=earlier)])  # no save()
    assert not django_user_model.objects.get(pk=earlier.pk).is_staff
    migration = importlib.import_module("mcp_app.migrations.0018_roles_admin")
    migration.members_are_staff(apps, None)
    assert django_user_model.objects.get(pk=earlier.pk).is_staff
    assert not django_user_model.objects.get(pk=bystander.pk).is_staff
