"""The REST API of mcp_app (``/api/v1/``, Django REST framework): a front door onto the same models, managers
and permission rules as the admin, for automation; no business logic of its own.

Every view configures itself (authentication, permissions, pagination, filtering, exception handler, schema),
so a project's ``REST_FRAMEWORK`` settings do not change it. See docs/api.md.
"""
