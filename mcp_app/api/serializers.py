"""Serializers of the API: what each resource looks like on the wire, and the validation of writes.

Every write is validated twice over: by the serializer (types, lengths, foreign keys) and by the model's own
``full_clean`` (the same ``clean`` rules the admin applies: JSON Schema checks, static tool configuration,
registered python names, same-tenant bindings, uniqueness). Foreign keys only accept objects of tenants where
the user may write, so naming another tenant's object is the same 400 as naming one that does not exist.
A new object's tenant defaults to the user's only writable tenant.

Tokens and API keys never show their digest; the raw value is in the create response only. An upstream's secret
headers and OAuth client secret are write-only: responses say which secret headers are set (``{"Name": "set"}``)
and whether a client secret is, never a value.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions, serializers
from rest_framework.fields import empty

from ..definitions.http_tools import SECRET_PLACEHOLDER, parse_secret_headers, secret_headers_status
from ..models import (
    Agent,
    AgentToken,
    ApiKey,
    McpServer,
    McpSession,
    OAuthAgent,
    OAuthConsent,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    TenantMembership,
    Tool,
    ToolCall,
    Upstream,
)
from .permissions import ADMIN, OWNER, access_for, can_add, default_tenant, scope

MAX_JSON_DEPTH = 32


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
        return scope(queryset, request.user, self.minimum)


def _as_drf_error(exc: DjangoValidationError) -> serializers.ValidationError:
    if hasattr(exc, "error_dict"):
        detail = {("non_field_errors" if key == "__all__" else key): value for key, value in exc.message_dict.items()}
        return serializers.ValidationError(detail)
    return serializers.ValidationError({"non_field_errors": exc.messages})


class ModelCleanSerializer(serializers.ModelSerializer):
    """Writes go through the model's ``full_clean`` on a candidate instance, which is then what gets saved.

    ``create_only_fields`` are writable on create and read-only afterwards (an object never moves to another
    tenant, a binding never to another server). ``tenant_role`` is the least role that allows creating objects in
    a tenant; a missing ``tenant`` defaults to the user's only such tenant (``permissions.default_tenant``).
    The candidate must pass ``permissions.can_add`` (model permission and role) before anything is saved.
    """

    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping, models.JSONField: SafeJSONField}
    create_only_fields: tuple[str, ...] = ()
    tenant_role: str = ADMIN

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list | models.QuerySet):
            for name in self.create_only_fields:
                if name in fields:
                    fields[name].read_only = True
                    fields[name].required = False
        return fields

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
        plain = {key: value for key, value in attrs.items() if key not in many}
        if self.instance is None:
            candidate = model(**plain)
        else:
            from copy import copy

            candidate = copy(self.instance)
            for key, value in plain.items():
                setattr(candidate, key, value)
        self.validate_candidate(candidate, attrs)
        if self.instance is None and not can_add(self.context["request"].user, candidate):
            raise exceptions.PermissionDenied()
        try:
            candidate.full_clean()
        except DjangoValidationError as exc:
            raise _as_drf_error(exc) from exc
        self._candidate = candidate
        return attrs

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        """Cross-field checks before the model's own (a hook for subclasses)."""

    def _save_candidate(self, validated_data: dict[str, Any]) -> models.Model:
        model: type[models.Model] = self.Meta.model
        many = {field.name for field in model._meta.many_to_many}
        instance = self._candidate
        instance.save()
        for name in many & set(validated_data):
            getattr(instance, name).set(validated_data[name])
        return instance

    def create(self, validated_data: dict[str, Any]) -> models.Model:
        return self._save_candidate(validated_data)

    def update(self, instance: models.Model, validated_data: dict[str, Any]) -> models.Model:
        return self._save_candidate(validated_data)


class TenantSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="Your role in this tenant (null: none, e.g. a superuser).")

    class Meta:
        model = Tenant
        # max_worker_calls and the rate limit are the operator's (superusers, in the admin): shown, never written here.
        fields = (
            "id",
            "slug",
            "name",
            "is_active",
            "max_worker_calls",
            "rate_limit",
            "rate_burst",
            "created_at",
            "role",
        )
        read_only_fields = fields

    def get_role(self, tenant: Tenant) -> str | None:
        request = self.context.get("request")
        if request is None:
            return None
        return access_for(request.user).role(tenant.pk)


