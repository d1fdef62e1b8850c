"""The API's viewsets: one per resource, each a thin front door onto the models and their managers.

Every queryset is scoped to the user's tenants before any lookup (another tenant's object is a 404); writes need
a writing role in the object's tenant (``TenantRolePermission``); actions are the domain verbs (docs/api.md,
"Endpoints").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models, transaction
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema_view
from rest_framework import generics, mixins, pagination, permissions, routers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.parsers import JSONParser
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from .. import permissions as tenant_permissions
from ..models import (
    Agent,
    AgentToken,
    ApiKey,
    McpServer,
    McpSession,
    OAuthAgent,
    OAuthConsent,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    TenantMembership,
    Tool,
    ToolCall,
    Upstream,
    UpstreamBinding,
    UsageDay,
)
from . import filters, usage
from .authentication import ApiKeyAuthentication, SessionAuthentication
from .exceptions import exception_handler
from .permissions import TenantRolePermission
from .schema import ApiAutoSchema, document
from .serializers import agents, apikeys, audit, catalog, oauth, servers, tenants, upstreams
from .throttling import ApiKeyRateThrottle, UserRateThrottle

# Primary keys in URLs: digits only, and few enough to fit a 64-bit integer on every database.
PK_PATTERN = "[0-9]{1,18}"


class ApiPagination(pagination.PageNumberPagination):
    """``?page=N`` (from 1) and ``?page_size=M`` (default 50, at most 500)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


if TYPE_CHECKING:
    # For the type checker the mixin is the view it is mixed into, so that its settings override the view's
    # declarations (of the same types) instead of clashing with them; at run time it is a plain mixin.
    _ViewBase = generics.GenericAPIView[Any]
else:
    _ViewBase = object


class ApiViewMixin(_ViewBase):
    """What every API view sets for itself, independent of the project's ``REST_FRAMEWORK`` settings."""

    authentication_classes = (ApiKeyAuthentication, SessionAuthentication)
    permission_classes: tuple[type[permissions.BasePermission], ...] = (TenantRolePermission,)
    parser_classes = (JSONParser,)
    # JSON for programs (the first, so `Accept: */*` gets it); HTML pages for a browser (`Accept: text/html`).
    renderer_classes: tuple[type[BaseRenderer], ...] = (JSONRenderer, BrowsableAPIRenderer)
    throttle_classes = (ApiKeyRateThrottle, UserRateThrottle)
    pagination_class = ApiPagination
    filter_backends = (DjangoFilterBackend, OrderingFilter)
    schema = ApiAutoSchema()
    lookup_value_regex = PK_PATTERN
    ordering_fields: tuple[str, ...] = ("id",)

    def get_exception_handler(self) -> Any:
        return exception_handler


class TenantScopedMixin(ApiViewMixin):
    # Views over one model, scoped to the user's tenants; in id order unless the model orders itself. (No
    # docstring here or below: a view's first docstring up its classes describes it in the OpenAPI schema.)

    queryset: models.QuerySet[Any]
    select_related: tuple[str, ...] = ()
    prefetch_related: tuple[str, ...] = ()

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = tenant_permissions.scope_queryset(self.request.user, self.queryset.all())
        if self.select_related:  # select_related() without fields would follow every foreign key
            queryset = queryset.select_related(*self.select_related)
        queryset = queryset.prefetch_related(*self.prefetch_related)
        return queryset if queryset.ordered else queryset.order_by("pk")


class TenantScopedViewSet(TenantScopedMixin, viewsets.ModelViewSet):
    """CRUD over one model, scoped to the user's tenants."""

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        with transaction.atomic():
            serializer.save()

    perform_update = perform_create


class TenantScopedReadOnlyViewSet(TenantScopedMixin, viewsets.ReadOnlyModelViewSet):
    pass  # lists and details; what changes does so through actions


class CreatedOnceMixin(_ViewBase):
    """Create answers with ``created_serializer``: what only that response shows (a raw secret, a first sync).
    The serializer's ``save`` runs as it is (an upstream's first sync reads the network outside a transaction)."""

    created_serializer: type[BaseSerializer[Any]]
    created_headers: dict[str, str] = {"Cache-Control": "no-store"}

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        created = serializer.save()
        body = self.created_serializer(created, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED, headers=self.created_headers)


