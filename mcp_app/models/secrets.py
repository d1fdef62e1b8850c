"""Write-only secrets of a model: stored only encrypted, written through the model, never read back for display.
Assigning replaces (empty removes); reading gives only what may be shown; ``reveal_*`` gives the value in clear
to the connection that sends it, never to a display or a log.

``SecretHeaders`` (abstract: webhooks, upstreams), ``WriteOnlySecret`` (one encrypted string) and
``SecretsQuerySet.rotate_secrets``. Not here: the header rules (``definitions.http_tools``), the keys
(``mcp_app.crypto``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import orjson
from django.core.exceptions import ValidationError
from django.db import models, transaction

from ..crypto import decrypt, encrypt, rotate
from ..definitions.http_tools import SECRET_PLACEHOLDER, open_secret_headers, validate_headers

_M = TypeVar("_M", bound=models.Model)


class SecretsQuerySet(models.QuerySet[_M]):
    def rotate_secrets(self) -> int:
        """Re-encrypt stored secrets under the first of ``SECRET_KEYS``; returns how many values were rewritten.
        All or nothing: a value no key opens (``InvalidToken``) leaves every row as it was."""
        columns: tuple[str, ...] = self.model.encrypted_columns  # type: ignore[attr-defined]
        count = 0
        with transaction.atomic():
            for row in self.only("pk", *columns):
                changes = {column: rotate(value) for column in columns if (value := getattr(row, column))}
                if changes:
                    self.model._default_manager.filter(pk=row.pk).update(**changes)
                    count += len(changes)
        return count


class WriteOnlySecret:
    """A write-only attribute over an encrypted text column: assigning encrypts (empty removes), reading says
    whether one is set. ``reveal(obj)`` gives the value in clear, for the connection that sends it."""

    def __init__(self, column: str) -> None:
        self.column = column

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else bool(getattr(obj, self.column))

    def __set__(self, obj: Any, value: str) -> None:
        setattr(obj, self.column, encrypt(value.encode()) if value else "")

    def reveal(self, obj: Any) -> str:
        token = getattr(obj, self.column)
        return decrypt(token).decode() if token else ""


class SecretHeaders(models.Model):
    """Request headers whose values are secret (an ``Authorization`` value, an API key): the names are kept in
    clear so that forms and the API can say which are set, the values only encrypted. The configuration of the
    endpoint they are sent to (``config_checks``, ``config_errors``) is validated on every save."""

    secret_headers_encrypted = models.TextField("secret headers (encrypted)", blank=True, default="", editable=False)
    secret_header_names = models.JSONField("secret header names", default=list, blank=True, editable=False)

    encrypted_columns: ClassVar[tuple[str, ...]] = ("secret_headers_encrypted",)
    headers: Any  # the plain headers beside them: each model declares the field, with its own help text

    class Meta:
        abstract = True

    @property
    def secret_headers(self) -> dict[str, str]:
        """``{name: "set"}`` for each stored secret header: what a form or an API response may show."""
        return {name: SECRET_PLACEHOLDER for name in self.secret_header_names}

    @secret_headers.setter
    def secret_headers(self, values: Mapping[str, str]) -> None:
        kept = {name for name, value in values.items() if value == SECRET_PLACEHOLDER and name in self.secret_headers}
        if kept == set(self.secret_header_names) and len(values) == len(kept):
            return
        if kept:
            stored = self.reveal_secret_headers()
            values = {name: stored[name] if name in kept else value for name, value in values.items()}
        self.set_secret_headers(values)

    def set_secret_headers(self, values: Mapping[str, str]) -> None:
        """Replace every secret header (an empty mapping removes them). Validated; saved by ``save()``."""
        try:
            validate_headers(values, "secret headers")
        except ValueError as exc:
            raise ValidationError({"secret_headers": str(exc)}) from exc
        self.secret_headers_encrypted = encrypt(orjson.dumps(dict(values))) if values else ""
        self.secret_header_names = sorted(values, key=str.lower)

    def reveal_secret_headers(self) -> dict[str, str]:
        """The secret headers in clear, for the request that sends them. Never display or log the result."""
        return open_secret_headers(self.secret_headers_encrypted)

    # Validation: on every save, not only in forms ---------------------------------------------------------------

    def config_checks(self) -> dict[str, Callable[[], object]]:
        """By field, a check raising ``ValueError`` with a sentence for the user; models add theirs."""
        return {"headers": lambda: validate_headers(self.headers, "headers")}

    def config_errors(self) -> dict[str, str]:
        """By field, what is wrong with a combination of fields (a model's own rules)."""
        return {}

    def validate_config(self) -> None:
        """Raise ``ValidationError`` (by field) unless the configuration is acceptable."""
        errors: dict[str, str] = {}
        for field, check in self.config_checks().items():
            try:
                check()
            except ValueError as exc:
                errors[field] = str(exc)
        clash = {name.lower() for name in self.headers or {}} & {name.lower() for name in self.secret_header_names}
        if not errors.get("headers") and clash:
            errors["headers"] = f"Also set as a secret header: {', '.join(sorted(clash))}."
        errors.update(self.config_errors())
        if errors:
            raise ValidationError(errors)

    def clean(self) -> None:
        super().clean()
        self.validate_config()

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.validate_config()
        super().save(*args, **kwargs)
