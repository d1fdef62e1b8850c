"""403 and 404 pages of the admin in the admin's own frame: ``permission_denied`` and ``page_not_found`` are
Django error handlers a project sets as ``handler403`` / ``handler404`` (``mcp_host.urls`` does). Under the admin
they render ``admin/mcp_app/error.html`` with the status kept; anywhere else they answer as Django's defaults.
The message never says whether another tenant's object exists.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views import defaults


def _in_admin(request: HttpRequest) -> bool:
    try:
        return request.path.startswith(reverse(f"{admin.site.name}:index"))
    except NoReverseMatch:
        return False


def _admin_error(request: HttpRequest, status: int, title: str, message: str) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": title, "message": message, "status": status}
    return render(request, "admin/mcp_app/error.html", context, status=status)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's ``handler403``: the admin's frame under the admin, Django's default elsewhere."""
    if not _in_admin(request):
        return defaults.permission_denied(request, exception)
    return _admin_error(
        request, 403, "Not allowed", "Your role in this tenant does not allow this page or this change."
    )


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's ``handler404``: the admin's frame under the admin, Django's default elsewhere."""
    if not _in_admin(request):
        return defaults.page_not_found(request, exception)
    return _admin_error(request, 404, "Not found", "There is nothing here, or nothing you may see.")
