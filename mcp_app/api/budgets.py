"""The API's budget endpoints (docs/api.md, docs/budgets.md): ``budgets/`` (CRUD of the tenant admins' own budgets;
the operator's listed, a write to one refused by ``mcp_app.permissions``), ``budget-alerts/`` (read-only) and
``budget-alert-hook/`` (one per tenant: get, put, delete, ``rotate/``; its signing secret shown only when made).

Scoped and permitted exactly like the other viewsets (``views.TenantScopedMixin``), throttled alike.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from .. import permissions as tenant_permissions
from ..limits.burndown import burns_by_budget
from ..models import Budget, BudgetAlert, BudgetAlertHook, Tenant
from . import filters
from .schema import document
from .serializers import budgets
from .views import TenantScopedMixin, TenantScopedReadOnlyViewSet, TenantScopedViewSet

NO_STORE = {"Cache-Control": "no-store"}


@extend_schema_view(
    list=document(summary="Budgets of your tenants and their agents: the operator's and your admins'"),
    create=document(summary="Add a budget of your tenant's admins (set_by is always tenant)"),
    update=document(summary="Change a budget your tenant's admins set (an operator's: 403)"),
    partial_update=document(summary="Change a budget your tenant's admins set (an operator's: 403)"),
    destroy=document(summary="Delete a budget your tenant's admins set (an operator's: 403)"),
)
class BudgetViewSet(TenantScopedViewSet):
    """Budgets bound calls, tool-seconds and cost per day and per month, of a whole tenant or of one agent. Every
    budget that applies holds (the tightest wins), so the operator's budgets (``set_by: operator``) are listed here
    but only superusers change them: a write to one by a tenant member is a 403. ``usage`` is this day's and
    month's use of each limit, from the usage ledger, in the tenant's time zone."""

    queryset = Budget.objects.all()
    serializer_class = budgets.BudgetSerializer
    filterset_class = filters.BudgetFilter
    select_related = ("tenant", "agent")
    ordering_fields = ("id", "updated_at")

    def paginate_queryset(self, queryset: Any) -> list[Any] | None:
        page = super().paginate_queryset(queryset)
        self._burns = burns_by_budget(page if page is not None else queryset)  # one query per tenant, not per row
        return page

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "burns": getattr(self, "_burns", None)}


@extend_schema_view(list=document(summary="Budget alerts of your tenants, newest first"))
class BudgetAlertViewSet(TenantScopedReadOnlyViewSet):
    """An alert is recorded once per budget, limit, period and threshold when usage first reaches the budget's
    ``alert_percent``, then POSTed to the tenant's alert webhook (``delivered_at``, ``delivery_error``)."""

    queryset = BudgetAlert.objects.all()
    serializer_class = budgets.BudgetAlertSerializer
    filterset_class = filters.BudgetAlertFilter
    ordering_fields = ("id", "created_at")


TENANT_PARAMETER = OpenApiParameter(
    "tenant",
    OpenApiTypes.INT,
    OpenApiParameter.QUERY,
    description="Tenant id; may be left out when you are a member of exactly one tenant.",
)


def _hook_document(summary: str, responses: Any, request: Any = None) -> Any:
    return document(summary=summary, parameters=[TENANT_PARAMETER], request=request, responses=responses)


class BudgetAlertHookViewSet(
    TenantScopedMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """The one webhook of a tenant that its budget alerts are POSTed to (``?tenant=<id>``, optional for a member
    of one tenant). ``PUT`` creates it (201, with ``signing_secret``) or changes its URL and switch (200, without);
    ``rotate/`` replaces the secret (200, with the new one). The secret is never shown again."""

    queryset = BudgetAlertHook.objects.all()
    serializer_class = budgets.BudgetAlertHookSerializer
    action_permissions = {"rotate": "change"}
    pagination_class = None  # type: ignore[assignment]  # one object, not a list
    filter_backends = ()  # type: ignore[assignment]

    def _tenant(self) -> Tenant:
        raw = self.request.query_params.get("tenant")
        visible = tenant_permissions.scope_queryset(self.request.user, Tenant.objects.all())
        if raw is None:
            only = list(visible[:2])
            if len(only) != 1:
                raise ValidationError({"tenant": ["This parameter is required: you see several tenants."]})
            return only[0]
        if not raw.isdigit() or len(raw) > 18:
            raise ValidationError({"tenant": ["A tenant id (digits)."]})
        tenant = visible.filter(pk=int(raw)).first()
        if tenant is None:
            raise NotFound("No such tenant.")  # another tenant's hook looks like no tenant at all
        return tenant

    def get_object(self) -> BudgetAlertHook:
        tenant = self._tenant()
        hook = self.get_queryset().filter(tenant=tenant).first()
        if hook is None:
            raise NotFound("This tenant has no budget alert webhook.")
        self.check_object_permissions(self.request, hook)
        return hook

    def _with_secret(self, hook: BudgetAlertHook, created: bool) -> Response:
        body = budgets.BudgetAlertHookSecretSerializer(hook, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK, headers=NO_STORE)

    @_hook_document("The tenant's budget alert webhook (404: none)", {200: budgets.BudgetAlertHookSerializer})
    def retrieve(self, request: Request) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @_hook_document(
        "Create the webhook (201, with its signing secret, shown once) or change it (200)",
        {200: budgets.BudgetAlertHookSerializer, 201: budgets.BudgetAlertHookSecretSerializer},
        request=budgets.BudgetAlertHookSerializer,
    )
    def update(self, request: Request) -> Response:
        tenant = self._tenant()
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["Send a JSON object."]})
        with transaction.atomic():
            # One PUT of a tenant's hook at a time: of two racing to create it, the second changes what the first
            # made (200) instead of failing on the one-per-tenant constraint.
            Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
            hook = self.get_queryset().filter(tenant=tenant).first()
            if hook is not None:
                self.check_object_permissions(request, hook)
            elif not tenant_permissions.can_add(request.user, BudgetAlertHook(tenant=tenant)):
                raise PermissionDenied()
            data = request.data if hook is not None else {**request.data, "tenant": tenant.pk}
            serializer = self.get_serializer(hook, data=data)
            serializer.is_valid(raise_exception=True)
            saved = serializer.save()
        if hook is not None:
            return Response(self.get_serializer(saved).data)
        return self._with_secret(saved, created=True)

    @_hook_document("Delete the webhook: alerts are recorded, no longer sent", {204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().destroy(request, *args, **kwargs)

    @_hook_document(
        "Replace the signing secret; the new one is in this response only",
        {200: budgets.BudgetAlertHookSecretSerializer},
    )
    @action(detail=False, methods=["post"])
    def rotate(self, request: Request) -> Response:
        hook = self.get_object()
        raw = hook.new_signing_secret()
        hook.save(update_fields=["signing_secret_encrypted", "updated_at"])
        hook.raw_signing_secret = raw  # type: ignore[attr-defined]
        return self._with_secret(hook, created=False)
