"""The rate-limit fields tenants, agents and tools share: ``rate_limit`` (requests per second; 0 unlimited; empty:
the ``RATE_LIMIT_PER_<SCOPE>`` setting) and ``rate_burst``, carried in the cached snapshots (docs/limits.md).
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models


def rate_limit_field(scope: str) -> models.FloatField:
    return models.FloatField(
        "requests per second",
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text=f"Rate limit of this {scope}; 0: unlimited; empty: the RATE_LIMIT_PER_{scope.upper()} setting. "
        "Requests over it are refused with HTTP 429 and Retry-After.",
    )


def rate_burst_field(scope: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(
        "burst",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=f"Requests of this {scope} that may arrive at once; empty: the RATE_BURST_PER_{scope.upper()} "
        "setting with the setting's rate, else twice the rate.",
    )
