"""The Django admin as the control panel: operators (superusers) see everything, tenant staff their own tenants.

One module per aggregate (``tenancy``, ``servers``, ``catalog``, ``upstreams``, ``agents``, ``runtime``); every ModelAdmin and
inline is scoped by the mixins of ``base``, which ask ``mcp_app.permissions`` (the rules the REST API shares).
``tryit`` adds "Try it" to catalog entries; ``audit`` holds the tool-call log and the usage page.

How a tenant member gets in: a staff user with the Django model permissions of ``mcp_app`` (the
``MCP tenant staff`` group, ``manage.py mcp_tenant_staff_group USERNAME``) and a ``TenantMembership``. The
permissions say which pages exist for them; the membership's role says which tenants' objects they see (viewer)
or edit (admin, owner), and only owners manage memberships.
"""

from django.contrib import admin as _admin

from . import agents, apikeys, audit, catalog, oauth, runtime, servers, tenancy, upstreams  # noqa: F401  (registration side effects)

if _admin.site.index_template is None:
    # The index is mcp-host's dashboard (admin.dashboard); unfold's own admin/index.html would win by app order.
    _admin.site.index_template = "admin/mcp_app/index.html"
    _admin.site.index_title = "Dashboard"
