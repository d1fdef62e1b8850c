"""A worker call's ``RequestContext``, from the Celery message alone (``call_context``: no query; the catalog from
this process's cache at the revision the client was served), or from a record loaded with its relations for a
message that does not carry the call (``loaded_spec``); the one ``InlineRunner`` its tools run with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from ...caching.identity import ServerEntry
from ...limits import metering
from ...models import ToolTask
from ...protocol.context import Principal, RequestContext, ToolRunner
from ...protocol.descriptors import ServerDescription
from .. import records
from ..message import CallSpec, WorkerMessage


@functools.cache
def inline_runner() -> ToolRunner:
    """The inline runner a worker runs its calls with: one per process, not one per call."""
    from ...runtime.execution import InlineRunner

    return InlineRunner()


@dataclass(frozen=True)
class _CatalogKey:
    """What ``resolve_catalog`` keys a server's catalog by, as the dispatching process saw it."""

    pk: int
    tenant_id: int
    catalog_version: int
    created_at: datetime


def call_context(spec: CallSpec, info: WorkerMessage) -> RequestContext:
    """The call's context from the Celery message alone (see the module docstring): no query."""
    from ...catalog.resolver import resolve_catalog

    server = spec.server
    key = _CatalogKey(
        pk=int(server.pk),
        tenant_id=int(server.tenant_pk),
        catalog_version=int(server.catalog_version),
        created_at=datetime.fromisoformat(str(server.created_at)),
    )
    return RequestContext(
        server=ServerDescription(
            server_id=str(server.server_id),
            name=str(server.name),
            title=str(server.title or ""),
            version=str(server.version or ""),
            instructions=str(server.instructions or ""),
            pk=key.pk,
        ),
        catalog=resolve_catalog(key),
        runner=inline_runner(),
        protocol_version=str(spec.protocol_version),
        era=info.era,
        principal=Principal(
            tenant=str(server.tenant_slug),
            agent_id=str(spec.agent_id),
            tenant_pk=key.tenant_id,
            agent_pk=int(spec.agent_pk),
            time_zone=str(server.time_zone),
        ),
        client_capabilities=dict(spec.client_capabilities or {}),
        log_level=info.log_level,
        meter=metering.METER,  # the call is metered here, where its tool runs
    )


def loaded_spec(record: ToolTask) -> CallSpec:
    """``records.call_spec`` of a record loaded with its server, tenant and agent (a message without one)."""
    server = record.server
    described = records.served(
        ServerEntry.of(server).description(),
        Principal(
            tenant=server.tenant.slug,
            agent_id=record.agent.agent_id,
            tenant_pk=server.tenant_id,
            agent_pk=record.agent_id,
            time_zone=server.tenant.time_zone,
        ),
    )
    assert described is not None  # every part of it is known here
    return records.call_spec(record, server=described[0], agent_id=described[1])
