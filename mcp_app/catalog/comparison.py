"""What the admin and the API show of a server's catalog versions: which catalog a front door means by ``draft``
or a version number (``snapshot``), the diff between two of them (``compare``), and the diff of one held upstream
change (``change_diff``). Both front doors call these, so "the draft", "the published version" and "a diff" mean
the same on each.

Not owned here: publishing, rollback, the draft itself and the diff rules (``catalog.versions``), who may see a
server (the caller scopes it first: ``mcp_app.permissions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..models import CatalogChange, CatalogVersion, McpServer
from .versions import EntryDiff, diff, draft_entries, entries_digest

DRAFT: Literal["draft"] = "draft"

#: A side of a comparison: a version number of the server, or its draft.
Side = int | Literal["draft"]


class UnknownVersion(LookupError):
    """The server has no version of this number (or it is another server's)."""


def parse_side(raw: str | None, default: Side | None) -> Side | None:
    """``draft`` or a version number, as a query or form value gives it; ``raw`` empty or ``None``: ``default``.
    ``ValueError`` for anything else."""
    if raw is None or raw == "":
        return default
    if raw == DRAFT:
        return DRAFT
    if raw.isdigit() and len(raw) <= 9 and int(raw) > 0:
        return int(raw)
    raise ValueError('A version number or "draft".')


@dataclass(frozen=True)
class Snapshot:
    """One side of a comparison: a version, the draft, or nothing (no version published yet)."""

    label: str
    number: int | None
    digest: str
    entries: list[dict[str, Any]]

    @property
    def is_draft(self) -> bool:
        return self.label == DRAFT

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.number if self.number is not None else self.label, "digest": self.digest}


def nothing() -> Snapshot:
    """The side before a server's first version: no entries."""
    return Snapshot(label="nothing published", number=None, digest=entries_digest([]), entries=[])


def published_side(server: McpServer) -> Side | None:
    """The number of the version the server serves (``None``: none published yet)."""
    version = server.published_version
    return version.number if version is not None else None


def snapshot(server: McpServer, side: Side | None) -> Snapshot:
    """The catalog ``side`` names for ``server`` (``None``: nothing); ``UnknownVersion`` for a number it lacks."""
    if side is None:
        return nothing()
    if side == DRAFT:
        entries = draft_entries(server)
        return Snapshot(label=DRAFT, number=None, digest=entries_digest(entries), entries=entries)
    version = CatalogVersion.objects.filter(server=server, number=side).first()
    if version is None:
        raise UnknownVersion(f"{server.server_id} has no version {side}.")
    return Snapshot(label=f"v{version.number}", number=version.number, digest=version.digest, entries=version.entries)


@dataclass(frozen=True)
class Comparison:
    """What changes from ``old`` to ``new``: entries added, removed and changed field by field."""

    old: Snapshot
    new: Snapshot
    changes: list[EntryDiff]

    @property
    def counts(self) -> dict[str, int]:
        kinds = ("added", "removed", "changed")
        return {kind: sum(1 for change in self.changes if change.change == kind) for kind in kinds}

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.old.as_dict(),
            "to": self.new.as_dict(),
            "identical": self.old.digest == self.new.digest,
            "counts": self.counts,
            "changes": [change.as_dict() for change in self.changes],
        }


def compare(server: McpServer, old: Side | None, new: Side | None) -> Comparison:
    """The diff of ``server``'s catalog from ``old`` to ``new`` (``UnknownVersion`` for a number it lacks)."""
    before, after = snapshot(server, old), snapshot(server, new)
    return Comparison(old=before, new=after, changes=diff(before.entries, after.entries))


def change_diff(change: CatalogChange) -> list[EntryDiff]:
    """The diff of one held upstream change: its entry as the server publishes it, against the upstream's."""
    shape = {"list": change.list_name, "ref": change.ref, "upstream": change.upstream_id}
    old = [{**shape, "definition": change.old}] if change.old is not None else []
    new = [{**shape, "definition": change.new}] if change.new is not None else []
    return diff(old, new)
