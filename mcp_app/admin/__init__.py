"""The Django admin as the control panel: operators (superusers) see everything, tenant staff their own tenants.

One module per aggregate (``tenancy``, ``servers``, ``catalog``, ``upstreams``, ``agents``, ``runtime``); every ModelAdmin and
inline is scoped by the mixins of ``base``, which ask ``mcp_app.permissions`` (the rules the REST API shares).
``tryit`` adds "Try it" to catalog entries; ``audit`` holds the tool-call log and the usage page.

How a tenant member gets in: a ``TenantMembership`` is all it takes (added here, through the API or with
``manage.py mcp_member``). It makes the user staff, and its role says which pages exist for them and which
tenants' objects they see (viewer) or edit (admin, owner); only owners manage memberships.
"""

from django.contrib import admin as _admin

from . import agents, apikeys, audit, catalog, oauth, runtime, servers, tenancy, upstreams  # noqa: F401  (registration side effects)

if _admin.site.index_template is None:
    # The index is mcp-host's dashboard (admin.dashboard); unfold's own admin/index.html would win by app order.
    _admin.site.index_template = "admin/mcp_app/index.html"
    _admin.site.index_title = "Dashboard"
