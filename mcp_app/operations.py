"""Operator verbs behind the management commands (``mcp_bootstrap``, ``mcp_issue_token``, ``mcp_revoke_token``,
``mcp_catalog``, ``mcp_member``, ``mcp_api_key``, ``mcp_upstream``, ``mcp_budget``), which only parse arguments and
print; and ``decide_approval``, the one door the admin, the API and ``mcp_approvals`` decide an approval through,
with ``approvals_with_status``, the status every door shows.

What they do lives here so that projects can call it from their own code, and so that the rules (idempotence, raw
tokens shown once, every lookup scoped by tenant slug: an agent or server id means something only in its tenant)
are stated once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from . import permissions
from .definitions.registry import registry
from .models import (
    Agent,
    AgentToken,
    ApiKey,
    Approval,
    Budget,
    McpServer,
    ServerTool,
    Tenant,
    TenantMembership,
    Tool,
    Upstream,
)

_M = TypeVar("_M", bound=Model)


class OperationError(Exception):
    """A request an operator can fix (unknown name, ambiguous prefix, unregistered tool)."""


@dataclass
class BootstrapResult:
    tenant: Tenant
    server: McpServer
    agent: Agent
    token: AgentToken
    raw_token: str | None  # None when an existing token was kept (its value cannot be shown again)
    created: list[str] = field(default_factory=list)


@transaction.atomic
def bootstrap(
    *,
    tenant_slug: str,
    server_id: str,
    agent_id: str,
    tools: list[str] | tuple[str, ...] = (),
    tenant_name: str | None = None,
    token_name: str = "bootstrap",  # noqa: S107  (a label, not a secret)
    rotate: bool = False,
) -> BootstrapResult:
    """Ensure a tenant, a server exposing ``tools`` (registered ``@tool`` names), an agent and a token.

    Idempotent: what exists is kept (tools missing from the server are appended). A usable token named
    ``token_name`` of the agent is kept and its raw value is not shown again (``raw_token`` is ``None``);
    ``rotate=True`` revokes it and issues a new one. A fresh token is scoped to the server.
    """
    unknown = [name for name in tools if registry.get(name) is None]
    if unknown:
        raise OperationError(f"no @tool registered as {', '.join(unknown)}; registered: {', '.join(registry.names())}")
    created: list[str] = []
    tenant, made = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_name or tenant_slug})
    if made:
        created.append(f"tenant {tenant_slug}")
    server = McpServer.objects.filter(server_id=server_id).first()
    if server is None:
        server = McpServer.objects.create(tenant=tenant, server_id=server_id, name=server_id)
        created.append(f"server {server_id}")
    elif server.tenant_id != tenant.pk:
        raise OperationError(f"the server id {server_id!r} belongs to another tenant")
    # The operator runs this command, so the tools it binds are the ones the operator allows the tenant.
    tenant.allow_python_tools(tools)
    position = ServerTool.objects.filter(server=server).count()
    for name in tools:
        tool, made = Tool.objects.get_or_create(
            tenant=tenant, name=name, defaults={"kind": Tool.Kind.PYTHON, "python_name": name}
        )
        if made:
            created.append(f"tool {name}")
        if not ServerTool.objects.filter(server=server, tool=tool).exists():
            ServerTool.objects.create(server=server, tool=tool, position=position)
            position += 1
    agent, made = Agent.objects.get_or_create(tenant=tenant, agent_id=agent_id, defaults={"name": agent_id})
    if made:
        created.append(f"agent {agent_id}")
    existing = AgentToken.objects.usable().filter(agent=agent, name=token_name).order_by("-created_at").first()
    if existing is not None and not rotate:
        return BootstrapResult(tenant, server, agent, existing, None, created)
    if existing is not None:
        revoke(AgentToken.objects.usable().filter(agent=agent, name=token_name))
    token, raw = AgentToken.objects.issue_token(agent, servers=[server], name=token_name)
    created.append(f"token {token.prefix}")
    return BootstrapResult(tenant, server, agent, token, raw, created)


def _found(queryset: QuerySet[_M], what: str, tenant_slug: str | None = None, **lookup: str) -> _M:
    """The object of ``queryset`` matching ``lookup`` (within the tenant ``tenant_slug`` when given), else an
    ``OperationError`` saying which ``what`` is missing, and where."""
    if tenant_slug is not None:
        queryset = queryset.select_related("tenant").filter(tenant__slug=tenant_slug)
    found = queryset.filter(**lookup).first()
    if found is None:
        raise OperationError(f"no {what}" + ("" if tenant_slug is None else f" in tenant {tenant_slug!r}"))
    return found


def find_tenant(tenant_slug: str) -> Tenant:
    return _found(Tenant.objects.all(), f"tenant {tenant_slug!r}", slug=tenant_slug)


def find_agent(tenant_slug: str, agent_id: str) -> Agent:
    return _found(Agent.objects.all(), f"agent {agent_id!r}", tenant_slug, agent_id=agent_id)


def find_server(tenant_slug: str, server_id: str) -> McpServer:
    return _found(McpServer.objects.all(), f"server {server_id!r}", tenant_slug, server_id=server_id)


def find_upstream(tenant_slug: str, name: str) -> Upstream:
    return _found(Upstream.objects.all(), f"upstream {name!r}", tenant_slug, name=name)


def _not_past(expires_at: datetime | None) -> None:
    if expires_at is not None and expires_at <= timezone.now():
        raise OperationError("the expiry is in the past")


def issue_token(
    tenant_slug: str, agent_id: str, server_ids: list[str], *, name: str = "", expires_at: datetime | None = None
) -> tuple[AgentToken, str]:
    """A new token of the tenant's agent, scoped to the tenant's ``server_ids`` (at least one)."""
    if not server_ids:
        raise OperationError("name at least one server the token may call")
    agent = find_agent(tenant_slug, agent_id)
    servers = [find_server(tenant_slug, server_id) for server_id in server_ids]
    _not_past(expires_at)
    return AgentToken.objects.issue_token(agent, servers=servers, name=name, expires_at=expires_at)


def revoke(credentials: QuerySet[Any]) -> int:
    """Revoke every unrevoked agent token or API key of ``credentials`` one by one (their model's ``revoke``, so
    that signals and cache invalidation see each change); returns how many were revoked."""
    revoked = 0
    for credential in credentials.filter(revoked_at__isnull=True):
        credential.revoke()
        revoked += 1
    return revoked


def _prefix(typed: str, scheme: str) -> str:
    """The display prefix in what an operator typed: ``ab12cd34``, ``mcp_ab12cd34_`` or ``mcp_ab12cd34_…``."""
    return typed.removeprefix(f"{scheme}_").rstrip("_…").lower()


def tokens_to_revoke(
    tenant_slug: str, *, prefix: str | None = None, agent_id: str | None = None, name: str | None = None
) -> QuerySet[AgentToken]:
    """The tenant's unrevoked tokens matching every given criterion (at least one is required)."""
    if prefix is None and agent_id is None and name is None:
        raise OperationError("name a token prefix, an agent or a token name")
    tokens = AgentToken.objects.filter(agent__tenant__slug=tenant_slug, revoked_at__isnull=True)
    if prefix is not None:
        tokens = tokens.filter(prefix=_prefix(prefix, "mcp"))
    if agent_id is not None:
        tokens = tokens.filter(agent__agent_id=agent_id)
    if name is not None:
        tokens = tokens.filter(name=name)
    return tokens


