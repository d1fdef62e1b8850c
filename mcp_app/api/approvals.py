"""The API's approvals (docs/approvals.md, "In the admin and the API"): ``approvals/`` lists and shows the calls
waiting for a person, and ``approvals/{id}/approve/`` and ``deny/`` decide one (an optional ``note``).

A decision goes through ``operations.decide_approval``, the one door the admin and ``mcp_approvals`` use too:
200 with the decided approval; 409 ``conflict`` once it is no longer pending (decided, used or expired); 403 for a
viewer and for the user the calling agent acts for; 404 for another tenant's, like a missing one. Scoped and
permitted like every viewset (``views.TenantScopedMixin``): members read, admins and owners decide.
"""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import extend_schema_view
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from ..models import Approval
from ..operations import DecisionRefused, decide_approval
from . import filters
from .exceptions import Conflict, ErrorSerializer
from .schema import document
from .serializers.approvals import ApprovalSerializer, DecisionSerializer
from .views import TenantScopedReadOnlyViewSet

_DECIDED = {200: ApprovalSerializer, 409: ErrorSerializer}


@extend_schema_view(
    list=document(summary="Approvals of your tenants: calls waiting for a person, and those decided, newest first"),
    retrieve=document(summary="One approval: the agent, the tool and the exact arguments it would run with"),
)
class ApprovalViewSet(TenantScopedReadOnlyViewSet):
    """A call to a tool that requires approval waits, parked, until one of its tenant's admins approves or denies
    it here (or in the admin, or with ``mcp_approvals``). An approval is bound to its agent, tool and arguments
    (``arguments_digest``: sha256 of their RFC 8785 canonical JSON), decided once, and void after ``expires_at``.
    The user an OAuth agent acts for never decides that agent's calls."""

    queryset = Approval.objects.all()
    serializer_class = ApprovalSerializer
    filterset_class = filters.ApprovalFilter
    select_related = ("agent", "server", "task", "decided_by")
    ordering_fields = ("id", "created_at", "expires_at", "decided_at")
    action_permissions = {"approve": "change", "deny": "change"}

    @document(request=DecisionSerializer, responses=_DECIDED, summary="Approve: the parked call runs")
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, approve=True)

    @document(request=DecisionSerializer, responses=_DECIDED, summary="Deny: the parked call ends with an error")
    @action(detail=True, methods=["post"])
    def deny(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, approve=False)

    def _decide(self, request: Request, *, approve: bool) -> Response:
        approval = self.get_object()
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            with transaction.atomic():  # the parked call hears the decision once it is committed
                decide_approval(approval, user=request.user, approve=approve, note=body.validated_data["note"])
        except DecisionRefused as refused:
            if refused.forbidden:
                raise PermissionDenied(str(refused)) from refused
            raise Conflict(str(refused)) from refused
        return Response(self.get_serializer(approval).data)
