"""Secrets stored encrypted at rest (a tenant's OIDC client secret): Fernet (AES-128-CBC with
HMAC-SHA256, from `cryptography`), never home-made crypto.

The key is GAVEL_ENCRYPTION_KEY (a Fernet key) when set, else derived from SECRET_KEY with
HKDF-SHA256 under a purpose of its own, so the derived key is not SECRET_KEY itself nor any
key Django derives from it.
"""

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

PURPOSE = b"gavel: secrets at rest v1"


@functools.cache
def _fernet(configured: str, secret_key: str) -> Fernet:
    if configured:
        try:
            return Fernet(configured.encode())
        except ValueError:
            raise ImproperlyConfigured(
                "GAVEL_ENCRYPTION_KEY must be a Fernet key: 32 url-safe base64-encoded bytes"
            ) from None
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(derived))


def _key() -> Fernet:
    return _fernet(settings.GAVEL_ENCRYPTION_KEY, settings.SECRET_KEY)


def encrypt(plain: str) -> str:
    return _key().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str | None:
    """The plain text, or None when the key that encrypted it is no longer the key."""
    try:
        return _key().decrypt(token.encode()).decode()
    except InvalidToken:
        return None