def find_user(username: str, *, active: bool = True) -> Any:
    """The user with this username (the user model's ``USERNAME_FIELD``); active ones only unless told."""
    users = get_user_model()._default_manager.filter(**{get_user_model().USERNAME_FIELD: username})
    user = users.filter(is_active=True).first() if active else users.first()
    if user is None:
        raise OperationError(f"no {'active ' if active else ''}user {username!r}")
    return user


def _owner_stays(membership: TenantMembership, *, removing: bool) -> None:
    if membership.role == TenantMembership.Role.OWNER and not TenantMembership.objects.owners_left(
        membership.tenant_id, without=[membership.pk]
    ):
        verb = "remove" if removing else "demote"
        raise OperationError(
            f"cannot {verb} the last owner of {membership.tenant.slug!r}: make someone else owner first"
        )


@transaction.atomic
def add_member(
    tenant_slug: str, username: str, role: str = TenantMembership.Role.VIEWER
) -> tuple[TenantMembership, bool]:
    """Give the user ``role`` in the tenant: a new membership, or the existing one's role changed. Returns it and
    whether it was created. A tenant's last owner is not demoted."""
    if role not in TenantMembership.Role.values:
        raise OperationError(f"no role {role!r}; roles: {', '.join(TenantMembership.Role.values)}")
    tenant = find_tenant(tenant_slug)
    user = find_user(username)
    membership = TenantMembership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    if membership is None:
        return TenantMembership.objects.create(tenant=tenant, user=user, role=role), True
    if membership.role != role:
        if role != TenantMembership.Role.OWNER:
            _owner_stays(membership, removing=False)
        membership.role = role
        membership.save(update_fields=["role"])
    return membership, False


