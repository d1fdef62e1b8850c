"""``GET /api/v1/usage/``: the usage ledger of the caller's tenants, as JSON pages or as one CSV download.

Filters: ``since`` and ``until`` (days, both inclusive) or ``month=YYYY-MM``; ``agent``, ``server`` and ``tool``
(the ids and name as the ledger keeps them, so a deleted agent's rows still match); ``tenant``/``tenant_slug``.
CSV with ``?format=csv`` or ``Accept: text/csv``: every matching row, unpaginated, streamed, with the header of
``limits.export.FIELDS``. Rows come from the flusher only: the API never writes them. docs/api.md.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django_filters import rest_framework as filters
from rest_framework import renderers, serializers
from rest_framework.request import Request

from ..limits import export
from ..models import UsageDay
from .filters import TenantScopedFilter


class MonthField(forms.CharField):
    def validate(self, value: Any) -> None:
        super().validate(value)
        if value:
            try:
                export.month_days(value)
            except ValueError as exc:
                raise forms.ValidationError(str(exc), code="invalid") from None


class MonthFilter(filters.CharFilter):
    field_class = MonthField

    def filter(self, qs: QuerySet[UsageDay], value: str) -> QuerySet[UsageDay]:
        if not value:
            return qs
        first, last = export.month_days(value)
        return qs.filter(day__gte=first, day__lte=last)


class UsageFilter(TenantScopedFilter):
    since = filters.DateFilter(field_name="day", lookup_expr="gte", help_text="First day (YYYY-MM-DD), inclusive.")
    until = filters.DateFilter(field_name="day", lookup_expr="lte", help_text="Last day (YYYY-MM-DD), inclusive.")
    month = MonthFilter(help_text="A calendar month, YYYY-MM (the tenant's days).")
    agent = filters.CharFilter(field_name="agent_key", help_text="Agent id (agentId), as recorded.")
    server = filters.CharFilter(field_name="server_key", help_text="Server id, as recorded.")
    tool = filters.CharFilter(field_name="tool_name", help_text="Tool name, as called.")

    class Meta:
        model = UsageDay
        fields = ("tenant", "tenant_slug", "since", "until", "month", "agent", "server", "tool")


class UsageSerializer(serializers.Serializer[UsageDay]):
    """One ledger row: what one agent spent on one tool of one server in one day (the tenant's)."""

    day = serializers.DateField()
    tenant = serializers.CharField(help_text="Tenant slug.")
    agent = serializers.CharField(help_text="Agent id (agentId) as recorded; kept after the agent is deleted.")
    server = serializers.CharField(help_text="Server id as recorded; kept after the server is deleted.")
    tool = serializers.CharField()
    calls = serializers.IntegerField()
    # DRF's metaclass takes declared fields off the class: this one does not hide ``Serializer.errors``.
    errors = serializers.IntegerField(  # type: ignore[assignment]
        help_text="Calls that failed: a JSON-RPC error, an isError result, a cancellation."
    )
    tool_seconds = serializers.FloatField(help_text="Seconds the tool ran, measured where it ran.")
    bytes_in = serializers.IntegerField(help_text="Bytes of the arguments (JSON).")
    bytes_out = serializers.IntegerField(help_text="Bytes of the results (JSON).")
    cost = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="Price plus reported cost.")

    def to_representation(self, instance: UsageDay) -> dict[str, Any]:
        return export.record(instance)


class CsvRenderer(renderers.BaseRenderer):
    """``text/csv`` (``?format=csv``, ``Accept: text/csv``). The list streams its rows itself (``csv_response``);
    what is rendered here is an error: one row under the header ``code,message``."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            return b""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(("code", "message"))
        writer.writerow((error.get("code", ""), error.get("message", "")))
        return buffer.getvalue().encode()


def wants_csv(request: Request) -> bool:
    return getattr(request.accepted_renderer, "format", None) == CsvRenderer.format


def csv_response(queryset: QuerySet[UsageDay]) -> StreamingHttpResponse:
    """Every row of ``queryset`` (already scoped and filtered) as one streamed CSV download."""
    rows = export.ordered(queryset).iterator(chunk_size=2000)
    response = StreamingHttpResponse(
        export.csv_lines(export.record(row) for row in rows), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response
