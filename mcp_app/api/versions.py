"""The API's catalog versions (docs/api.md, docs/catalog-versions.md): ``catalog-versions/`` (read-only, newest
first; one with its entries), ``catalog-changes/`` (held upstream changes, read-only, each with its diff), and per
server ``servers/{id}/draft/``, ``diff/?from=&to=``, ``publish/`` and ``rollback/``.

Publishing and rolling back need the role that edits the server (``change``); publishing the draft is also what
approves the server's held changes. The server is looked up in the user's tenants first: another tenant's is a
404, exactly like a missing one. The verbs are ``catalog.versions``'s; this module only reads and answers.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ..catalog import comparison
from ..catalog.versions import draft_entries, entries_digest, publish, rollback
from ..models import CatalogChange, CatalogVersion, McpServer
from . import filters
from .schema import document
from .serializers import versions
from .views import TenantScopedMixin, TenantScopedReadOnlyViewSet


@extend_schema_view(
    list=document(summary="Catalog versions of your servers, newest first (filter by server)"),
    retrieve=document(
        summary="One catalog version, with its entries", responses=versions.CatalogVersionDetailSerializer
    ),
)
class CatalogVersionViewSet(TenantScopedReadOnlyViewSet):
    """Catalog versions: immutable snapshots of what a server exposes, ``published`` the one it serves. Made by
    publishing (``servers/{id}/publish/``), rolling back (``servers/{id}/rollback/``), an edit of a server that
    does not review its edits, or an upstream change its policy publishes; never edited or deleted here."""

    queryset = CatalogVersion.objects.all()
    serializer_class = versions.CatalogVersionSerializer
    filterset_class = filters.CatalogVersionFilter
    select_related = ("server", "created_by")
    ordering_fields = ("id", "number", "created_at")

    def get_queryset(self) -> Any:
        # Newest first across servers too (the model orders by server, then number).
        return super().get_queryset().order_by("-created_at", "-pk")

    def get_serializer_class(self) -> Any:
        return versions.CatalogVersionDetailSerializer if self.action == "retrieve" else self.serializer_class


@extend_schema_view(
    list=document(summary="Held upstream changes of your servers, newest first (filter by server, upstream, status)"),
    retrieve=document(summary="One held upstream change, with its diff"),
)
class CatalogChangeViewSet(TenantScopedReadOnlyViewSet):
    """Changes an upstream made to its entries after its first sync, held for approval (``on_change``: hold or
    block) on each server it is bound to. Approve them by publishing the server's draft
    (``servers/{id}/publish/``): they become ``published`` in that version."""

    queryset = CatalogChange.objects.all()
    serializer_class = versions.CatalogChangeSerializer
    filterset_class = filters.CatalogChangeFilter
    select_related = ("resolved_in",)
    ordering_fields = ("id", "seen_at", "first_seen_at")


VERSION_PARAMETERS = [
    OpenApiParameter(
        name, OpenApiTypes.STR, OpenApiParameter.QUERY, description=f'A version number or "draft"; default: {default}.'
    )
    for name, default in (("from", "the published version"), ("to", "the draft"))
]


class ServerCatalogViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    """A server's draft, the diff between two of its catalogs, and the verbs that publish: ``publish/`` (the draft,
    or ``version`` again; 201 with the new version, 200 with the published one when nothing changed) and
    ``rollback/`` (serve ``version`` again, as a new version)."""

    queryset = McpServer.objects.all()
    select_related = ("published_version",)
    action_permissions = {"draft": "view", "diff": "view", "publish": "change", "rollback": "change"}
    pagination_class = None  # type: ignore[assignment]  # one server, not a list
    filter_backends = ()  # type: ignore[assignment]

    @document(responses={200: versions.CatalogDraftSerializer}, summary="The server's draft: what publishing serves")
    @action(detail=True, methods=["get"])
    def draft(self, request: Request, pk: str | None = None) -> Response:
        server = self.get_object()
        entries = draft_entries(server)
        digest = entries_digest(entries)
        published = server.published_version
        body = {
            "server": server.pk,
            "digest": digest,
            "published_version": published.number if published is not None else None,
            "differs": published is None or published.digest != digest,
            "pending_changes": CatalogChange.objects.filter(server=server).pending().count(),
            "entries": entries,
        }
        return Response(versions.CatalogDraftSerializer(body).data)

    @document(
        parameters=VERSION_PARAMETERS,
        responses={200: versions.DIFF_SCHEMA},
        summary="What changes from one catalog of the server to another: added, removed, changed field by field",
    )
    @action(detail=True, methods=["get"])
    def diff(self, request: Request, pk: str | None = None) -> Response:
        server = self.get_object()
        sides = {}
        for name, default in (("from", comparison.published_side(server)), ("to", comparison.DRAFT)):
            try:
                sides[name] = comparison.parse_side(request.query_params.get(name), default)
            except ValueError as exc:
                raise ValidationError({name: [str(exc)]}) from exc
        try:
            result = comparison.compare(server, sides["from"], sides["to"])
        except comparison.UnknownVersion as exc:
            raise ValidationError({"version": [str(exc)]}) from exc
        return Response(result.as_dict())

    @document(
        request=versions.PublishSerializer,
        responses={200: versions.CatalogVersionSerializer, 201: versions.CatalogVersionSerializer},
        summary="Publish the draft (approving its held changes), or republish a version",
    )
    @action(detail=True, methods=["post"])
    def publish(self, request: Request, pk: str | None = None) -> Response:
        server = self.get_object()
        body = versions.PublishSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        entries = None
        if "version" in body.validated_data:
            entries = self._version(server, body.validated_data["version"]).entries
        before = server.published_version_id
        version = publish(server, entries=entries, user=request.user, note=body.validated_data["note"])
        created = version.pk != before
        return self._answer(version, created)

    @document(
        request=versions.RollbackSerializer,
        responses={201: versions.CatalogVersionSerializer},
        summary="Serve an earlier version again (published as a new version)",
    )
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        server = self.get_object()
        body = versions.RollbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        number = self._version(server, body.validated_data["version"]).number
        return self._answer(rollback(server, number, user=request.user), created=True)

    def _version(self, server: McpServer, number: int) -> CatalogVersion:
        version = CatalogVersion.objects.filter(server=server, number=number).first()
        if version is None:
            raise ValidationError({"version": [f"{server.server_id} has no version {number}."]})
        return version

    def _answer(self, version: CatalogVersion, created: bool) -> Response:
        version = CatalogVersion.objects.select_related("server", "created_by").get(pk=version.pk)
        data = versions.CatalogVersionSerializer(version, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
