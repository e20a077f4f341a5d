"""Credentials and TLS settings for online sources, built so secrets cannot leak.

Secrets are wrapped in ``Secret`` whose str/repr are masked; ``HttpAuth``'s repr shows only which
mechanisms are configured. Every secret made in this process is also remembered, so ``scrub``
can mask it (and ``Authorization`` values, ``user:password@`` and token query parameters) in any
text a server echoes back before that text reaches a message or a note. URLs are shown through
``redact_url``.

Where credentials go: the default environment variable ``SKEWSCOPE_PROM_TOKEN`` is *ambient* (set
once, for Prometheus); it is sent to the Prometheus URL only, never to ``--scrape`` targets.
Scrape targets get only credentials the user named (``--token-env``, ``--token-file``, ``--user``).
"""

from __future__ import annotations

import base64
import functools
import os
import re
import ssl
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from skewscope.errors import MAX_MESSAGE_CHARS, UsageError, one_line
from skewscope.settings import SECRET_FILE_BYTES
from skewscope.smallfile import read_small

DEFAULT_TOKEN_ENV = "SKEWSCOPE_PROM_TOKEN"
DEFAULT_PASSWORD_ENV = "SKEWSCOPE_PROM_PASSWORD"
MIN_SCRUB_LEN = 4  # shorter "secrets" would mask ordinary letters in every message

_KNOWN: set[str] = set()  # every secret value seen in this process, for ``scrub``


