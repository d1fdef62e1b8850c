"""What makes OAuth tokens stop working everywhere: a DOT access token deleted (revocation, refresh rotation,
expiry clean-up, client deletion) revokes its mirror; a deactivated user's mirrors are revoked. Consent
withdrawal revokes through ``OAuthConsent.withdraw``; deleting a client or a consent deletes the mirrors by
cascade (whose deletion publishes, ``mcp_app.caching.signals``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from oauth2_provider.models import get_access_token_model

from ..models import OAuthConsent
from ..models.oauth import revoke_mirror


def _access_token_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.token_checksum:
        revoke_mirror(instance.token_checksum)


def _user_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        OAuthConsent.objects.revoke_for(user=instance)


post_delete.connect(_access_token_deleted, sender=get_access_token_model(), dispatch_uid="mcp-oauth-access-token")
post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="mcp-oauth-user-deactivated")
