"""The Django admin as the control panel: operators (superusers) see everything, tenant staff their own tenants.

One module per aggregate; every ModelAdmin and inline is scoped by the mixins of ``base``, which ask
``mcp_app.permissions`` (the rules the REST API shares). Design: docs/admin.md.
"""

from django.contrib import admin as _admin

from . import (  # noqa: F401  (registration side effects)
    agents,
    apikeys,
    approvals,
    audit,
    budgets,
    catalog,
    ledger,
    oauth,
    runtime,
    servers,
    tenancy,
    upstreams,
    versions,
)

if _admin.site.index_template is None:
    # The index is mcp-host's dashboard (admin.dashboard); unfold's own admin/index.html would win by app order.
    _admin.site.index_template = "admin/mcp_app/index.html"
    _admin.site.index_title = "Dashboard"
