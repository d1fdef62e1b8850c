"""The authorization server's and the protected resources' HTTP views: DOT's, subclassed where mcp-host adds
something (per-server resource metadata, sign-in, the authorization endpoint with its consent and refusal pages,
the token endpoint in one transaction, rate-limited open registration, the person's consents). What each page
does: docs/oauth.md.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db import router, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_POST
from django.views.generic import ListView
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.models import get_application_model, get_grant_model
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView, DynamicClientRegistrationView
from oauth2_provider.views import TokenView as DotTokenView
from oauth2_provider.views.metadata import OAuthProtectedResourceMetadataView
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error

from ..conf import mcp_settings
from ..limits import rates
from ..models import McpServer, OAuthClientProfile, OAuthConsent
from ..models.oauth import may_consent
from ..protocol.errors import RateLimited
from .forms import ConsentForm, SignInForm
from .provider import SCOPE
from .resources import origin_of, resource_url
from .validator import LOOPBACK_HOSTS, target_server


def _person(request: HttpRequest) -> Any:
    """The signed-in user (the views that call this require one)."""
    return request.user


class ResourceMetadataView(OAuthProtectedResourceMetadataView):
    server: McpServer

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        server = McpServer.objects.servable().filter(server_id=kwargs["server_id"], oauth_enabled=True).first()
        if server is None:
            return JsonResponse({"error": "not_found"}, status=404)
        self.server = server
        return super().get(request, *args, **kwargs)

    def get_resource(self, request: HttpRequest) -> str:
        return resource_url(origin_of(request), self.server.server_id)

    def get_authorization_servers(self, request: HttpRequest) -> list[str]:
        return [origin_of(request)]

    def get_scopes_supported(self) -> list[str]:
        return [SCOPE]

    def get_resource_name(self) -> str:
        return self.server.title or self.server.name


class LoginView(auth_views.LoginView):
    """A plain username + password form (Django's ``authenticate()``), in the admin's login page. Without a
    ``next`` the person lands on their consents (never ``LOGIN_REDIRECT_URL``'s default, a 404 here)."""

    template_name = "mcp_app/oauth/login.html"
    form_class = SignInForm
    redirect_authenticated_user = True
    next_page = "oauth2_provider:consents"  # a URL name: resolve_url reverses it

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(admin.site.each_context(self.request))
        context.update({"title": "Sign in to authorize an application", "app_path": self.request.get_full_path()})
        return context


class LogoutView(auth_views.LogoutView):
    """Sign out (POST) and go to ``next`` if it is on this site, else the sign-in page: "switch account" posts
    the authorization request's URL as ``next``, which then asks the next person to sign in."""

    next_page = "oauth2_provider:login"


def with_issuer(uri: str, issuer: str) -> str:
    """``uri`` with ``iss=<issuer>`` as its only ``iss`` query parameter (RFC 9207)."""
    parts = urlsplit(uri)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if [value for key, value in pairs if key == "iss"] == [issuer]:
        return uri  # DOT named it already (successful responses): leave the URI as DOT wrote it
    query = [(key, value) for key, value in pairs if key != "iss"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("iss", issuer)])))


