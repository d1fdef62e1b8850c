"""What every serializer of a writable resource shares: writes validated by the model's ``full_clean``, foreign
keys scoped to tenants where the user may write, a new object's tenant defaulted (docs/api.md, "Who sees and
does what"); credentials shown without their digest, the raw value in the create response only.
"""

from __future__ import annotations

from copy import copy
from typing import Any, TypeVar, cast

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from rest_framework import exceptions, serializers

from ...models import Tenant
from ...permissions import ADMIN, can_add, default_tenant, scope_queryset

MAX_JSON_DEPTH = 32

# What a tenant or an agent sets for itself instead of the settings' defaults (models.limits).
OWN_LIMIT_FIELDS = ("max_worker_calls", "rate_limit", "rate_burst")


def _check_json(value: Any, depth: int = 0) -> None:
    if depth > MAX_JSON_DEPTH:
        raise serializers.ValidationError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError("Null characters are not allowed.")
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise serializers.ValidationError("Null characters are not allowed.")
            _check_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1)


class SafeJSONField(serializers.JSONField):
    """Any JSON value that every database can store (no NUL characters, bounded nesting)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        _check_json(value)
        return value


class ScopedRelatedField(serializers.PrimaryKeyRelatedField):
    """A foreign key limited to objects of the tenants where the requesting user holds at least ``minimum``."""

    def __init__(self, minimum: str = ADMIN, **kwargs: Any) -> None:
        self.minimum = minimum
        super().__init__(**kwargs)

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = super().get_queryset()
        assert queryset is not None  # these fields always declare their queryset
        request = self.context.get("request")
        if request is None:
            return queryset.none()
        return scope_queryset(request.user, queryset, self.minimum)


class ModelCleanSerializer(serializers.ModelSerializer):
    """Writes go through the model's ``full_clean`` on a candidate instance, which is then what gets saved.

    ``create_only_fields`` are writable on create and read-only afterwards (an object never moves to another
    tenant, a binding never to another server). ``tenant_role`` is the least role that allows creating objects in
    a tenant; a missing ``tenant`` defaults to the user's only such tenant (``permissions.default_tenant``).
    The candidate must pass ``permissions.can_add`` (model permission and role) before anything is saved.
    """

    # (This docstring is the schema's description of every resource that has none of its own: keep it for
    # clients.) Every validated value is assigned to the candidate, write-only secrets included (the model
    # encrypts them: ``models.secrets``). The model's errors keep their fields; those about the whole object
    # are reported on ``whole_object_field``. Uniqueness is the model's to check, so DRF's validators are off.
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping, models.JSONField: SafeJSONField}
    create_only_fields: tuple[str, ...] = ()
    tenant_role: str = ADMIN
    whole_object_field = "non_field_errors"

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list | models.QuerySet):
            for name in self.create_only_fields:
                if name in fields:
                    fields[name].read_only = True
                    fields[name].required = False
        return fields

    def get_validators(self) -> list[Any]:
        return []

    def _default_tenant(self, attrs: dict[str, Any]) -> None:
        if self.instance is not None or "tenant" not in self.fields or attrs.get("tenant") is not None:
            return
        tenant = default_tenant(self.context["request"].user, self.tenant_role)
        if tenant is not None:
            attrs["tenant"] = tenant
            return
        raise serializers.ValidationError({"tenant": ["This field is required: you can write in several tenants."]})

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        self._default_tenant(attrs)
        model: type[models.Model] = self.Meta.model
        many = {field.name for field in model._meta.many_to_many}
        candidate = copy(self.instance) if self.instance is not None else model()
        try:
            for key, value in attrs.items():
                if key not in many:
                    setattr(candidate, key, value)
            self.validate_candidate(candidate, attrs)
            if self.instance is None and not can_add(self.context["request"].user, candidate):
                raise exceptions.PermissionDenied()
            candidate.full_clean()
        except DjangoValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD_ERRORS: exc.messages}
            whole = self.whole_object_field
            raise serializers.ValidationError(
                {(whole if key == NON_FIELD_ERRORS else key): value for key, value in errors.items()}
            ) from exc
        self._candidate = candidate
        return attrs

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        """Cross-field checks before the model's own (a hook for subclasses)."""

    def _save_candidate(self, validated_data: dict[str, Any]) -> models.Model:
        instance = self._candidate
        instance.save()
        for field in instance._meta.many_to_many:
            if field.name in validated_data:
                getattr(instance, field.name).set(validated_data[field.name])
        return instance

    def create(self, validated_data: dict[str, Any]) -> models.Model:
        return self._save_candidate(validated_data)

    def update(self, instance: models.Model, validated_data: dict[str, Any]) -> models.Model:
        return self._save_candidate(validated_data)


class TenantOwnedSerializer(ModelCleanSerializer):
    tenant = ScopedRelatedField(
        queryset=Tenant.objects.all(),
        required=False,
        help_text="Defaults to your tenant when you can write in exactly one; cannot change later.",
    )
    create_only_fields: tuple[str, ...] = ("tenant",)


# What every credential shows besides its own fields: never its digest.
CREDENTIAL_FIELDS = ("prefix", "created_at", "expires_at", "revoked_at", "last_used_at", "is_usable")


class CredentialSerializer(serializers.ModelSerializer):
    """A credential (an agent token, a personal API key), shown with ``CREDENTIAL_FIELDS``: never its digest."""

    is_usable = serializers.BooleanField(read_only=True)


Credential = TypeVar("Credential", bound=CredentialSerializer)


def with_raw_credential(serializer: type[Credential], name: str) -> type[Credential]:
    """``<Name>CreatedSerializer``: ``serializer`` with the raw credential as ``name`` (the instance's ``raw_<name>``,
    set by the create that issued it), shown in the create response only."""
    raw = serializers.CharField(
        source=f"raw_{name}", read_only=True, help_text=f"The raw {name}. Shown only in this response; store it now."
    )
    meta = type("Meta", (serializer.Meta,), {"fields": (*serializer.Meta.fields, name)})
    title = f"{serializer.__name__.removesuffix('Serializer')}CreatedSerializer"
    return cast(
        "type[Credential]", type(title, (serializer,), {name: raw, "Meta": meta, "__module__": serializer.__module__})
    )
