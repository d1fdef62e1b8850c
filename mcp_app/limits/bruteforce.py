"""Brute force on the MCP endpoint: failed authentication throttled by what fails, a negative cache of unknown
tokens, and sampled failure logs. Design, and why a valid token is never refused: docs/limits.md, "Brute force".

- ``await failed(address, raw)``: count a failed authentication against the source address's bucket and, for a
  token of the shape ``mcp_<prefix>_<secret>``, its prefix's (``rates``' buckets: fleet-wide in Redis); once
  either is spent, block it in this process and return ``RateLimited`` (scope ``"address"`` or ``"token"``).
- ``blocked(address, raw)``: from memory, the refusal of a request that cannot authenticate (no token, a malformed
  or ``unknown`` one) from a blocked address or prefix; a token that may be valid is never refused here.
- ``unknown(raw)`` / ``remember_unknown(raw)``: the negative cache (``AUTH_NEGATIVE_CACHE_SECONDS``).
- ``log_failure(address, status)``: at most one line per ``AUTH_FAILURE_LOG_INTERVAL_SECONDS`` per process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from ..conf import mcp_settings, on_reload
from ..models.agents import TOKEN_SCHEME, token_digest
from ..observability import metrics
from ..protocol.errors import RateLimited
from . import rates

__all__ = ["blocked", "client_address", "failed", "log_failure", "remember_unknown", "unknown"]

logger = logging.getLogger("mcp_app.limits.auth")

MAX_ENTRIES = 50_000


class _Expiring:
    """A bounded, thread-safe map of keys to monotonic expiry times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: OrderedDict[str, float] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._until)  # one read: no lock needed

    def remaining(self, key: str) -> float:
        with self._lock:
            until = self._until.get(key)
            if until is None:
                return 0.0
            left = until - time.monotonic()
            if left <= 0:
                del self._until[key]
                return 0.0
            return left

    def put(self, key: str, seconds: float) -> None:
        with self._lock:
            self._until[key] = time.monotonic() + seconds
            self._until.move_to_end(key)
            while len(self._until) > MAX_ENTRIES:
                self._until.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._until.clear()


_blocked = _Expiring()
_unknown = _Expiring()


def client_address(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "-"


def blocked(address: str, raw: str | None) -> RateLimited | None:
    """The refusal, from memory, for a request that cannot authenticate while its address or token prefix is
    blocked; ``None`` for any request whose token may be valid (see the docstring)."""
    prefix = _prefix(raw) if raw else None
    if prefix is not None and not unknown(raw or ""):
        return None  # only a lookup can tell a valid token from a wrong one
    waits = {"address": _blocked.remaining(f"a:{address}")}
    if prefix is not None:
        waits["token"] = _blocked.remaining(f"t:{prefix}")
    scope = max(waits, key=waits.__getitem__)
    if not waits[scope]:
        return None
    metrics.auth_failed("throttled")
    return _refusal(scope, int(waits[scope] * 1000) + 1)


def _limit() -> rates.Limit:
    return rates.Limit(float(mcp_settings.AUTH_FAILURE_RATE), int(mcp_settings.AUTH_FAILURE_BURST))


def _refusal(scope: str, wait_ms: int) -> RateLimited:
    limit = _limit()
    return RateLimited(scope, max(1, wait_ms), limit.rate, limit.burst)


async def failed(address: str, raw: str | None) -> RateLimited | None:
    """Count a failed authentication of ``address`` presenting ``raw``; the refusal once the address or the
    token's prefix is over its burst, see the docstring."""
    buckets = [rates.Bucket("address", f"f:a:{address}", _limit())]
    prefix = _prefix(raw) if raw else None
    if prefix is not None:
        buckets.append(rates.Bucket("token", f"f:t:{prefix}", _limit()))
    try:
        await rates.take(buckets)
    except RateLimited as refused:
        key = f"a:{address}" if refused.scope == "address" else f"t:{prefix}"
        _blocked.put(key, refused.retry_after_ms / 1000)
        metrics.auth_failed("throttled")
        return _refusal(refused.scope, refused.retry_after_ms)
    metrics.auth_failed("refused")
    return None


def _prefix(raw: str) -> str | None:
    scheme, _, rest = raw.partition("_")
    prefix, _, secret = rest.partition("_")
    return prefix if scheme == TOKEN_SCHEME and prefix and secret else None


def unknown(raw: str) -> bool:
    """Whether this raw token was found unknown within ``AUTH_NEGATIVE_CACHE_SECONDS`` (no query)."""
    if not _unknown:
        return False  # the usual case: no digest computed
    prefix = _prefix(raw)
    if prefix is not None and _unknown.remaining(f"p:{prefix}"):
        return True
    return bool(_unknown.remaining(f"d:{token_digest(raw)}"))


def remember_unknown(raw: str) -> None:
    """Remember a token that matched no usable token (sync; one query for its prefix, on the failure path)."""
    from ..models import AgentToken

    seconds = float(mcp_settings.AUTH_NEGATIVE_CACHE_SECONDS)
    if seconds <= 0:
        return
    prefix = _prefix(raw)
    if prefix is not None and not AgentToken.objects.filter(prefix=prefix).exists():
        _unknown.put(f"p:{prefix}", seconds)
    else:
        _unknown.put(f"d:{token_digest(raw)}", seconds)


class _Sampler:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0
        self._suppressed = 0

    def admit(self) -> int | None:
        """``None`` to stay silent, else how many were suppressed before this one."""
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                self._suppressed += 1
                return None
            self._next = now + float(mcp_settings.AUTH_FAILURE_LOG_INTERVAL_SECONDS)
            suppressed, self._suppressed = self._suppressed, 0
            return suppressed


_failures = _Sampler()


def log_failure(address: str, status: int) -> None:
    suppressed = _failures.admit()
    if suppressed is not None:
        logger.warning(
            "authentication failed from %s (%d); %d more failures not logged since the last line",
            address,
            status,
            suppressed,
        )


@on_reload
def reset() -> None:
    _blocked.clear()
    _unknown.clear()