def redirect_destination(uri: str, stated_uri: str = "") -> dict[str, Any]:
    """What the consent page says about where the answer goes: the redirect URI's host (or scheme, for a
    native app's private-use scheme), whether it stays on the person's own device (loopback or native), and the
    host the client states (``client_uri``) when the answer goes elsewhere on the web."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return {"where": f"{parts.scheme}:", "on_device": True, "stated": ""}
    host = parts.hostname or ""
    stated = urlsplit(stated_uri).hostname or ""
    elsewhere = bool(stated) and host != stated and not host.endswith(f".{stated}")
    return {"where": parts.netloc, "on_device": host in LOOPBACK_HOSTS, "stated": stated if elsewhere else ""}


class AuthorizeView(AuthorizationView):
    template_name = "mcp_app/oauth/consent.html"
    form_class = ConsentForm
    login_url = reverse_lazy("oauth2_provider:login")
    server: McpServer | None = None

    def _error(self, application: Any, credentials: dict[str, Any], error: str, description: str) -> HttpResponse:
        """Back to the client's (validated) redirect URI with an OAuth error."""
        failure = OAuthToolkitError(
            error=CustomOAuth2Error(error=error, description=description, state=credentials.get("state")),
            redirect_uri=credentials.get("redirect_uri"),
        )
        return self.error_response(failure, application)

    def _invalid_target(self, application: Any, credentials: dict[str, Any]) -> HttpResponse:
        example = resource_url(origin_of(self.request), "<server-id>")
        return self._error(
            application,
            credentials,
            "invalid_target",
            f"resource must be the URL of exactly one MCP server of this site, e.g. {example}.",
        )

    def _refusal(self, application: Any) -> str | None:
        server = self.server
        assert server is not None
        if not may_consent(self.request.user, server):
            return (
                f"Your account is not a member of {server.tenant.name}, which owns the MCP server "
                f"{server.server_id}, or its role there does not allow it: you cannot authorize applications "
                "for it."
            )
        if application.registration_source == "dcr" and not server.tenant.oauth_dynamic_clients:
            return f"{server.tenant.name} accepts only pre-registered applications; this one registered itself."
        return None

    def _refuse(
        self, message: str, application: Any, credentials: dict[str, Any] | None = None, status: int = 403
    ) -> HttpResponse:
        """The refusal page: switch account, or (given validated ``credentials``) back with ``access_denied``."""
        back = self._error(application, credentials, "access_denied", message) if credentials else None
        denied_url = back["Location"] if back and back.status_code == 302 else ""
        context = {**admin.site.each_context(self.request), "title": "Authorization refused", "message": message}
        context.update(application=application, denied_url=denied_url)
        return render(self.request, "mcp_app/oauth/refused.html", context, status=status)

    def redirect(self, redirect_to: str, application: Any) -> HttpResponse:
        """Every redirect to the client names the issuer, errors too (DOT adds it to successful ones only)."""
        issuer = oauth2_settings.oauth2_authorization_server_issuer(self.request)
        return super().redirect(with_issuer(redirect_to, issuer), application)

    def form_invalid(self, form: ConsentForm) -> HttpResponse:
        """The page sent a valid form: this one was altered (or its server's catalog changed meanwhile)."""
        return self._refuse(
            "The authorization form was incomplete or altered. Start again from the application.", None, status=400
        )

    def render_to_response(self, context: dict[str, Any], **response_kwargs: Any) -> HttpResponse:
        # DOT renders a request it cannot answer to the client with the error alone: add the admin's context
        # (unfold's colours, site title) so that page is drawn in the theme too.
        return super().render_to_response({**admin.site.each_context(self.request), **context}, **response_kwargs)

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            return self.error_response(error, application=None)
        application = get_application_model().objects.get(client_id=credentials["client_id"])
        if credentials.get("code_challenge_method") != "S256":
            return self._error(application, credentials, "invalid_request", "PKCE with S256 is required.")
        resources = request.GET.getlist("resource")
        self.server = target_server(resources, origin_of(request))
        if self.server is None:
            return self._invalid_target(application, credentials)
        refusal = self._refusal(application)
        if refusal is not None:
            return self._refuse(refusal, application, credentials)
        mine = OAuthConsent.objects.filter(user=_person(request), application=application, server=self.server)
        remembered = mine.exists()
        if remembered and "consent" not in request.GET.get("prompt", "").split():
            credentials["resource"] = resources
            try:
                uri, _headers, _body, _status = self.create_authorization_response(
                    request=request, scopes=" ".join(scopes), credentials=credentials, allow=True
                )
            except OAuthToolkitError as error:
                return self.error_response(error, application)
            return self.redirect(uri, application)
        return super().get(request, *args, **kwargs)

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.server = target_server(request.POST.get("resource", "").split(), origin_of(request))
        return super().post(request, *args, **kwargs)

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs = super().get_form_kwargs()
        kwargs["server"] = self.server
        return kwargs

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)  # the admin's context: render_to_response
        application = context.get("application")
        form = context.get("form")
        redirect_uri = context.get("redirect_uri") or (form["redirect_uri"].value() if form else "") or ""
        profile = OAuthClientProfile.objects.filter(client_id=application.client_id).first() if application else None
        stated_uri = getattr(profile, "client_uri", "") or ""
        context.update(
            title=f"Authorize {application.name if application else 'an application'}",
            destination=redirect_destination(redirect_uri, stated_uri) if redirect_uri else None,
            server=self.server,
            client_url=application.client_id if application and "://" in application.client_id else "",
            profile=profile,
        )
        return context

    def form_valid(self, form: ConsentForm) -> HttpResponse:
        application = get_application_model().objects.get(client_id=form.cleaned_data["client_id"])
        if self.server is None:
            return self._invalid_target(application, form.cleaned_data)
        refusal = self._refusal(application)
        if refusal is not None:  # since the page was shown: answered like Cancel, with the reason
            return self._error(application, form.cleaned_data, "access_denied", refusal)
        s256 = form.cleaned_data.get("code_challenge") and form.cleaned_data.get("code_challenge_method") == "S256"
        if not s256:
            # No consent is remembered, and no code issued: without a challenge oauthlib refuses the request
            # (PKCE_REQUIRED) with invalid_request, to the redirect URI it has validated.
            form.cleaned_data["code_challenge"] = ""
        elif form.cleaned_data.get("allow"):
            OAuthConsent.objects.record(self.request.user, application, self.server, **form.grant_kwargs())
        return super().form_valid(form)