@extend_schema_view(
    list=document(summary="Tenants you are a member of (all, for superusers)"),
    retrieve=document(summary="One of your tenants"),
)
class TenantViewSet(TenantScopedReadOnlyViewSet):
    queryset = Tenant.objects.all()
    serializer_class = tenants.TenantSerializer
    filterset_class = filters.TenantFilter
    ordering_fields = ("id", "slug", "name", "created_at")


class TenantMembershipViewSet(TenantScopedViewSet):
    """Who is a member of your tenants, with which role. Only owners add, change or remove members."""

    queryset = TenantMembership.objects.all()
    serializer_class = tenants.TenantMembershipSerializer
    filterset_class = filters.TenantMembershipFilter
    select_related = ("user", "tenant")
    ordering_fields = ("id", "role", "created_at")

    def perform_destroy(self, instance: TenantMembership) -> None:
        with transaction.atomic():
            if instance.role == TenantMembership.Role.OWNER:
                tenants.ensure_another_owner(instance)
            instance.delete()


class McpServerViewSet(TenantScopedViewSet):
    queryset = McpServer.objects.all()
    serializer_class = servers.McpServerSerializer
    filterset_class = filters.McpServerFilter
    select_related = ("published_version",)
    ordering_fields = ("id", "server_id", "name", "created_at", "updated_at")


class ToolViewSet(TenantScopedViewSet):
    queryset = Tool.objects.all()
    serializer_class = catalog.ToolSerializer
    filterset_class = filters.ToolFilter
    ordering_fields = ("id", "name", "kind", "created_at", "updated_at")


class ResourceViewSet(TenantScopedViewSet):
    queryset = Resource.objects.all()
    serializer_class = catalog.ResourceSerializer
    filterset_class = filters.ResourceFilter
    ordering_fields = ("id", "uri", "name", "created_at", "updated_at")


class PromptViewSet(TenantScopedViewSet):
    queryset = Prompt.objects.all()
    serializer_class = catalog.PromptSerializer
    filterset_class = filters.PromptFilter
    ordering_fields = ("id", "name", "created_at", "updated_at")


