"""Configuration rules of upstream MCP servers, and what the catalog resolves their entries to.

The ``validate_*`` functions raise ``ValueError`` with a sentence for the user (the model, the admin, the API and
``mcp_upstream`` share them). ``endpoint_of`` makes an ``UpstreamEndpoint`` (secrets still encrypted, not in
``repr``); the ``Upstream*Target`` entries are run by ``mcp_app.federation``. See docs/upstreams.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .http_tools import validate_url

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")


def validate_upstream_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            "An upstream's name is 1 to 64 lowercase letters, digits, '-' and '_', starting with a letter or digit."
        )


def validate_prefix(prefix: str) -> None:
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError("A prefix is at most 64 letters, digits, '_', '-' and '.'.")


def validate_upstream_url(url: str) -> None:
    validate_url(url, kind="upstream")


# The protocol era mcp-host speaks to an upstream: "auto" negotiates (2026-07-28 where the upstream offers it, the
# handshake otherwise); a pinned era is for upstreams whose tools need what only one era carries (a tool written
# for the handshake elicits on its request's stream, which a 2026-07-28 exchange does not have).
ERA_AUTO = "auto"
ERA_HANDSHAKE = "2025-11-25"
ERA_MODERN = "2026-07-28"
ERAS = (ERA_AUTO, ERA_HANDSHAKE, ERA_MODERN)


def validate_era(era: str) -> None:
    if era not in ERAS:
        raise ValueError(f"The era is one of {', '.join(ERAS)}.")


# What an upstream's text may not bring into the catalog: ANSI escape sequences, C0/C1 controls (but tab and
# newline), zero-width and bidi-override characters (text an agent reads differently than an operator sees).
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)
# A tag that poses as the host's or the model's own (<system>, </instructions>, <|im_start|>...): kept, flagged.
_FAKE_TAG = re.compile(
    r"<\|?/?\s*(?:system|assistant|user|instructions?|im_start|im_end|tool_call)\b[^>]{0,40}\|?>", re.I
)


def clean_text(text: str) -> tuple[str, bool]:
    """``text`` without control, zero-width and bidi-override characters, and whether any were removed."""
    cleaned = _INVISIBLE.sub("", _ANSI.sub("", text))
    return cleaned, cleaned != text


def has_fake_tag(text: str) -> bool:
    """Whether ``text`` holds a tag that poses as a system or role marker (``<system>``, ``<|im_start|>``)."""
    return _FAKE_TAG.search(text) is not None


def prefixed(prefix: str, name: str) -> str:
    return f"{prefix}{name}"


@dataclass(frozen=True)
class UpstreamEndpoint:
    """How to reach one upstream: enough to open (or find in the pool) a connection, and no more.

    ``revision`` changes whenever the configuration does (the row's ``updated_at``), so a pooled connection made
    with old credentials is never reused after an edit."""

    pk: int
    tenant_id: int
    name: str
    url: str
    revision: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_seconds: float | None = None
    era: str = ERA_AUTO
    secret_headers: str = field(default="", repr=False)
    oauth_client_id: str = ""
    oauth_client_secret: str = field(default="", repr=False)
    oauth_issuer: str = ""
    oauth_scope: str = ""

    @property
    def key(self) -> tuple[int, str]:
        return (self.pk, self.revision)


@dataclass(frozen=True)
class UpstreamToolTarget:
    endpoint: UpstreamEndpoint
    remote_name: str


@dataclass(frozen=True)
class UpstreamResourceTarget:
    endpoint: UpstreamEndpoint


@dataclass(frozen=True)
class UpstreamPromptTarget:
    endpoint: UpstreamEndpoint
    remote_name: str


def endpoint_of(upstream: Any) -> UpstreamEndpoint:
    """What a connection to ``upstream`` (an ``mcp_app.models.Upstream``) needs, its secrets still encrypted."""
    return UpstreamEndpoint(
        pk=upstream.pk,
        tenant_id=upstream.tenant_id,
        name=upstream.name,
        url=upstream.url,
        revision=upstream.updated_at.isoformat() if upstream.updated_at else "",
        headers=tuple((str(key), str(value)) for key, value in (upstream.headers or {}).items()),
        timeout_seconds=upstream.timeout_seconds,
        era=upstream.era,
        secret_headers=upstream.secret_headers_encrypted,
        oauth_client_id=upstream.oauth_client_id,
        oauth_client_secret=upstream.oauth_client_secret_encrypted,
        oauth_issuer=upstream.oauth_issuer,
        oauth_scope=upstream.oauth_scope,
    )
