"""Encryption of secrets at rest (the secret headers of http tools), with key rotation.

``encrypt``, ``decrypt`` and ``rotate``: Fernet through a ``MultiFernet`` of ``MCP_APP["SECRET_KEYS"]`` (the first
key encrypts, every key decrypts, ``rotate`` re-encrypts under the first), any high-entropy string stretched with
HKDF-SHA256; without ``SECRET_KEYS``, keys derived from Django's ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS``.
Plaintext never leaves this module except as the return value of ``decrypt``; nothing here logs.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .conf import mcp_settings

__all__ = ["InvalidToken", "decrypt", "encrypt", "rotate"]

_INFO = b"mcp_app secrets at rest v1"


def _fernet_key(secret: str) -> bytes:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"mcp_app.crypto", info=_INFO).derive(secret.encode())
    return base64.urlsafe_b64encode(derived)


@functools.lru_cache(maxsize=4)
def _multi(secrets: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(_fernet_key(secret)) for secret in secrets])


def _configured() -> tuple[str, ...]:
    keys = tuple(mcp_settings.SECRET_KEYS)
    if keys:
        return keys
    from django.conf import settings

    return (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ()))


def encrypt(plaintext: bytes) -> str:
    return _multi(_configured()).encrypt(plaintext).decode("ascii")


def decrypt(token: str) -> bytes:
    """The plaintext; raises ``InvalidToken`` if no configured key opens it (or it was tampered with)."""
    return _multi(_configured()).decrypt(token.encode("ascii"))


def rotate(token: str) -> str:
    """The same plaintext encrypted under the first (newest) key."""
    return _multi(_configured()).rotate(token.encode("ascii")).decode("ascii")
