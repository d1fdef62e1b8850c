"""The admin of http tools: the webhook of a ``Tool`` of kind ``http``, as an inline on the tool's page.

Secret headers are write-only (``SecretHeadersForm``, which upstreams' admin shares): the form shows which are set (names only), an empty input keeps them, any input
replaces all of them, and "clear" removes them. Their values are never rendered, not even back into the form
after a validation error.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet
from unfold.admin import StackedInline
from unfold.widgets import UnfoldAdminTextareaWidget, UnfoldBooleanSwitchWidget

from ..definitions.http_tools import parse_secret_headers
from ..models import Tool, Webhook
from .base import TenantScopedInline


class WriteOnlyTextarea(UnfoldAdminTextareaWidget):
    """A textarea that never renders a value: what was typed is not sent back, even with form errors."""

    def format_value(self, value: Any) -> None:
        return None


class SecretHeadersForm(forms.ModelForm):
    """A model form with write-only secret headers (http tools' webhooks, upstreams): the form says which are set
    (names only), an empty input keeps them, any input replaces all of them, "remove" clears them. The instance's
    ``set_secret_headers`` stores them (encrypted) when the form is clean."""

    secret_headers = forms.CharField(
        label="secret headers",
        required=False,
        strip=False,
        widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One 'Name: value' per line, e.g. 'Authorization: Bearer …'. Stored encrypted and never shown "
        "again; leave empty to keep the current ones, type new ones to replace them all.",
    )
    clear_secret_headers = forms.BooleanField(
        label="remove all secret headers", required=False, widget=UnfoldBooleanSwitchWidget
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = list(self.instance.secret_header_names) if self.instance.pk else []
        status = f"Set: {', '.join(names)}." if names else "Not set."
        self.fields["secret_headers"].help_text = f"{status} {self.fields['secret_headers'].help_text}"
        self.fields["secret_headers"].widget.attrs["placeholder"] = (
            "(set — type to replace)" if names else "Authorization: Bearer …"
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        text = cleaned.get("secret_headers") or ""
        if cleaned.get("clear_secret_headers"):
            if text.strip():
                raise ValidationError("Either type new secret headers or remove them, not both.")
            self.instance.set_secret_headers({})
        elif text.strip():
            try:
                self.instance.set_secret_headers(parse_secret_headers(text))
            except ValueError as exc:
                self.add_error("secret_headers", str(exc))
            except ValidationError as exc:
                self.add_error("secret_headers", exc.messages)
        return cleaned


class WebhookForm(SecretHeadersForm):
    class Meta:
        model = Webhook
        fields = ("url", "method", "headers", "timeout_seconds")


class WebhookFormSet(BaseInlineFormSet):
    """At most one webhook, present exactly when the tool is of kind http.

    A tool form posted without this inline's management data (a script, or a page from before http tools)
    leaves the webhook as it is, instead of failing with Django's "ManagementForm data is missing".
    """

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
        kept = [
            form
            for form in self.forms
            if getattr(form, "cleaned_data", None) and not form.cleaned_data.get("DELETE", False)
        ]
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
