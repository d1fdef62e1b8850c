"""Write-only secrets in admin forms (``models.secrets``): each field in a form's ``write_only`` never renders a
value (not even after a validation error) and says only whether it is set; an empty input keeps the stored
value, any input replaces it, and the ``clear_<field>`` switch removes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django import forms
from django.core.exceptions import ValidationError
from unfold.widgets import UnfoldAdminTextareaWidget, UnfoldBooleanSwitchWidget

from ..definitions.http_tools import parse_secret_headers


class WriteOnlyTextarea(UnfoldAdminTextareaWidget):
    """A textarea that never renders a value: what was typed is not sent back, even with form errors."""

    def format_value(self, value: Any) -> None:
        return None


def clear_switch(label: str) -> forms.BooleanField:
    return forms.BooleanField(label=label, required=False, widget=UnfoldBooleanSwitchWidget)


class WriteOnlySecretsForm(forms.ModelForm):
    """A model form with write-only secrets: ``write_only`` maps each secret's field (an attribute of the model,
    ``models.secrets``) to how typed text becomes its value (``""`` when removed); the instance stores it when
    the form is clean. Every such form has the secret headers."""

    write_only: ClassVar[dict[str, Callable[[str], Any]]] = {"secret_headers": parse_secret_headers}

    secret_headers = forms.CharField(
        label="secret headers",
        required=False,
        strip=False,
        widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One 'Name: value' per line, e.g. 'Authorization: Bearer …'. Stored encrypted and never shown "
        "again; leave empty to keep the current ones, type new ones to replace them all.",
    )
    clear_secret_headers = clear_switch("remove all secret headers")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.write_only:
            shown = getattr(self.instance, name)
            status = (f"Set: {', '.join(shown)}." if isinstance(shown, dict) else "Set.") if shown else "Not set."
            self.fields[name].help_text = f"{status} {self.fields[name].help_text}"
        placeholder = "(set — type to replace)" if self.instance.secret_header_names else "Authorization: Bearer …"
        self.fields["secret_headers"].widget.attrs["placeholder"] = placeholder

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name, parse in self.write_only.items():
            typed, clear = (cleaned.get(name) or "").strip(), cleaned.get(f"clear_{name}")
            if typed and clear:
                raise ValidationError(f"Either replace or remove the {self.fields[name].label}, not both.")
            if not (typed or clear):
                continue  # kept as stored
            try:
                setattr(self.instance, name, parse(cleaned[name] if typed else ""))
            except ValueError as exc:
                self.add_error(name, str(exc))
            except ValidationError as exc:
                self.add_error(name, exc.messages)
        return cleaned
