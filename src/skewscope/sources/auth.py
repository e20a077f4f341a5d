"""Credentials and TLS settings for online sources, built so secrets cannot leak.

Secrets are wrapped in ``Secret`` whose str/repr are masked; ``HttpAuth``'s repr shows only which
mechanisms are configured. Error messages elsewhere never include request headers, and URLs are
shown through ``redact_url`` (user:password@ in a URL is a secret too).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from skewscope.errors import UsageError

DEFAULT_TOKEN_ENV = "SKEWSCOPE_PROM_TOKEN"
DEFAULT_PASSWORD_ENV = "SKEWSCOPE_PROM_PASSWORD"


class Secret:
    """A string that never shows itself in str(), repr() or f-strings."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _read_secret(*, env: str | None, file: str | Path | None, what: str) -> Secret | None:
    """From a file (first line, stripped) or an environment variable; file wins when both."""
    if file is not None:
        try:
            text = Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read {what} file {file}: {exc.strerror}") from None
        if not text:
            raise UsageError(f"{what} file {file} is empty")
        return Secret(text)
    if env is not None:
        value = os.environ.get(env, "").strip()
        return Secret(value) if value else None
    return None


@dataclass(frozen=True, repr=False)
class HttpAuth:
    """Bearer token or basic auth, plus TLS options (CA file, skip verify, client certificate)."""

    bearer_token: Secret | None = None
    username: str | None = None
    password: Secret | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    client_cert: str | None = None
    client_key: str | None = None

    @classmethod
    def from_options(
        cls,
        *,
        token_env: str | None = DEFAULT_TOKEN_ENV,
        token_file: str | Path | None = None,
        username: str | None = None,
        password_env: str | None = DEFAULT_PASSWORD_ENV,
        password_file: str | Path | None = None,
        ca_file: str | None = None,
        insecure_skip_verify: bool = False,
        client_cert: str | None = None,
        client_key: str | None = None,
    ) -> HttpAuth:
        """Build from CLI-style options; secrets come from files or environment variables only
        (never from the command line, where ``ps`` would show them)."""
        token = _read_secret(env=token_env, file=token_file, what="token")
        password = None
        if username is not None:
            password = _read_secret(env=password_env, file=password_file, what="password")
            if password is None:
                raise UsageError(
                    f"basic auth user {username!r} given but no password (set {password_env} "
                    "or give a password file)"
                )
        if token is not None and username is not None:
            raise UsageError("give either a bearer token or basic auth, not both")
        return cls(
            token, username, password, ca_file, insecure_skip_verify, client_cert, client_key
        )

    def headers(self) -> dict[str, str]:
        if self.bearer_token is not None:
            return {"Authorization": f"Bearer {self.bearer_token.reveal()}"}
        return {}

    def basic(self) -> tuple[str, str] | None:
        if self.username is not None and self.password is not None:
            return (self.username, self.password.reveal())
        return None

    def verify(self) -> ssl.SSLContext | bool:
        """httpx ``verify``: an SSL context carrying the CA file and client certificate."""
        if self.insecure_skip_verify and self.client_cert is None:
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert is not None:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` (headers, basic auth, TLS)."""
        return {"headers": self.headers(), "auth": self.basic(), "verify": self.verify()}

    def __repr__(self) -> str:
        parts = []
        if self.bearer_token is not None:
            parts.append("bearer_token=***")
        if self.username is not None:
            parts.append(f"username={self.username!r}, password=***")
        if self.ca_file:
            parts.append(f"ca_file={self.ca_file!r}")
        if self.insecure_skip_verify:
            parts.append("insecure_skip_verify=True")
        if self.client_cert:
            parts.append(f"client_cert={self.client_cert!r}")
        return f"HttpAuth({', '.join(parts)})"

    __str__ = __repr__


def redact_url(url: str) -> str:
    """``url`` without user:password@ and without a query string (tokens hide there too)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    if parts.username or parts.password:
        host = "***@" + host
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