class TenantMembershipSerializer(ModelCleanSerializer):
    tenant = ScopedRelatedField(queryset=Tenant.objects.all(), minimum=OWNER, required=False)
    user = serializers.SlugRelatedField(
        slug_field="username",
        queryset=get_user_model().objects.filter(is_active=True),
        help_text="The member's username.",
    )
    create_only_fields = ("tenant", "user")
    tenant_role = OWNER

    class Meta:
        model = TenantMembership
        fields = ("id", "tenant", "user", "role", "created_at")
        read_only_fields = ("created_at",)
        validators: list[Any] = []

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        # Demoting the last owner is refused by TenantMembership.clean; removing it by the view's destroy.
        assert isinstance(candidate, TenantMembership)
        member = TenantMembership.objects.filter(tenant_id=candidate.tenant_id, user_id=candidate.user_id)
        if self.instance is None and member.exists():
            raise serializers.ValidationError({"user": ["This user is already a member of the tenant."]})


def ensure_another_owner(membership: TenantMembership) -> None:
    """A tenant keeps at least one owner: the last one is not removed (``TenantMembership.objects.owners_left``)."""
    if not TenantMembership.objects.owners_left(membership.tenant_id, without=[membership.pk]):
        raise serializers.ValidationError(
            {"role": ["A tenant keeps at least one owner: make someone else owner first."]}
        )


class TenantOwnedSerializer(ModelCleanSerializer):
    tenant = ScopedRelatedField(
        queryset=Tenant.objects.all(),
        required=False,
        help_text="Defaults to your tenant when you can write in exactly one; cannot change later.",
    )
    create_only_fields = ("tenant",)