REGISTRATION = "registration"  # the rate-limit scope of dynamic registrations


class TokenView(DotTokenView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with transaction.atomic(using=router.db_for_write(get_grant_model())):
            return super().post(request, *args, **kwargs)


def registration_bucket(address: str) -> rates.Bucket | None:
    """The GCRA bucket registrations from ``address`` draw from (``OAUTH_REGISTRATIONS_PER_HOUR`` per hour,
    bursts of ``OAUTH_REGISTRATION_BURST``), or ``None`` when registration is off (a rate of 0)."""
    per_hour = mcp_settings.OAUTH_REGISTRATIONS_PER_HOUR
    if per_hour <= 0:
        return None
    return rates.Bucket(
        REGISTRATION, f"dcr:{address}", rates.Limit(per_hour / 3600, mcp_settings.OAUTH_REGISTRATION_BURST)
    )


class RegistrationView(DynamicClientRegistrationView):
    """DOT's RFC 7591 endpoint, rate-limited per source address: over the rate, 429 with ``Retry-After`` (before
    anything is parsed or stored). What the client says about itself (URL, logo) is kept for the consent page."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        bucket = registration_bucket(request.META.get("REMOTE_ADDR", ""))
        if bucket is not None:
            try:
                rates.take_sync([bucket])
            except RateLimited as limited:
                wait = limited.retry_after_seconds
                return JsonResponse(
                    {
                        "error": "rate_limited",
                        "error_description": f"Too many client registrations from this address; retry in {wait} s.",
                    },
                    status=429,
                    headers={"Retry-After": str(wait)},
                )
        response = super().post(request, *args, **kwargs)
        if response.status_code == 201:
            try:
                registered = json.loads(response.content)
                stated = json.loads(request.body)
            except ValueError:
                return response
            OAuthClientProfile.objects.remember(str(registered.get("client_id", "")), stated)
        return response


class OpenRegistration:
    """DCR permission (``DCR_REGISTRATION_PERMISSION_CLASSES``): anyone may register a client (at the rate
    ``RegistrationView`` enforces), unless ``OAUTH_REGISTRATIONS_PER_HOUR`` is 0. Whether a self-registered
    client may be authorized for a tenant's servers is that tenant's switch (``Tenant.oauth_dynamic_clients``)."""

    def has_permission(self, request: HttpRequest) -> bool:
        return bool(mcp_settings.OAUTH_REGISTRATIONS_PER_HOUR > 0)


class ConsentListView(ListView):  # type: ignore[type-arg]  # generic in django-stubs only
    template_name = "mcp_app/oauth/consents.html"

    def get_queryset(self) -> Any:
        return OAuthConsent.objects.filter(user=_person(self.request)).select_related(
            "application", "server", "server__tenant"
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(admin.site.each_context(self.request))
        context["title"] = "Applications you authorized"
        return context


consent_list = login_required(ConsentListView.as_view(), login_url=reverse_lazy("oauth2_provider:login"))


@login_required(login_url=reverse_lazy("oauth2_provider:login"))
@require_POST
def withdraw_consent(request: HttpRequest, pk: int) -> HttpResponse:
    consent = get_object_or_404(OAuthConsent, pk=pk, user=request.user)
    consent.withdraw()
    return HttpResponseRedirect(reverse("oauth2_provider:consents"))
