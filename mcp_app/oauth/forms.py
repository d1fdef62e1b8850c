"""The OAuth pages' forms, drawn with django-unfold's widgets (so they look like the admin): the sign-in form, and
the consent form (DOT's ``AllowForm`` plus the grant the person chooses, the grant model agent tokens have)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from oauth2_provider.forms import AllowForm
from unfold.widgets import BASE_INPUT_CLASSES, UnfoldAdminCheckboxSelectMultipleWidget, UnfoldAdminRadioSelectWidget

from ..models import McpServer, Prompt, Resource, Tool

GRANT_CHOICES = [
    ("all", "All of this server's tools, resources and prompts"),
    ("read_only", "Read-only tools only (tools marked read-only), with all resources and prompts"),
    ("chosen", "Only the tools, resources and prompts I choose below"),
]
#: The kinds of catalog entry a consent grants one by one.
GRANTABLE: dict[str, type[Tool | Resource | Prompt]] = {"tools": Tool, "resources": Resource, "prompts": Prompt}


class SignInForm(AuthenticationForm):
    """Django's sign-in form (any active user; unfold's admin form requires staff) with the admin's input style."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("username", "password"):
            self.fields[name].widget.attrs["class"] = " ".join(BASE_INPUT_CLASSES)
        self.fields["username"].widget.attrs["autofocus"] = ""


class ConsentForm(AllowForm):
    """DOT's ``AllowForm`` plus the grant: everything, read-only tools, or the entries of ``server`` chosen below
    (one field per kind of catalog entry, named as ``OAuthConsent.objects.record`` takes them)."""

    grant = forms.ChoiceField(choices=GRANT_CHOICES, initial="all", widget=UnfoldAdminRadioSelectWidget, required=False)

    def __init__(self, *args: Any, server: McpServer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, model in GRANTABLE.items():
            entries = model._default_manager.filter(bindings__server=server).distinct()
            self.fields[name] = forms.ModelMultipleChoiceField(
                queryset=entries if server is not None else entries.none(),
                required=False,
                widget=UnfoldAdminCheckboxSelectMultipleWidget,
            )

    def grant_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``OAuthConsent.objects.record`` for the chosen grant."""
        choice = self.cleaned_data.get("grant") or "all"
        if choice == "read_only":
            return {"read_only": True}
        if choice == "chosen":
            return {name: list(self.cleaned_data.get(name) or ()) for name in GRANTABLE}
        return {}
