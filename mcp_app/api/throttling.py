"""How often one API key (``API_RATE_PER_KEY``) and one user (``API_RATE_PER_USER``) may call the API: DRF's
``SimpleRateThrottle`` on the Django cache named by ``API_THROTTLE_CACHE``, rates read from ``mcp_settings``
(docs/api.md, "Throttling"). Anonymous requests never get this far.
"""

from __future__ import annotations

from typing import Any

from django.core.cache import BaseCache, caches
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from ..conf import mcp_settings
from ..models import ApiKey


class _SettingsRateThrottle(SimpleRateThrottle):
    setting = ""  # the MCP_APP key of this throttle's rate

    @property
    def cache(self) -> BaseCache:  # type: ignore[override]  # DRF's is a class attribute: the default cache
        return caches[mcp_settings.API_THROTTLE_CACHE]

    def get_rate(self) -> str | None:
        rate: str | None = getattr(mcp_settings, self.setting)
        return rate

    def wait(self) -> float | None:
        # DRF answers None when the history holds more requests than the rate allows (the rate was lowered):
        # the client still learns when the oldest one leaves the window.
        waited = super().wait()
        if waited is None and self.history:
            return max(0.0, self.duration - (self.now - self.history[-1]))  # type: ignore[attr-defined]
        return waited


class ApiKeyRateThrottle(_SettingsRateThrottle):
    scope = "mcp_api_key"
    setting = "API_RATE_PER_KEY"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        key = request.auth
        if not isinstance(key, ApiKey):
            return None
        # The pk with the key's random display prefix: unique even across databases that reuse primary keys.
        return self.cache_format % {"scope": self.scope, "ident": f"{key.pk}-{key.prefix}"}


class UserRateThrottle(_SettingsRateThrottle):
    scope = "mcp_api_user"
    setting = "API_RATE_PER_USER"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}