class Secret:
    """A string that never shows itself in str(), repr() or f-strings."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        if len(value) >= MIN_SCRUB_LEN:
            _KNOWN.add(value)

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
    """From a file (stripped) or an environment variable; file wins when both. The file is
    read by the one small-file reader: a regular file (a FIFO would hang), at most
    ``SECRET_FILE_BYTES``, UTF-8; anything else is one usage line (exit 2)."""
    if file is not None:
        text = read_small(
            file, f"--{what}-file {file}", limit=SECRET_FILE_BYTES, error=UsageError
        ).strip()
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
    token_ambient: bool = False  # the token came from the default env variable, not an option

    @classmethod
    def from_options(
        cls,
        *,
        token_env: str | None = None,
        token_file: str | Path | None = None,
        username: str | None = None,
        password_env: str | None = None,
        password_file: str | Path | None = None,
        ca_file: str | None = None,
        insecure_skip_verify: bool = False,
        client_cert: str | None = None,
        client_key: str | None = None,
        ambient_envs: bool = True,
    ) -> HttpAuth:
        """Build from CLI-style options; secrets come from files or environment variables only
        (never from the command line, where ``ps`` would show them).

        With ``ambient_envs`` the default variables are read when no variable is named
        (``SKEWSCOPE_PROM_TOKEN``, and ``SKEWSCOPE_PROM_PASSWORD`` for ``--user``); a token read
        that way is marked ambient. Missing TLS files are a UsageError here, before any request.
        """
        ambient = ambient_envs and token_env is None and token_file is None
        token = _read_secret(
            env=DEFAULT_TOKEN_ENV if ambient else token_env, file=token_file, what="token"
        )
        password = None
        if username is not None:
            pw_env = password_env or (DEFAULT_PASSWORD_ENV if ambient_envs else None)
            password = _read_secret(env=pw_env, file=password_file, what="password")
            if password is None:
                raise UsageError(
                    f"basic auth user {username!r} given but no password (set "
                    f"{pw_env or DEFAULT_PASSWORD_ENV} or give a password file)"
                )
            Secret(base64.b64encode(f"{username}:{password.reveal()}".encode()).decode())
        if token is not None and username is not None:
            if ambient:  # the ambient token yields to basic auth the user asked for
                token = None
            else:
                raise UsageError("give either a bearer token or basic auth, not both")
        files = (("--ca-file", ca_file), ("--cert", client_cert), ("--key", client_key))
        for option, path in files:
            if path is not None and not Path(path).is_file():
                raise UsageError(f"{option} {path}: no such file")
        if client_key is not None and client_cert is None:
            raise UsageError("--key needs --cert (the client certificate it belongs to)")
        auth = cls(
            token,
            username,
            password,
            ca_file,
            insecure_skip_verify,
            client_cert,
            client_key,
            token_ambient=token is not None and ambient,
        )
        if ca_file is not None or client_cert is not None:
            auth.verify()  # unreadable or malformed PEM files fail now, as one line
        return auth

    def without_ambient(self) -> HttpAuth:
        """The same settings without an ambient token (for targets other than Prometheus)."""
        if not self.token_ambient:
            return self
        return replace(self, bearer_token=None, token_ambient=False)

    @property
    def has_credentials(self) -> bool:
        return self.bearer_token is not None or self.username is not None

    def headers(self) -> dict[str, str]:
        if self.bearer_token is not None:
            return {"Authorization": f"Bearer {self.bearer_token.reveal()}"}
        return {}

    def basic(self) -> tuple[str, str] | None:
        if self.username is not None and self.password is not None:
            return (self.username, self.password.reveal())
        return None

    def verify(self, tls: bool = True) -> ssl.SSLContext | bool:
        """httpx ``verify``: an SSL context carrying the CA file and client certificate.

        ``tls=False`` is for a client that only speaks plain HTTP (its base URL is http://):
        without files, the system CAs are not loaded for it (~25 ms on the critical path of an
        online run) and a context that trusts no certificate stands in, so no TLS connection
        could pass unverified.
        """
        if self.insecure_skip_verify and self.client_cert is None:
            return False
        if self.ca_file is None and self.client_cert is None:
            return _system_context() if tls else _trusting_nothing()
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"--ca-file {self.ca_file}: not a readable PEM CA bundle ({_reason(exc)})"
            ) from None
        if self.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert is not None:
            try:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(
                    f"--cert {self.client_cert}"
                    + (f" / --key {self.client_key}" if self.client_key else "")
                    + f": not a readable PEM certificate and key ({_reason(exc)})"
                ) from None
        return ctx

    def client_kwargs(self, tls: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` (headers, basic auth, TLS: ``verify``)."""
        return {"headers": self.headers(), "auth": self.basic(), "verify": self.verify(tls)}

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


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


def has_scheme(url: str) -> bool:
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", url) is not None


def normalise_url(url: str, option: str) -> tuple[str, str | None]:
    """``url`` with ``http://`` added when it has no scheme, and the note saying so (or None).

    Only http and https are accepted. A ``user:password@`` in the URL becomes a known secret.
    """
    text = url.strip()
    note = None
    if not has_scheme(text):
        text = "http://" + text
        note = f"{option} {redact_url(text)} has no scheme; http:// assumed"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise UsageError(f"{option}: {redact_url(text)} is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise UsageError(f"{option}: URL scheme must be http or https, got {parts.scheme!r}")
    if not parts.hostname:
        raise UsageError(f"{option}: {redact_url(text)} has no host")
    if parts.password:
        Secret(parts.password)
    return text, note


# Every pattern runs in linear time by construction: a pattern starts only at a token's start
# (a lookbehind), every repeat that must be followed by something is bounded (a credential is at
# most MAX_CREDENTIAL characters), no repeat holds another, and an unbounded repeat is only a
# pattern's last element (it always matches, so nothing backtracks into it). A scan that fails
# therefore costs at most a constant per start (tests/unit/test_scrub.py checks the shapes).
MAX_CREDENTIAL = 1024
_C = MAX_CREDENTIAL
_SECRET_PATTERNS = (
    # an echoed header line, and "Bearer/Basic <credential>" (a credential has a digit or sign,
    # so prose such as "basic authentication" is left alone)
    (re.compile(r"(?i)\b(authorization[\"']?\s{0,8}[:=]\s{0,8}[\"']?)[^\"'\r\n,;}]+"), r"\1***"),
    (
        re.compile(
            rf"(?i)\b(bearer|basic)(?:\s{{1,8}}|%20|\+)(?=[\w.~+/=-]{{0,{_C}}}[\d.~+/=-])"
            r"[\w.~+/=-]{6,}"
        ),
        r"\1 ***",
    ),
    # user:password@ in URLs, with or without a scheme
    (
        re.compile(rf"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{{0,{_C}}}://)[^/\s@]{{1,{_C}}}@"),
        r"\1***@",
    ),
    (re.compile(rf"(?<![\w/@.:%~+-])[\w.%~+-]{{1,{_C}}}:[^\s/@]{{1,{_C}}}@(?=[\w\[])"), "***@"),
    # token-ish query parameters and key=value pairs
    (
        re.compile(
            r"(?i)\b((?:access_|id_|auth_|api_?)?(?:token|key|password|passwd|secret)=)"
            r"[^&\s\"',;]+"
        ),
        r"\1***",
    ),
)


def scrub(text: str) -> str:
    """``text`` with every known secret and anything shaped like a credential masked as ***.
    Linear in ``len(text)`` (see ``_SECRET_PATTERNS``); text only shown in part should go
    through ``quoted``, which scrubs only the part that can be shown."""
    for secret in sorted(_KNOWN, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def scrub_head(text: str, keep: int) -> str:
    """At least the first ``keep`` characters' worth of ``text``, scrubbed, read from a bounded
    prefix: a 300 KB server message costs what a short one does. A credential that straddles
    the cut of the prefix is dropped with the tail behind it, never shown in part."""
    tail = max([MAX_CREDENTIAL, *map(len, _KNOWN)])
    window = keep + 2 * tail
    if len(text) <= window:
        return scrub(text)
    return scrub(text[:window])[:-tail] + "…"


def quoted(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Text a server sent, fit for a message or note: one bounded line, secrets masked. Cut
    before it is scrubbed (``one_line`` shows at most ``limit`` of its first ``4 * limit``)."""
    return one_line(scrub_head(str(text), 4 * limit), limit)


def redact_url(url: str) -> str:
    """``url`` without user:password@ and without a query string (tokens hide there too).

    A URL without a scheme is read as http (``u:pw@host`` would otherwise parse as scheme
    ``u``); the result names no scheme then either.
    """
    if not has_scheme(url):
        shown = redact_url("http://" + url)
        return shown.removeprefix("http://")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return scrub(url.split("?", 1)[0])
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if port is not None:
        host = f"{host}:{port}"
    if parts.username or parts.password:
        host = "***@" + host
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@functools.cache
def _trusting_nothing() -> ssl.SSLContext:
    """A verifying client context without a CA: every certificate fails (plain HTTP only)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


@functools.cache
def _system_context() -> ssl.SSLContext:
    """The system CAs' context, loaded once per process (~20 ms each time): shared by every
    client without a --ca-file or --cert (an SSLContext is safe to share between clients and
    threads; contexts with files are built anew each time, so rotated files are read)."""
    return ssl.create_default_context()