@extend_schema_view(
    create=document(
        summary="Register an upstream: saved only if its first sync succeeds (else 400, nothing saved)",
        responses={201: upstreams.UpstreamCreatedSerializer},
    ),
)
class UpstreamViewSet(CreatedOnceMixin, TenantScopedViewSet):
    """Upstream MCP servers whose tools, resources and prompts join the tenant's catalog under a prefix.

    Creating one runs its first sync in the request: an upstream that cannot be read is a 400 (``non_field_errors``
    says why) and nothing is saved. ``sync/`` answers 200 with the report also when the upstream failed (``ok``
    false, ``error``: the request worked, the upstream did not; its entries stay as they were). ``test/`` connects
    and lists without writing. ``bind/`` and ``unbind/`` expose the whole upstream on one of the tenant's servers,
    or stop. Deleting an upstream deletes its entries. Edits do not sync by themselves: call ``sync/`` after them.
    """

    queryset = Upstream.objects.all()
    serializer_class = upstreams.UpstreamSerializer
    created_serializer = upstreams.UpstreamCreatedSerializer
    created_headers: dict[str, str] = {}
    filterset_class = filters.UpstreamFilter
    prefetch_related = ("bindings",)
    ordering_fields = ("id", "name", "created_at", "updated_at", "last_synced_at")
    action_permissions = {"sync": "change", "test": "change", "bind": "change", "unbind": "change"}

    def get_queryset(self) -> models.QuerySet[Upstream]:
        return super().get_queryset().with_entry_counts()  # type: ignore[attr-defined]

    @document(request=None, responses={200: upstreams.SyncReportSerializer}, summary="Sync the catalog now")
    @action(detail=True, methods=["post"])
    def sync(self, request: Request, pk: str | None = None) -> Response:
        from ..federation.sync import sync_upstream

        return Response(sync_upstream(self.get_object()).as_dict())

    @document(
        request=None,
        responses={200: upstreams.UpstreamTestSerializer},
        summary="Connect and list what the upstream offers, writing nothing",
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        from ..operations import probe_upstream

        return Response(probe_upstream(self.get_object()))

    @document(
        request=upstreams.UpstreamServerSerializer,
        responses={200: upstreams.UpstreamBoundSerializer},
        summary="Expose the whole upstream on one of the tenant's servers (also entries later syncs add)",
    )
    @action(detail=True, methods=["post"])
    def bind(self, request: Request, pk: str | None = None) -> Response:
        from ..federation.sync import bind

        upstream = self.get_object()
        server = self._server(request, upstream)
        skipped = bind(upstream, server)
        return Response(self._bound(upstream, server, skipped))

    @document(
        request=upstreams.UpstreamServerSerializer,
        responses={200: upstreams.UpstreamBoundSerializer},
        summary="Stop exposing the upstream on the server (its entry bindings there go too)",
    )
    @action(detail=True, methods=["post"])
    def unbind(self, request: Request, pk: str | None = None) -> Response:
        from ..federation.sync import unbind

        upstream = self.get_object()
        server = self._server(request, upstream)
        unbind(upstream, server)
        return Response(self._bound(upstream, server, []))

    def _server(self, request: Request, upstream: Upstream) -> McpServer:
        body = upstreams.UpstreamServerSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        server: McpServer = body.validated_data["server"]
        try:
            UpstreamBinding(upstream=upstream, server=server).clean()  # the model's rule: the same tenant
        except DjangoValidationError as exc:
            raise ValidationError({"server": exc.messages}) from exc
        return server

    def _bound(self, upstream: Upstream, server: McpServer, skipped: list[str]) -> dict[str, Any]:
        bound = sorted(upstream.bindings.values_list("server_id", flat=True))
        return {"server": server.pk, "servers": bound, "skipped": skipped}


class ServerToolViewSet(TenantScopedViewSet):
    """Which tools a server exposes, in which order and under which name."""

    queryset = ServerTool.objects.all()
    serializer_class = catalog.ServerToolSerializer
    filterset_class = filters.ServerToolFilter
    select_related = ("tool",)
    ordering_fields = ("id", "position")


class ServerResourceViewSet(TenantScopedViewSet):
    queryset = ServerResource.objects.all()
    serializer_class = catalog.ServerResourceSerializer
    filterset_class = filters.ServerResourceFilter
    ordering_fields = ("id", "position")


class ServerPromptViewSet(TenantScopedViewSet):
    queryset = ServerPrompt.objects.all()
    serializer_class = catalog.ServerPromptSerializer
    filterset_class = filters.ServerPromptFilter
    ordering_fields = ("id", "position")


class AgentViewSet(TenantScopedViewSet):
    queryset = Agent.objects.all()
    serializer_class = agents.AgentSerializer
    filterset_class = filters.AgentFilter
    ordering_fields = ("id", "agent_id", "name", "created_at")


@extend_schema_view(
    create=document(
        summary="Issue a token; the raw value is in this response only",
        responses={201: agents.AgentTokenCreatedSerializer},
    ),
)
class AgentTokenViewSet(CreatedOnceMixin, TenantScopedViewSet):
    """Agents' bearer tokens. The raw token is returned once, by create; only its digest is stored."""

    queryset = AgentToken.objects.all()
    serializer_class = agents.AgentTokenSerializer
    created_serializer = agents.AgentTokenCreatedSerializer
    filterset_class = filters.AgentTokenFilter
    select_related = ("agent",)
    prefetch_related = ("servers",)
    ordering_fields = ("id", "created_at", "expires_at", "last_used_at")
    action_permissions = {"revoke": "change"}

    @document(request=None, responses={200: agents.AgentTokenSerializer}, summary="Revoke the token")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        token.revoke()
        return Response(self.get_serializer(token).data)


@extend_schema_view(list=document(summary="Handshake-era MCP sessions of your servers"))
class McpSessionViewSet(TenantScopedReadOnlyViewSet):
    """Sessions are opened by MCP clients; here they are read and terminated (never created or edited)."""

    queryset = McpSession.objects.all()
    serializer_class = servers.McpSessionSerializer
    filterset_class = filters.McpSessionFilter
    ordering_fields = ("id", "created_at", "last_seen_at")
    select_related = ("server",)
    action_permissions = {"terminate": "change"}

    @document(request=None, responses={200: servers.McpSessionSerializer}, summary="Terminate the session")
    @action(detail=True, methods=["post"])
    def terminate(self, request: Request, pk: str | None = None) -> Response:
        session = self.get_object()
        session.terminate()
        session.refresh_from_db()
        return Response(self.get_serializer(session).data)


# The audit log is read-only for everyone, superusers included (the admin's rule, registered here as well so that
# the API does not depend on the admin being installed; registering twice is idempotent).
tenant_permissions.register_tenant_path(
    ToolCall,
    "tenant",
    roles={"view": tenant_permissions.VIEWER, "add": None, "change": None, "delete": None},
)


@extend_schema_view(list=document(summary="Audited tool calls of your tenants, newest first"))
class ToolCallViewSet(TenantScopedReadOnlyViewSet):
    """The audit log: one record per ``tools/call``, written by the audit buffer, never by the API."""

    queryset = ToolCall.objects.all()
    serializer_class = audit.ToolCallSerializer
    filterset_class = filters.ToolCallFilter
    ordering_fields = ("id", "started_at", "duration_ms")


@extend_schema_view(
    list=document(
        summary="Usage of your tenants per agent, server, tool and day (JSON pages, or CSV: ?format=csv)",
        responses={(200, "application/json"): usage.UsageSerializer(many=True), (200, "text/csv"): str},
    )
)
class UsageViewSet(TenantScopedMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The usage ledger (docs/budgets.md): one row per tenant, agent, server, tool and day, written by the
    ledger's flusher, never by the API. CSV (``?format=csv`` or ``Accept: text/csv``) holds every matching row."""

    queryset = UsageDay.objects.all()
    serializer_class = usage.UsageSerializer
    filterset_class = usage.UsageFilter
    renderer_classes = (JSONRenderer, BrowsableAPIRenderer, usage.CsvRenderer)
    ordering_fields = ("day", "calls", "tool_seconds", "cost")

    def get_queryset(self) -> models.QuerySet[Any]:
        return (
            super()
            .get_queryset()
            .select_related("tenant")
            .order_by("-day", "agent_key", "server_key", "tool_name", "pk")
        )

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if usage.wants_csv(request):
            return usage.csv_response(self.filter_queryset(self.get_queryset()))
        return super().list(request, *args, **kwargs)


class OwnKeysPermission(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)


@extend_schema_view(
    create=document(
        summary="Issue a personal API key; the raw value is in this response only",
        responses={201: apikeys.ApiKeyCreatedSerializer},
    ),
)
class ApiKeyViewSet(
    CreatedOnceMixin,
    ApiViewMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your own personal API keys (everyone sees only their own, superusers too)."""

    queryset = ApiKey.objects.all()
    serializer_class = apikeys.ApiKeySerializer
    created_serializer = apikeys.ApiKeyCreatedSerializer
    permission_classes = (OwnKeysPermission,)
    filterset_fields = ("prefix",)
    ordering_fields = ("id", "created_at", "last_used_at")

    def get_queryset(self) -> models.QuerySet[ApiKey]:
        user = self.request.user
        if not user.is_authenticated:
            return self.queryset.none()
        return self.queryset.filter(user=user)

    @document(request=None, responses={200: apikeys.ApiKeySerializer}, summary="Revoke the key")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        key = self.get_object()
        key.revoke()
        return Response(self.get_serializer(key).data)


class ApiRootView(ApiViewMixin, routers.APIRootView):
    """``GET /api/v1/``: a link to every resource list, for any signed-in user (what each list holds is scoped).
    Not an operation of the OpenAPI schema (``schema = None``): it is navigation, not a resource."""

    permission_classes = (permissions.IsAuthenticated,)
    schema = None  # type: ignore[assignment]


@extend_schema_view(list=document(summary="OAuth consents given for your servers"))
class OAuthConsentViewSet(TenantScopedReadOnlyViewSet):
    """Consents are given on the consent page (docs/oauth.md); here they are read and withdrawn."""

    queryset = OAuthConsent.objects.all()
    serializer_class = oauth.OAuthConsentSerializer
    ordering_fields = ("id", "created_at", "updated_at")
    ordering = ("pk",)  # not the model's (newest first): the order of the other lists
    select_related = ("server", "user", "application")
    prefetch_related = ("granted_tools", "granted_resources", "granted_prompts")
    action_permissions = {"withdraw": "change"}

    @document(request=None, responses={204: None}, summary="Withdraw the consent: its tokens stop working")
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        self.get_object().withdraw()
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(list=document(summary="OAuth agents of your tenants (one per person and client)"))
class OAuthAgentViewSet(TenantScopedReadOnlyViewSet):
    queryset = OAuthAgent.objects.all()
    serializer_class = oauth.OAuthAgentSerializer
    select_related = ("user", "application")
    ordering_fields = ("id", "created_at")
