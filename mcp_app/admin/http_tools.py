"""The admin of http tools: the webhook of a ``Tool`` of kind ``http``, as an inline on the tool's page.

Secret headers are write-only (``admin.secrets.WriteOnlySecretsForm``, as upstreams'): their values are never
rendered, not even back into the form after a validation error.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet
from unfold.admin import StackedInline

from ..models import Tool, Webhook
from .base import TenantScopedInline
from .secrets import WriteOnlySecretsForm


class WebhookForm(WriteOnlySecretsForm):
    class Meta:
        model = Webhook
        fields = ("url", "method", "headers", "timeout_seconds")


class WebhookFormSet(BaseInlineFormSet):
    """At most one webhook, present exactly when the tool is of kind http. A tool form posted without this
    inline's management data (a script) leaves the webhook as it is, instead of "ManagementForm data is missing"."""

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        prefix = kwargs.get("prefix") or self.get_default_prefix()
        self.absent = data is not None and f"{prefix}-TOTAL_FORMS" not in data
        if self.absent:
            data = data.copy()
            data[f"{prefix}-TOTAL_FORMS"] = "0"
            data[f"{prefix}-INITIAL_FORMS"] = "0"
        super().__init__(data, *args, **kwargs)

    def clean(self) -> None:
        super().clean()
        if self.absent:
            return
        kept = any(getattr(f, "cleaned_data", None) and not f.cleaned_data.get("DELETE", False) for f in self.forms)
        if self.instance.kind == Tool.Kind.HTTP and not kept:
            raise ValidationError("An http tool needs its webhook: give at least the URL.")
        if self.instance.kind != Tool.Kind.HTTP and kept:
            raise ValidationError("Only tools of kind http have a webhook; remove it or change the kind.")


class WebhookInline(TenantScopedInline, StackedInline):
    model = Webhook
    form = WebhookForm
    formset = WebhookFormSet
    extra = 0
    min_num = 0
    max_num = 1
    fields = ("url", "method", "headers", "secret_headers", "clear_secret_headers", "timeout_seconds")
    template = "admin/mcp_app/webhook_inline.html"  # shown while the add page's kind is http
    verbose_name = "webhook (http tools only)"
    verbose_name_plural = "webhook (http tools only)"

    def get_formset(self, request: Any, obj: Tool | None = None, **kwargs: Any) -> Any:
        # What @sensitive_post_parameters does: error reports of this request (a 500 mailed to ADMINS, the
        # debug page) must not show the posted secret headers.
        request.sensitive_post_parameters = "__ALL__"
        return super().get_formset(request, obj, **kwargs)

    def get_extra(self, request: Any, obj: Tool | None = None, **kwargs: Any) -> int:
        # Offer an empty webhook form on new tools and on http tools that lack one.
        if obj is None or (obj.kind == Tool.Kind.HTTP and not Webhook.objects.filter(tool=obj).exists()):
            return 1
        return 0
