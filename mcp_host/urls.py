"""Django URLs of the reference deployment (the MCP endpoints are routed in ``asgi.py``)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
