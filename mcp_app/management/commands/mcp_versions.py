"""``manage.py mcp_versions list|diff|publish|rollback``: a server's catalog versions (docs/catalog-versions.md).

``list`` prints the server's versions, newest first, marking the one it serves. ``diff`` shows what changes from
version ``--against`` (default: the published one) to ``--version`` (default: the draft, what the rows say now).
``publish`` publishes the draft (or, with ``--version``, republishes that version); ``rollback`` republishes
``--version`` (default: the version before the published one). Both write nothing when the server already serves
that content. Every lookup is scoped by ``--tenant``: a server of another tenant is not found.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_app.catalog import versions
from mcp_app.models import CatalogVersion, McpServer
from mcp_app.operations import find_server

from ..base import OperationCommand, when

_MARKS = {"added": "+", "removed": "-", "changed": "~"}


def _row(version: CatalogVersion, published_pk: int | None) -> dict[str, Any]:
    return {
        "version": version.number,
        "digest": version.digest,
        "source": version.source,
        "rolled_back_to": version.rolled_back_to,
        "note": version.note,
        "entries": len(version.entries),
        "published": version.pk == published_pk,
        "created_by": version.created_by.get_username() if version.created_by else None,
        "created_at": when(version.created_at),
    }


def _version(server: McpServer, number: int) -> CatalogVersion:
    found = CatalogVersion.objects.filter(tenant_id=server.tenant_id, server=server, number=number).first()
    if found is None:
        raise CommandError(f"server {server.server_id!r} has no version {number}")
    return found


def _published(server: McpServer) -> CatalogVersion | None:
    if server.published_version_id is None:
        return None
    return CatalogVersion.objects.filter(tenant_id=server.tenant_id, pk=server.published_version_id).first()


class Command(OperationCommand):
    help = "List, compare, publish or roll back a server's catalog versions (see docs/catalog-versions.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="list|diff|publish|rollback")
        listing = actions.add_parser("list", help="The server's versions, newest first.")
        compare = actions.add_parser("diff", help="What changes from one version (or the published) to another.")
        publish = actions.add_parser("publish", help="Publish the draft, or republish --version.")
        rollback = actions.add_parser("rollback", help="Republish an earlier version (default: the one before).")
        for command in (listing, compare, publish, rollback):
            command.add_argument("--tenant", required=True, help="Tenant slug.")
            command.add_argument("--server", required=True, help="Server id (of the tenant).")
            command.add_argument("--json", action="store_true", help="Print JSON and nothing else.")
        compare.add_argument("--version", type=int, metavar="V", help="Compare to version V (default: the draft).")
        compare.add_argument(
            "--against", type=int, metavar="W", help="Compare from version W (default: the published version)."
        )
        publish.add_argument("--version", type=int, metavar="V", help="Republish version V instead of the draft.")
        publish.add_argument("--note", default="", help="Why (kept with the version).")
        rollback.add_argument(
            "--version", type=int, metavar="V", help="The version to republish (default: the one before the published)."
        )

    def handle_list(self, options: dict[str, Any]) -> None:
        server = find_server(options["tenant"], options["server"])
        rows = [
            _row(version, server.published_version_id)
            for version in CatalogVersion.objects.filter(tenant_id=server.tenant_id, server=server)
            .select_related("created_by")
            .order_by("-number")
        ]
        if self.emit(options, rows):
            return
        if not rows:
            self.stdout.write(f"{server.server_id}: no version published; it serves its draft.")
        for row in rows:
            mark = "*" if row["published"] else " "
            origin = f"{row['source']}" + (f" of v{row['rolled_back_to']}" if row["rolled_back_to"] else "")
            self.stdout.write(
                f"{mark} v{row['version']}  {row['created_at']}  {origin}  {row['digest'][:12]}  "
                f"{row['entries']} entries" + (f"  {row['note']}" if row["note"] else "")
            )

    def handle_diff(self, options: dict[str, Any]) -> None:
        server = find_server(options["tenant"], options["server"])
        if options["against"] is not None:
            old, old_name = _version(server, options["against"]).entries, f"v{options['against']}"
        else:
            published = _published(server)
            old = published.entries if published else []
            old_name = f"v{published.number} (published)" if published else "nothing published"
        if options["version"] is not None:
            new, new_name = _version(server, options["version"]).entries, f"v{options['version']}"
        else:
            new, new_name = versions.draft_entries(server), "draft"
        changes = versions.diff(old, new)
        if self.emit(
            options,
            {
                "server": server.server_id,
                "from": options["against"] if options["against"] is not None else _number(_published(server)),
                "to": options["version"] if options["version"] is not None else "draft",
                "changes": [change.as_dict() for change in changes],
            },
        ):
            return
        self.stdout.write(f"{server.server_id}: {old_name} -> {new_name}, {len(changes)} change(s)")
        for change in changes:
            fields = f": {', '.join(field.field for field in change.fields)}" if change.fields else ""
            self.stdout.write(f"  {_MARKS[change.change]} {change.list_name} {change.key}{fields}")

    def handle_publish(self, options: dict[str, Any]) -> None:
        server = find_server(options["tenant"], options["server"])
        before = server.published_version_id
        if options["version"] is not None:
            _version(server, options["version"])
            version = versions.rollback(server, options["version"])
        else:
            version = versions.publish(server, note=options["note"])
        self._report(options, server, version, before)

    def handle_rollback(self, options: dict[str, Any]) -> None:
        server = find_server(options["tenant"], options["server"])
        before = server.published_version_id
        number = options["version"]
        if number is None:
            published = _published(server)
            if published is None or published.number <= 1:
                raise CommandError(
                    f"server {server.server_id!r} has no version before the published one to roll back to"
                )
            number = published.number - 1
        _version(server, number)
        self._report(options, server, versions.rollback(server, number), before)

    def _report(self, options: dict[str, Any], server: McpServer, version: CatalogVersion, before: int | None) -> None:
        written = version.pk != before
        if self.emit(options, {**_row(version, version.pk), "server": server.server_id, "written": written}):
            return
        if written:
            self.stdout.write(f"Published {server.server_id} v{version.number} (digest {version.short_digest}).")
        else:
            self.stdout.write(f"{server.server_id} already serves this content as v{version.number}; nothing written.")


def _number(version: CatalogVersion | None) -> int | None:
    return version.number if version is not None else None