@transaction.atomic
def remove_member(tenant_slug: str, username: str) -> None:
    """End the user's membership of the tenant; a tenant's last owner stays."""
    membership = (
        TenantMembership.objects.select_for_update()
        .select_related("tenant")
        .filter(tenant__slug=tenant_slug, user=find_user(username, active=False))
        .first()
    )
    if membership is None:
        raise OperationError(f"{username!r} is not a member of {tenant_slug!r}")
    _owner_stays(membership, removing=True)
    membership.delete()


def memberships(*, tenant_slug: str | None = None, username: str | None = None) -> QuerySet[TenantMembership]:
    """A tenant's memberships, a user's, or one user's in one tenant (at least one criterion)."""
    if tenant_slug is None and username is None:
        raise OperationError("name a tenant or a user")
    found = TenantMembership.objects.select_related("tenant", "user").order_by("tenant__slug", "role", "user_id")
    if tenant_slug is not None:
        found = found.filter(tenant=find_tenant(tenant_slug))
    if username is not None:
        found = found.filter(user=find_user(username, active=False))
    return found


def issue_api_key(username: str, *, name: str = "", expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """A new personal API key of the (active) user; the raw key is returned once."""
    user = find_user(username)
    _not_past(expires_at)
    return ApiKey.objects.issue_key(user, name=name, expires_at=expires_at)


def api_keys_to_revoke(username: str, *, prefix: str | None = None, name: str | None = None) -> QuerySet[ApiKey]:
    """The user's unrevoked API keys matching every given criterion (no criterion: all of them)."""
    keys = ApiKey.objects.filter(user=find_user(username, active=False), revoked_at__isnull=True)
    if prefix is not None:
        keys = keys.filter(prefix=_prefix(prefix, "mcpk"))
    if name is not None:
        keys = keys.filter(name=name)
    return keys


# Upstream MCP servers --------------------------------------------------------------------------------------------


def _sentence(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(
            f"{'' if field == '__all__' else field + ': '}{' '.join(dict.fromkeys(messages))}"
            for field, messages in exc.message_dict.items()
        )
    return " ".join(dict.fromkeys(exc.messages))


@dataclass
class Registration:
    """A registered upstream: what its first sync imported, and what binding it whole skipped."""

    upstream: Upstream
    report: Any  # federation.sync.SyncReport
    servers: list[McpServer] = field(default_factory=list)


def register_upstream(upstream: Upstream, servers: list[McpServer] | tuple[McpServer, ...] = ()) -> Registration:
    """Save the new ``upstream``, import its catalog (first sync) and bind it whole to each of ``servers``.

    All or nothing: an invalid configuration, a server of another tenant, or a first sync that fails raises
    ``OperationError`` with the reason, and nothing is registered. The upstream's catalog is read first, with no
    transaction open; the row, its entries and its bindings are then written in one transaction."""
    from asgiref.sync import async_to_sync

    from .definitions.upstreams import endpoint_of
    from .federation.sync import apply, bind, describe_failure, fetch
    from .models import UpstreamBinding  # its same-tenant rule, asked before anything is written

    foreign = [
        server.server_id for server in servers if UpstreamBinding(upstream=upstream, server=server).foreign_rows()
    ]
    if foreign:
        raise OperationError(
            f"server {foreign[0]!r} belongs to another tenant: an upstream is only exposed on its own tenant's servers"
        )
    if Upstream.objects.filter(tenant_id=upstream.tenant_id, name=upstream.name).exists():
        raise OperationError(f"the tenant already has an upstream named {upstream.name!r}")
    try:
        upstream.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise OperationError(_sentence(exc)) from exc
    try:
        remote = async_to_sync(fetch)(endpoint_of(upstream))
    except Exception as exc:
        raise OperationError(f"the first sync failed, nothing was registered: {describe_failure(exc)}") from exc
    with transaction.atomic():
        upstream.save()
        for server in servers:
            bind(upstream, server)  # bound first: its first sync exposes and approves what it imports there
        report = apply(upstream, remote)
    upstream.refresh_from_db()
    return Registration(upstream, report, list(servers))


def add_upstream(
    tenant_slug: str,
    name: str,
    url: str,
    *,
    prefix: str = "",
    secret_headers: list[str] | tuple[str, ...] = (),
    bind_to: list[str] | tuple[str, ...] = (),
    era: str = "auto",
    on_change: str = Upstream.OnChange.HOLD,
) -> Registration:
    """``mcp_upstream add``: a new upstream of the tenant, with ``secret_headers`` (``"Name: value"`` each, stored
    encrypted), synced, bound whole to the tenant's servers ``bind_to`` (see ``register_upstream``); ``era``: the
    protocol era spoken to it (``definitions.upstreams.ERAS``); ``on_change``: what later syncs do with its
    changes (``Upstream.OnChange``)."""
    from .definitions.http_tools import parse_secret_headers

    tenant = find_tenant(tenant_slug)
    where = f"in tenant {tenant_slug!r}"  # any tenant's server: register_upstream refuses another tenant's
    servers = [
        _found(McpServer.objects.select_related("tenant"), f"server {sid!r} {where}", server_id=sid) for sid in bind_to
    ]
    upstream = Upstream(tenant=tenant, name=name, url=url, prefix=prefix, era=era, on_change=on_change)
    if secret_headers:
        try:
            upstream.set_secret_headers(parse_secret_headers("\n".join(secret_headers)))
        except ValueError as exc:
            raise OperationError(f"--header: {exc}") from exc
        except ValidationError as exc:
            raise OperationError(f"--header: {' '.join(exc.messages)}") from exc
    return register_upstream(upstream, servers)


def set_upstream(tenant_slug: str, name: str, *, era: str | None = None, on_change: str | None = None) -> Upstream:
    """``mcp_upstream set``: speak ``era`` to the upstream from its next connection on; treat the changes its next
    syncs find per ``on_change`` (``Upstream.OnChange``; changes already held stay held until published)."""
    from .definitions.upstreams import validate_era

    changed: list[str] = []
    if era is not None:
        try:
            validate_era(era)
        except ValueError as exc:
            raise OperationError(f"--era: {exc}") from exc
        changed.append("era")
    if on_change is not None:
        if on_change not in Upstream.OnChange.values:
            raise OperationError(f"--on-change: one of {', '.join(Upstream.OnChange.values)}, not {on_change!r}")
        changed.append("on_change")
    if not changed:
        raise OperationError("nothing to change: give --era or --on-change")
    upstream = find_upstream(tenant_slug, name)
    if era is not None:
        upstream.era = era
    if on_change is not None:
        upstream.on_change = on_change
    upstream.save(update_fields=[*changed, "updated_at"])
    return upstream


def upstreams(tenant_slug: str | None = None) -> QuerySet[Upstream]:
    """Every upstream (of one tenant), with its tenant, bound servers and entry counts."""
    found = Upstream.objects.with_entry_counts().select_related("tenant").prefetch_related("bindings__server")
    if tenant_slug is not None:
        found = found.filter(tenant=find_tenant(tenant_slug))
    return found.order_by("tenant__slug", "name")


def probe_upstream(upstream: Upstream) -> dict[str, Any]:
    """Connect to ``upstream`` and list what it offers, writing nothing: ``ok``, ``error``, ``protocol_version``,
    ``server_info``, ``capabilities`` and ``offers`` (upstream names by kind, before the prefix)."""
    from asgiref.sync import async_to_sync

    from .definitions.upstreams import endpoint_of
    from .federation.sync import describe_failure, fetch

    try:
        remote = async_to_sync(fetch)(endpoint_of(upstream))
    except Exception as exc:
        return {
            "ok": False,
            "error": describe_failure(exc),
            "protocol_version": "",
            "server_info": None,
            "capabilities": None,
            "offers": {},
        }
    return {
        "ok": True,
        "error": "",
        "protocol_version": remote.protocol_version,
        "server_info": remote.server_info,
        "capabilities": remote.capabilities,
        "offers": {
            "tools": [str(item.get("name", "")) for item in remote.tools],
            "resources": [str(item.get("uri", "")) for item in remote.resources],
            "resource_templates": [str(item.get("uriTemplate", "")) for item in remote.templates],
            "prompts": [str(item.get("name", "")) for item in remote.prompts],
        },
    }


# Budgets ---------------------------------------------------------------------------------------------------------


def _budgets(tenant_slug: str, agent_id: str | None, set_by: str) -> tuple[Tenant, Agent | None, QuerySet[Budget]]:
    tenant = find_tenant(tenant_slug)
    agent = find_agent(tenant_slug, agent_id) if agent_id is not None else None
    return tenant, agent, Budget.objects.filter(tenant=tenant, agent=agent, set_by=set_by)


@transaction.atomic
def set_budget(
    tenant_slug: str, agent_id: str | None = None, *, alert_percent: int | None = None, **limits: Any
) -> tuple[Budget, bool]:
    """``mcp_budget set``: create or change the operator's budget of a tenant (or of one of its agents). Each
    keyword of ``limits`` (``calls_per_day``, ``cost_per_month``, …) sets that limit; ``None`` clears it; limits
    not given stay as they were. Validated by the model (``full_clean``) before anything is saved."""
    tenant, agent, found = _budgets(tenant_slug, agent_id, Budget.SetBy.OPERATOR)
    # No ordering: the model's orders by agent, an outer join PostgreSQL cannot lock.
    budget = found.order_by().select_for_update().first() or Budget(
        tenant=tenant, agent=agent, set_by=Budget.SetBy.OPERATOR
    )
    created = budget.pk is None
    for name, value in limits.items():
        setattr(budget, name, value)
    if alert_percent is not None:
        budget.alert_percent = alert_percent
    try:
        budget.full_clean()
    except ValidationError as exc:
        raise OperationError(_sentence(exc)) from exc
    budget.save()
    return budget, created


def clear_budget(tenant_slug: str, agent_id: str | None = None, set_by: str = Budget.SetBy.OPERATOR) -> int:
    """``mcp_budget clear``: delete the tenant's (or agent's) budget set by ``set_by``; how many went (0 or 1)."""
    _, _, found = _budgets(tenant_slug, agent_id, set_by)
    _, deleted = found.delete()
    return deleted.get(Budget._meta.label, 0)  # not the alerts that went with it


def approvals_with_status(approvals: QuerySet[Approval], status: str) -> QuerySet[Approval]:
    """``approvals`` whose status is ``status`` as of now, as every door shows it (``Approval.is_expired``): a
    pending or approved one past its expiry is ``expired`` before the sweep marks it so."""
    now = timezone.now()
    live = (Approval.Status.PENDING, Approval.Status.APPROVED)  # the statuses an expiry ends
    if status == Approval.Status.EXPIRED:
        return approvals.filter(Q(status=status) | Q(status__in=live, expires_at__lte=now))
    if status in live:
        return approvals.filter(status=status, expires_at__gt=now)
    return approvals.filter(status=status)


class DecisionRefused(OperationError):
    """Why a decision on an approval was not recorded. ``forbidden``: this user may not decide it (not an admin of
    its tenant, or the user the calling agent acts for); otherwise it is no longer pending (decided, used or
    expired), and ``approval`` is as it is now."""

    def __init__(self, message: str, approval: Approval, *, forbidden: bool = False) -> None:
        super().__init__(message)
        self.approval = approval
        self.forbidden = forbidden


def _no_longer_pending(approval: Approval) -> str:
    if approval.status in (Approval.Status.PENDING, Approval.Status.EXPIRED):
        return f"Approval {approval.pk} expired at {approval.expires_at.isoformat()}: it can no longer be decided."
    who = f" by {approval.decided_by}" if approval.decided_by is not None else ""
    done = "approved and used" if approval.status == Approval.Status.USED else approval.status
    return f"Approval {approval.pk} was already {done}{who}: an approval is decided once."


def decide_approval(approval: Approval, *, user: Any, approve: bool, note: str = "") -> Approval:
    """Approve or deny ``approval`` as ``user`` (``Approval.objects.decide``: a pending, unexpired request, decided
    once). Once the transaction commits, the runtime's listener writes the decision to the ``mcp_app.audit`` log
    and wakes the parked call (``runtime.decisions``). ``DecisionRefused`` says why not: not an admin of the
    approval's tenant, the agent's own user, or no longer pending."""
    if not permissions.can_change(user, approval):
        raise DecisionRefused("Only the tenant's admins decide its approvals.", approval, forbidden=True)
    if not approval.may_be_decided_by(user):
        raise DecisionRefused(
            "You are the user this agent acts for: another admin of the tenant must decide its calls.",
            approval,
            forbidden=True,
        )
    if not Approval.objects.decide(approval, user=user, approve=approve, note=note):
        approval.refresh_from_db()
        raise DecisionRefused(_no_longer_pending(approval), approval)
    return approval