class McpServerSerializer(TenantOwnedSerializer):
    endpoint = serializers.SerializerMethodField(help_text="The path MCP clients call: /mcp/<server id>.")

    class Meta:
        model = McpServer
        fields = (
            "id",
            "tenant",
            "server_id",
            "endpoint",
            "name",
            "title",
            "version",
            "instructions",
            "enabled",
            "allowed_origins",
            "protocol_versions",
            "sessions_required",
            "catalog_version",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("catalog_version", "created_at", "updated_at")
        validators: list[Any] = []

    def get_endpoint(self, server: McpServer) -> str:
        return f"/mcp/{server.server_id}"


class ToolSerializer(TenantOwnedSerializer):
    class Meta:
        model = Tool
        fields = (
            "id",
            "tenant",
            "name",
            "title",
            "description",
            "kind",
            "python_name",
            "input_schema",
            "output_schema",
            "annotations",
            "static_result",
            "static_error",
            "static_cases",
            "static_delay_ms",
            "static_progress_steps",
            "task_support",
            "icons",
            "rate_limit",
            "rate_burst",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        validators: list[Any] = []


class ResourceSerializer(TenantOwnedSerializer):
    class Meta:
        model = Resource
        fields = (
            "id",
            "tenant",
            "uri",
            "is_template",
            "name",
            "title",
            "description",
            "mime_type",
            "kind",
            "text",
            "blob",
            "python_name",
            "annotations",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        validators: list[Any] = []


class PromptSerializer(TenantOwnedSerializer):
    class Meta:
        model = Prompt
        fields = (
            "id",
            "tenant",
            "name",
            "title",
            "description",
            "kind",
            "arguments",
            "messages",
            "python_name",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        validators: list[Any] = []


class AgentSerializer(TenantOwnedSerializer):
    class Meta:
        model = Agent
        fields = (
            "id",
            "tenant",
            "agent_id",
            "name",
            "is_active",
            "max_worker_calls",
            "rate_limit",
            "rate_burst",
            "created_at",
        )
        read_only_fields = ("created_at",)
        validators: list[Any] = []


class BindingSerializer(ModelCleanSerializer):
    """A server exposing one catalog entry; the server and the entry must be of the same tenant."""

    server = ScopedRelatedField(queryset=McpServer.objects.all())
    entry_field = ""
    create_only_fields = ("server",)

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        entry = getattr(candidate, self.entry_field)
        if candidate.server.tenant_id != entry.tenant_id:  # type: ignore[attr-defined]
            raise serializers.ValidationError(
                {self.entry_field: [f"The server and the {self.entry_field} belong to different tenants."]}
            )
        model = type(candidate)
        duplicate = model._default_manager.filter(server_id=candidate.server_id, **{self.entry_field: entry})  # type: ignore[attr-defined]
        if candidate.pk is not None:
            duplicate = duplicate.exclude(pk=candidate.pk)
        if duplicate.exists():
            raise serializers.ValidationError(
                {self.entry_field: [f"The server already exposes this {self.entry_field}."]}
            )


class ServerToolSerializer(BindingSerializer):
    tool = ScopedRelatedField(queryset=Tool.objects.all())
    exposed_name = serializers.CharField(read_only=True, help_text="The name clients see.")
    entry_field = "tool"

    class Meta:
        model = ServerTool
        fields = (
            "id",
            "server",
            "tool",
            "enabled",
            "position",
            "name_override",
            "description_override",
            "execution",
            "timeout_seconds",
            "exposed_name",
        )
        validators: list[Any] = []


class ServerResourceSerializer(BindingSerializer):
    resource = ScopedRelatedField(queryset=Resource.objects.all())
    entry_field = "resource"

    class Meta:
        model = ServerResource
        fields = ("id", "server", "resource", "enabled", "position")
        validators: list[Any] = []


class ServerPromptSerializer(BindingSerializer):
    prompt = ScopedRelatedField(queryset=Prompt.objects.all())
    entry_field = "prompt"

    class Meta:
        model = ServerPrompt
        fields = ("id", "server", "prompt", "enabled", "position")
        validators: list[Any] = []


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string"}, "example": {"Authorization": "set"}}
)
class SecretHeadersField(serializers.Field):
    """An upstream's secret headers, write-only: written as an object of header names to values (or ``"Name:
    value"`` lines) that replaces them all; ``{}`` removes them all, leaving the field out keeps them, and a value
    ``"set"`` keeps that header's stored value. Read as ``{"Name": "set"}``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", required=False, **kwargs)

    def to_representation(self, value: Any) -> dict[str, str]:
        return secret_headers_status(value)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict | str):
            raise serializers.ValidationError("An object of header names to values.")
        try:
            return {"secret_headers": parse_secret_headers(data)}
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc


class UpstreamSerializer(TenantOwnedSerializer):
    """An upstream MCP server of a tenant. Its entries, sync state and bindings are read-only here: they change
    through the actions (``sync``, ``bind``, ``unbind``). Creating one runs its first sync (see the view)."""

    secret_headers = SecretHeadersField(
        help_text='Write-only: {"Authorization": "Bearer …"} replaces every secret header ({} removes them; the '
        'value "set" keeps a stored one); responses show {"Authorization": "set"}. Stored encrypted.'
    )
    oauth_client_secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=4096,
        trim_whitespace=False,
        help_text="Write-only: the OAuth client secret (empty: remove it). Stored encrypted.",
    )
    oauth_client_secret_set = serializers.SerializerMethodField(help_text="Whether an OAuth client secret is stored.")
    entries = serializers.SerializerMethodField(help_text="How many tools, resources and prompts it contributes.")
    servers = serializers.SerializerMethodField(help_text="Ids of the servers it is bound to as a whole.")
    sync_status = serializers.SerializerMethodField(
        help_text="never (not synced yet), ok (the last sync succeeded) or error (see last_sync_error)."
    )

    class Meta:
        model = Upstream
        fields: tuple[str, ...] = (
            "id",
            "tenant",
            "name",
            "url",
            "prefix",
            "headers",
            "secret_headers",
            "oauth_client_id",
            "oauth_client_secret",
            "oauth_client_secret_set",
            "oauth_issuer",
            "oauth_scope",
            "timeout_seconds",
            "sync_interval_seconds",
            "era",
            "enabled",
            "entries",
            "servers",
            "sync_status",
            "last_synced_at",
            "last_sync_error",
            "protocol_version",
            "server_info",
            "capabilities",
            "created_at",
            "updated_at",
        )
        read_only_fields = (
            "last_synced_at",
            "last_sync_error",
            "protocol_version",
            "server_info",
            "capabilities",
            "created_at",
            "updated_at",
        )
        validators: list[Any] = []

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Not model fields: applied to the candidate through the model's own setters (validate_candidate).
        self._secrets = {key: attrs.pop(key) for key in ("secret_headers", "oauth_client_secret") if key in attrs}
        return super().validate(attrs)

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        assert isinstance(candidate, Upstream)
        if "secret_headers" in self._secrets:
            _write_secret_headers(candidate, self._secrets["secret_headers"])
        if "oauth_client_secret" in self._secrets:
            candidate.set_oauth_client_secret(self._secrets["oauth_client_secret"])

    def create(self, validated_data: dict[str, Any]) -> Upstream:
        """Register: save, first sync and all (``operations.register_upstream``); a failed first sync is a 400
        and nothing is saved."""
        from ..operations import OperationError, register_upstream

        try:
            registration = register_upstream(self._candidate)  # type: ignore[arg-type]  # an Upstream here
        except OperationError as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from exc
        upstream = registration.upstream
        upstream.first_sync = registration.report.as_dict()  # type: ignore[attr-defined]  # the create response's
        return upstream

    def get_oauth_client_secret_set(self, upstream: Upstream) -> bool:
        return bool(upstream.oauth_client_secret_encrypted)

    @extend_schema_field(
        {
            "type": "object",
            "properties": {kind: {"type": "integer"} for kind in ("tools", "resources", "prompts")},
            "required": ["tools", "resources", "prompts"],
        }
    )
    def get_entries(self, upstream: Upstream) -> dict[str, int]:
        counted = getattr(upstream, "tool_count", None)
        if counted is not None:
            return {
                "tools": counted,
                "resources": upstream.resource_count,  # type: ignore[attr-defined]
                "prompts": upstream.prompt_count,  # type: ignore[attr-defined]
            }
        return {
            "tools": upstream.tools.count(),
            "resources": upstream.resources.count(),
            "prompts": upstream.prompts.count(),
        }

    def get_servers(self, upstream: Upstream) -> list[int]:
        return sorted(binding.server_id for binding in upstream.bindings.all())

    def get_sync_status(self, upstream: Upstream) -> str:
        if upstream.last_sync_error:
            return "error"
        return "ok" if upstream.last_synced_at else "never"


def _write_secret_headers(upstream: Upstream, values: dict[str, str]) -> None:
    """Replace ``upstream``'s secret headers by ``values``, where ``"set"`` (what responses show) for a header that
    is set keeps its value: a representation written back unchanged changes nothing."""
    current = set(upstream.secret_header_names)
    kept = {name for name, value in values.items() if value == SECRET_PLACEHOLDER and name in current}
    if kept == current and len(values) == len(kept):
        return
    if kept:
        stored = upstream.reveal_secret_headers()
        values = {name: stored[name] if name in kept else value for name, value in values.items()}
    upstream.set_secret_headers(values)


class SyncReportSerializer(serializers.Serializer):
    """What a sync did (``federation.sync.SyncReport``): ok false with the error when the upstream could not be
    read (its entries are then kept as they were)."""

    ok = serializers.BooleanField()
    error = serializers.CharField(help_text="Why the sync failed; empty when ok.")
    added = serializers.ListField(child=serializers.CharField(), help_text="Names (URIs for resources) imported.")
    updated = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField(), help_text="Dropped upstream: gone everywhere.")
    skipped = serializers.ListField(child=serializers.CharField(), help_text="Not imported or not bound, and why.")
    flagged = serializers.ListField(
        child=serializers.CharField(),
        help_text="Imported with its text cleaned or cut, or holding a tag posing as a role marker, and why.",
    )


class UpstreamCreatedSerializer(UpstreamSerializer):
    sync = SyncReportSerializer(source="first_sync", read_only=True, help_text="What the first sync imported.")

    class Meta(UpstreamSerializer.Meta):
        fields: tuple[str, ...] = (*UpstreamSerializer.Meta.fields, "sync")


class UpstreamServerSerializer(serializers.Serializer):
    """The body of ``bind`` and ``unbind``: one of the upstream's tenant's servers."""

    server = ScopedRelatedField(queryset=McpServer.objects.all(), help_text="The server's id (its primary key).")


class UpstreamBoundSerializer(serializers.Serializer):
    server = serializers.IntegerField()
    servers = serializers.ListField(child=serializers.IntegerField(), help_text="Every server it is now bound to.")
    skipped = serializers.ListField(
        child=serializers.CharField(), help_text="Entries not exposed there (a name the server already uses)."
    )


class UpstreamTestSerializer(serializers.Serializer):
    """What a connection test saw, without writing anything."""

    ok = serializers.BooleanField()
    error = serializers.CharField(help_text="Why it could not connect or list; empty when ok.")
    protocol_version = serializers.CharField(allow_blank=True)
    server_info = serializers.JSONField(allow_null=True)
    capabilities = serializers.JSONField(allow_null=True)
    offers = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Upstream names by kind (tools, resources, resource_templates, prompts), before the prefix.",
    )


GRANT_FIELDS = ("granted_tools", "granted_resources", "granted_prompts")


class AgentTokenSerializer(serializers.ModelSerializer):
    """An agent's token. Created through ``AgentToken.objects.issue_token``; the digest is never shown or set.

    The grant (``limit_to_grant`` with the granted tools, resources and prompts, and ``read_only``) narrows what
    the token sees on its servers; granting any entry on create limits the token to the entries granted."""

    agent = ScopedRelatedField(queryset=Agent.objects.all())
    servers = ScopedRelatedField(
        queryset=McpServer.objects.all(), many=True, required=False, help_text="Servers this token may call."
    )
    granted_tools = ScopedRelatedField(
        queryset=Tool.objects.all(), many=True, required=False, help_text="With limit_to_grant: the tools it sees."
    )
    granted_resources = ScopedRelatedField(queryset=Resource.objects.all(), many=True, required=False)
    granted_prompts = ScopedRelatedField(queryset=Prompt.objects.all(), many=True, required=False)
    tenant = serializers.IntegerField(source="agent.tenant_id", read_only=True)
    is_usable = serializers.BooleanField(read_only=True)

    class Meta:
        model = AgentToken
        fields: tuple[str, ...] = (
            "id",
            "tenant",
            "agent",
            "name",
            "servers",
            "limit_to_grant",
            "granted_tools",
            "granted_resources",
            "granted_prompts",
            "read_only",
            "prefix",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "is_usable",
        )
        read_only_fields = ("prefix", "created_at", "revoked_at", "last_used_at")

    def __init__(self, instance: Any = None, data: Any = empty, **kwargs: Any) -> None:
        super().__init__(instance, data, **kwargs)
        if instance is not None and not isinstance(instance, list | models.QuerySet):
            self.fields["agent"].read_only = True

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        agent = attrs.get("agent") or (self.instance.agent if self.instance is not None else None)
        servers = attrs.get("servers")
        if agent is not None and servers and any(server.tenant_id != agent.tenant_id for server in servers):
            raise serializers.ValidationError({"servers": ["A token can only be scoped to its agent's servers."]})
        for field in GRANT_FIELDS:
            entries = attrs.get(field) or ()
            if agent is not None and any(entry.tenant_id != agent.tenant_id for entry in entries):
                raise serializers.ValidationError({field: ["A token can only be granted its agent's catalog entries."]})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> AgentToken:
        limited = validated_data.get("limit_to_grant", False) or any(field in validated_data for field in GRANT_FIELDS)
        grants = {
            key: (list(validated_data.get(field) or ()) if limited else None)
            for key, field in zip(("tools", "resources", "prompts"), GRANT_FIELDS, strict=True)
        }
        token, raw = AgentToken.objects.issue_token(
            validated_data["agent"],
            servers=validated_data.get("servers") or None,
            name=validated_data.get("name", ""),
            expires_at=validated_data.get("expires_at"),
            read_only=validated_data.get("read_only", False),
            **grants,
        )
        token.raw_token = raw  # type: ignore[attr-defined]  # returned once, by the create response
        return token


class AgentTokenCreatedSerializer(AgentTokenSerializer):
    token = serializers.CharField(
        source="raw_token", read_only=True, help_text="The raw token. Shown only in this response; store it now."
    )

    class Meta(AgentTokenSerializer.Meta):
        fields = (*AgentTokenSerializer.Meta.fields, "token")


class McpSessionSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="server.tenant_id", read_only=True)

    class Meta:
        model = McpSession
        fields = (
            "id",
            "tenant",
            "server",
            "agent",
            "protocol_version",
            "client_info",
            "client_capabilities",
            "log_level",
            "created_at",
            "last_seen_at",
            "terminated_at",
        )
        read_only_fields = fields


class ApiKeySerializer(serializers.ModelSerializer):
    """One of your own personal API keys; created through ``ApiKey.objects.issue_key``."""

    is_usable = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiKey
        fields: tuple[str, ...] = (
            "id",
            "name",
            "prefix",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "is_usable",
        )
        read_only_fields = ("prefix", "created_at", "revoked_at", "last_used_at")

    def create(self, validated_data: dict[str, Any]) -> ApiKey:
        key, raw = ApiKey.objects.issue_key(
            self.context["request"].user,
            name=validated_data.get("name", ""),
            expires_at=validated_data.get("expires_at"),
        )
        key.raw_key = raw  # type: ignore[attr-defined]
        return key


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        source="raw_key", read_only=True, help_text="The raw key. Shown only in this response; store it now."
    )

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")


class ToolCallSerializer(serializers.ModelSerializer):
    """One audited ``tools/call``; arguments are the redacted copy stored by the audit log."""

    class Meta:
        model = ToolCall
        fields = (
            "id",
            "tenant",
            "server",
            "agent",
            "server_key",
            "agent_key",
            "token_prefix",
            "tool_name",
            "arguments_digest",
            "arguments",
            "status",
            "error_code",
            "error_message",
            "started_at",
            "finished_at",
            "duration_ms",
            "era",
            "protocol_version",
            "request_id",
            "task_id",
        )
        read_only_fields = fields


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. not_found, validation_error.")
    message = serializers.CharField(help_text="Human-readable summary.")
    # A field named "fields" (the error body's key): DRF's metaclass takes it out of the class attributes, so it
    # does not shadow ``Serializer.fields`` at run time; the stubs cannot know that.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.JSONField(), required=False, help_text="Validation errors per field (non_field_errors)."
    )


class ErrorSerializer(serializers.Serializer):
    """The body of every error response."""

    error = ErrorDetailSerializer()


class OAuthConsentSerializer(serializers.ModelSerializer):
    """What a person allowed an OAuth client on one server (made on the consent page; withdrawn here)."""

    tenant = serializers.IntegerField(source="server.tenant_id", read_only=True)
    username = serializers.CharField(source="user.get_username", read_only=True)
    client_id = serializers.CharField(source="application.client_id", read_only=True)
    client_name = serializers.CharField(source="application.name", read_only=True)

    class Meta:
        model = OAuthConsent
        fields = (
            "id",
            "tenant",
            "server",
            "agent",
            "username",
            "client_id",
            "client_name",
            "limit_to_grant",
            "read_only",
            "granted_tools",
            "granted_resources",
            "granted_prompts",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class OAuthAgentSerializer(serializers.ModelSerializer):
    """The agent of one person using one OAuth client in a tenant."""

    username = serializers.CharField(source="user.get_username", read_only=True)
    client_id = serializers.CharField(source="application.client_id", read_only=True)
    client_name = serializers.CharField(source="application.name", read_only=True)

    class Meta:
        model = OAuthAgent
        fields = ("id", "tenant", "agent", "username", "client_id", "client_name", "created_at")
        read_only_fields = fields
