"""URLs of the authorization server and the per-server resource metadata, in DOT's namespace
(``oauth2_provider``, which its views reverse their siblings by). Include at the site root:
``path("", include("mcp_app.oauth.urls"))``. The endpoints: docs/oauth.md.
"""

from django.urls import path
from oauth2_provider import views as dot

from . import views
from .cors import public

app_name = "oauth2_provider"

urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        public(dot.OAuthServerMetadataView.as_view(), "GET"),
        name="oauth-server-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource/mcp/<slug:server_id>",
        public(views.ResourceMetadataView.as_view(), "GET"),
        name="oauth-resource-metadata",
    ),
    path("oauth/authorize/", views.AuthorizeView.as_view(), name="authorize"),
    path("oauth/token/", public(views.TokenView.as_view(), "POST"), name="token"),
    path("oauth/revoke/", public(dot.RevokeTokenView.as_view(), "POST"), name="revoke-token"),
    path("oauth/register/", public(views.RegistrationView.as_view(), "POST"), name="dcr-register"),
    path(
        "oauth/register/<str:client_id>/",
        dot.DynamicClientRegistrationManagementView.as_view(),
        name="dcr-register-management",
    ),
    path("oauth/login/", views.LoginView.as_view(), name="login"),
    path("oauth/logout/", views.LogoutView.as_view(), name="logout"),
    path("oauth/consents/", views.consent_list, name="consents"),
    path("oauth/consents/<int:pk>/withdraw/", views.withdraw_consent, name="consent-withdraw"),
]
