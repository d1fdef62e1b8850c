"""The deployment's users and groups in the same theme as mcp_app's pages (unfold's forms for them)."""

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin as BaseGroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group, User
from unfold.admin import ModelAdmin
from unfold.forms import AdminPasswordChangeForm, UserChangeForm, UserCreationForm

admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class UserAdmin(BaseUserAdmin, ModelAdmin):
    form = UserChangeForm
    add_form = UserCreationForm
    change_password_form = AdminPasswordChangeForm

    class Media:
        css = {"all": ("mcp_app/admin/admin.css",)}  # the permission pickers fit the window


@admin.register(Group)
class GroupAdmin(BaseGroupAdmin, ModelAdmin):
    class Media:
        css = {"all": ("mcp_app/admin/admin.css",)}
