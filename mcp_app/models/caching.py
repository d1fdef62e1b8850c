"""The shared invalidation log of ``mcp_app.invalidation.DatabaseInvalidation`` (several processes
without Redis): one row per published change, naming the cache keys it invalidates; rows are kept for a few
minutes, long enough for every process to have read them."""

from __future__ import annotations

from django.db import models


class CacheInvalidation(models.Model):
    """Cache keys a committed change invalidated, for the other processes to read."""

    keys = models.TextField("keys", help_text="Space-separated cache keys, e.g. 'token:12 server:3'.")
    origin = models.CharField(
        "origin", max_length=32, blank=True, help_text="The publishing process (it skips its own rows)."
    )
    created_at = models.DateTimeField("created", auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = "cache invalidation"
        verbose_name_plural = "cache invalidations"

    def __str__(self) -> str:
        return f"{self.keys} ({self.created_at:%Y-%m-%d %H:%M:%S})"
