"""``manage.py mcp_upstream add|set|sync|list|remove``: a tenant's upstream MCP servers, federated into its catalog.

``add`` is all or nothing (``operations.add_upstream``): a first sync that fails registers nothing; headers given
here are secret headers. ``sync`` returns once the changes it held were sent to the tenant's alert webhook.
``remove`` deletes the imported entries too. Usage: docs/upstreams.md.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_app import alert_hooks
from mcp_app.definitions.http_tools import display_url
from mcp_app.definitions.upstreams import ERA_AUTO, ERAS
from mcp_app.federation.sync import sync_upstream
from mcp_app.models import Prompt, Resource, Tool, Upstream
from mcp_app.operations import add_upstream, find_upstream, set_upstream, upstreams

from ..base import OperationCommand, when

ERA_HELP = (
    "Protocol era spoken to the upstream: auto (2026-07-28 where offered, else the handshake), 2025-11-25 (always "
    "the handshake: tools that elicit or sample the handshake way need it), or 2026-07-28."
)
ON_CHANGE_HELP = (
    "What a sync does when the upstream adds, removes or changes an entry after its first sync: publish (served at "
    "once), hold (the approved definitions are served until someone publishes the server's draft) or block (as "
    "hold, and the changed entries are not served meanwhile)."
)


def _entries(upstream: Upstream) -> dict[str, list[str]]:
    return {
        "tools": list(Tool.objects.filter(upstream=upstream).order_by("name").values_list("name", flat=True)),
        "resources": list(Resource.objects.filter(upstream=upstream).order_by("uri").values_list("uri", flat=True)),
        "prompts": list(Prompt.objects.filter(upstream=upstream).order_by("name").values_list("name", flat=True)),
    }


_POLICIES: dict[str, str] = {
    Upstream.OnChange.PUBLISH: "publishes its changes at once",
    Upstream.OnChange.HOLD: "holds its changes for approval",
    Upstream.OnChange.BLOCK: "holds its changes for approval and stops serving the changed entries meanwhile",
}


class Command(OperationCommand):
    help = "Register, sync, list or remove a tenant's upstream MCP servers (their entries join its catalog)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="add|set|sync|list|remove")
        add = actions.add_parser(
            "add",
            help="Register an upstream, import its catalog and bind it to servers; nothing is kept if that fails.",
        )
        add.add_argument("--tenant", required=True, help="Tenant slug.")
        add.add_argument("--name", required=True, help="Upstream name: lowercase letters, digits, '-' and '_'.")
        add.add_argument("--url", required=True, help="The upstream's Streamable HTTP endpoint (http:// or https://).")
        add.add_argument(
            "--prefix", default="", help="Put before the names it contributes: 'gh_' lists its 'search' as 'gh_search'."
        )
        add.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="'Name: value'",
            help="A request header sent to the upstream (repeatable), e.g. 'Authorization: Bearer …'. Stored as a "
            "SECRET header: encrypted, write-only, never printed or shown again.",
        )
        add.add_argument(
            "--bind",
            action="append",
            default=[],
            metavar="SERVER_ID",
            help="Expose the whole upstream (every entry, also those later syncs add) on this server of the "
            "tenant (repeatable).",
        )
        add.add_argument("--era", default=ERA_AUTO, choices=ERAS, help=ERA_HELP)
        add.add_argument(
            "--on-change", default=Upstream.OnChange.HOLD, choices=Upstream.OnChange.values, help=ON_CHANGE_HELP
        )
        add.add_argument("--json", action="store_true", help="Print one JSON object and nothing else.")
        change = actions.add_parser("set", help="Change an upstream's settings.")
        sync = actions.add_parser("sync", help="Re-read the upstream's catalog now and print what changed.")
        remove = actions.add_parser("remove", help="Delete an upstream and every entry it imported.")
        for command in (change, sync, remove):
            command.add_argument("--tenant", required=True, help="Tenant slug.")
            command.add_argument("--name", required=True, help="Upstream name.")
        change.add_argument("--era", choices=ERAS, help=ERA_HELP)
        change.add_argument("--on-change", choices=Upstream.OnChange.values, help=ON_CHANGE_HELP)
        change.add_argument("--json", action="store_true", help="Print the upstream's settings as one JSON object.")
        sync.add_argument("--json", action="store_true", help="Print the sync report as one JSON object.")
        listing = actions.add_parser("list", help="Upstreams with their entries, last sync and bound servers.")
        listing.add_argument("--tenant", help="Only this tenant's upstreams.")
        listing.add_argument("--json", action="store_true", help="Print a JSON list.")

    def _report(self, report: Any, lists: list[tuple[str, list[str]]]) -> None:
        """Each titled list of names, then what the sync skipped and flagged (on stderr)."""
        for title, names in lists:
            self.stdout.write(f"{title} ({len(names)}):")
            for name in names:
                self.stdout.write(f"  {name}")
        for title, reasons in (("Skipped", report.skipped), ("Flagged", report.flagged)):
            for reason in reasons:
                self.stderr.write(f"{title}: {reason}")

    def handle_add(self, options: dict[str, Any]) -> None:
        registration = add_upstream(
            options["tenant"],
            options["name"],
            options["url"],
            prefix=options["prefix"],
            secret_headers=options["header"],
            bind_to=options["bind"],
            era=options["era"],
            on_change=options["on_change"],
        )
        upstream, report = registration.upstream, registration.report
        bound = [server.server_id for server in registration.servers]
        if self.emit(
            options,
            {
                "tenant": upstream.tenant.slug,
                "name": upstream.name,
                "url": display_url(upstream.url),
                "prefix": upstream.prefix,
                "era": upstream.era,
                "on_change": upstream.on_change,
                "protocol_version": upstream.protocol_version,
                "server_info": upstream.server_info,
                "secret_headers": list(upstream.secret_header_names),
                "entries": _entries(upstream),
                "bound": bound,
                "sync": report.as_dict(),
            },
        ):
            return
        info = upstream.server_info or {}
        self.stdout.write(
            f"Registered upstream {upstream.name} of {upstream.tenant.slug} ({display_url(upstream.url)}, "
            f"{info.get('name') or 'unnamed server'}, protocol {upstream.protocol_version})."
        )
        self._report(report, [(kind.capitalize(), names) for kind, names in _entries(upstream).items()])
        if upstream.secret_header_names:
            self.stdout.write(f"Secret headers (stored encrypted): {', '.join(upstream.secret_header_names)}")
        self.stdout.write(f"Bound to: {', '.join(bound)}" if bound else "Not bound to any server yet.")

    def handle_set(self, options: dict[str, Any]) -> None:
        upstream = set_upstream(options["tenant"], options["name"], era=options["era"], on_change=options["on_change"])
        if self.emit(
            options,
            {
                "tenant": upstream.tenant.slug,
                "name": upstream.name,
                "era": upstream.era,
                "on_change": upstream.on_change,
            },
        ):
            return
        if options["era"] is not None:
            self.stdout.write(f"Upstream {upstream.name} of {upstream.tenant.slug} now speaks era {upstream.era}.")
        if options["on_change"] is not None:
            self.stdout.write(
                f"Upstream {upstream.name} of {upstream.tenant.slug} now {_POLICIES[upstream.on_change]}."
            )

    def handle_sync(self, options: dict[str, Any]) -> None:
        upstream = find_upstream(options["tenant"], options["name"])
        report = sync_upstream(upstream)
        alert_hooks.worker.wait_idle(alert_hooks.longest_delivery())  # changes it held reach the webhook first
        if self.emit(options, report.as_dict()):
            if not report.ok:
                raise CommandError(f"sync of {upstream.name!r} failed: {report.error}")
            return
        if not report.ok:
            raise CommandError(f"sync of {upstream.name!r} failed (its entries are kept as they were): {report.error}")
        changes = (("Added", report.added), ("Updated", report.updated), ("Removed", report.removed))
        self._report(report, [(title, names) for title, names in changes if names])
        if not report.changed:
            self.stdout.write("Nothing changed.")

    def handle_list(self, options: dict[str, Any]) -> None:
        rows = [
            {
                "tenant": upstream.tenant.slug,
                "name": upstream.name,
                "url": display_url(upstream.url),
                "prefix": upstream.prefix,
                "enabled": upstream.enabled,
                "entries": upstream.tool_count + upstream.resource_count + upstream.prompt_count,  # type: ignore[attr-defined]
                "last_synced_at": when(upstream.last_synced_at),
                "last_sync_error": upstream.last_sync_error,
                "on_change": upstream.on_change,
                "bound": sorted(binding.server.server_id for binding in upstream.bindings.all()),
            }
            for upstream in upstreams(options["tenant"])
        ]
        if self.emit(options, rows):
            return
        if not rows:
            self.stdout.write("No upstreams.")
        for row in rows:
            state = f"error: {row['last_sync_error']}" if row["last_sync_error"] else "ok"
            self.stdout.write(
                f"{row['name']}\t{row['tenant']}\t{row['url']}\tprefix {row['prefix'] or '-'}\t"
                f"{row['entries']} entries\tlast sync {row['last_synced_at'] or 'never'} ({state})\t"
                f"bound to {', '.join(row['bound']) or '-'}" + ("" if row["enabled"] else "\tdisabled")
            )

    def handle_remove(self, options: dict[str, Any]) -> None:
        upstream = find_upstream(options["tenant"], options["name"])
        entries = sum(len(names) for names in _entries(upstream).values())
        upstream.delete()
        self.stdout.write(f"Removed upstream {options['name']} of {options['tenant']} and its {entries} entries.")
