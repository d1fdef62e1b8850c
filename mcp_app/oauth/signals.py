"""What makes OAuth tokens stop working everywhere: a DOT access token deleted revokes its mirror; a deactivated
user's, a rotated client secret's and an ineligible person's tokens are revoked (docs/oauth.md, "What ends
access"). Consent withdrawal revokes through ``OAuthConsent.withdraw``; deleting a client or a consent deletes
the mirrors by cascade.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save, pre_save
from oauth2_provider.models import get_access_token_model, get_application_model

from ..models import McpServer, OAuthConsent, TenantMembership
from ..models.oauth import revoke_mirror


def _access_token_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.token_checksum:
        revoke_mirror(instance.token_checksum)


def _user_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        OAuthConsent.objects.revoke_for(user=instance)


def _membership_changed(sender: Any, instance: TenantMembership, created: bool = False, **kwargs: Any) -> None:
    if not created:  # a new membership only makes more people eligible
        OAuthConsent.objects.end_ineligible(user_id=instance.user_id, server__tenant_id=instance.tenant_id)


def _server_saved(
    sender: Any, instance: McpServer, created: bool = False, update_fields: Any = None, **kwargs: Any
) -> None:
    if update_fields is not None and "oauth_open_consent" not in update_fields:
        return
    if not created and not instance.oauth_open_consent:
        OAuthConsent.objects.end_ineligible(server=instance)


def _client_saving(sender: Any, instance: Any, **kwargs: Any) -> None:
    # Before DOT hashes a new secret: an unchanged one is still the stored (hashed) value.
    stored = sender.objects.filter(pk=instance.pk).values_list("client_secret", flat=True).first()
    instance._mcp_secret_rotated = stored is not None and stored != instance.client_secret


def _client_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    if not created and getattr(instance, "_mcp_secret_rotated", False):
        OAuthConsent.objects.revoke_for(application=instance)


post_delete.connect(_access_token_deleted, sender=get_access_token_model(), dispatch_uid="mcp-oauth-access-token")
post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="mcp-oauth-user-deactivated")
post_save.connect(_membership_changed, sender=TenantMembership, dispatch_uid="mcp-oauth-membership-saved")
post_delete.connect(_membership_changed, sender=TenantMembership, dispatch_uid="mcp-oauth-membership-deleted")
post_save.connect(_server_saved, sender=McpServer, dispatch_uid="mcp-oauth-server-saved")
pre_save.connect(_client_saving, sender=get_application_model(), dispatch_uid="mcp-oauth-client-secret")
post_save.connect(_client_saved, sender=get_application_model(), dispatch_uid="mcp-oauth-client-secret-rotated")
