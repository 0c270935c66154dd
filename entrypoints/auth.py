"""API keys -> tenants.

``serve.api_keys`` maps each key to the tenant it acts for. A request carries
its key as ``Authorization: Bearer KEY`` (what the OpenAI client sends) or
``X-API-Key: KEY``. With no keys configured auth is off and every request acts
for the ``default`` tenant (fine on loopback, never on a network).

A key written ``env:NAME`` in the config is read from the environment variable
``NAME`` at startup, so the config file itself need not hold secrets (mount a
Kubernetes Secret as environment variables, for instance).

Keys are kept only as SHA-256 digests and compared in constant time against
every configured key, so the time a check takes says nothing about which key,
or how much of one, matched.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from agentctx.kv_store.errors import InvalidInputError
from agentctx.kv_store.records import validate_id

__all__ = ["ApiKeyAuth", "DEFAULT_TENANT", "MIN_KEY_CHARS"]

DEFAULT_TENANT = "default"
MIN_KEY_CHARS = 16
_MAX_KEY_CHARS = 512


class ApiKeyAuth:
    """Resolve the tenant of a request from its key; ``None`` means refuse (401)."""

    def __init__(self, api_keys: dict[str, str] | None = None, *, min_key_chars: int = MIN_KEY_CHARS):
        self._keys: list[tuple[bytes, str]] = []
        for key, tenant in (api_keys or {}).items():
            if key.startswith("env:"):
                var = key[4:]
                key = os.environ.get(var, "")
                if not key:
                    raise ValueError(f"serve.api_keys: environment variable {var!r} (for tenant {tenant!r}) is not set")
            if len(key) < min_key_chars or len(key) > _MAX_KEY_CHARS:
                raise ValueError(f"serve.api_keys: the key for tenant {tenant!r} must have "
                                 f"{min_key_chars}..{_MAX_KEY_CHARS} characters")
            try:
                validate_id(tenant, "tenant")
            except InvalidInputError as exc:
                raise ValueError(f"serve.api_keys: {exc}") from None
            self._keys.append((self._digest(key), tenant))

    @staticmethod
    def _digest(key: str) -> bytes:
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    @property
    def tenants(self) -> set[str]:
        return {t for _, t in self._keys}

    @staticmethod
    def key_from_headers(authorization: str | None, x_api_key: str | None = None) -> str | None:
        if authorization:
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
        if x_api_key and x_api_key.strip():
            return x_api_key.strip()
        return None

    def tenant_for_key(self, key: str | None) -> str | None:
        if not self.enabled:
            return DEFAULT_TENANT
        if not key or len(key) > _MAX_KEY_CHARS:
            return None
        digest = self._digest(key)
        found = None
        for known, tenant in self._keys:  # no early exit: constant work per request
            if hmac.compare_digest(digest, known):
                found = tenant
        return found

    def tenant_for(self, authorization: str | None, x_api_key: str | None = None) -> str | None:
        """The tenant of a request's headers, or None when auth is on and the key is missing/unknown."""
        return self.tenant_for_key(self.key_from_headers(authorization, x_api_key))
