"""One bounded HTTP GET for both online sources: a total deadline and a body-size limit.

httpx's ``timeout`` bounds each socket operation, so a server trickling one byte every two
seconds would keep a request alive forever, and an endless body would fill memory. Here every
socket read, write and connect of a request is given only the time left until the request's
total deadline (``DeadlineBackend``), and the body is streamed and abandoned past ``max_bytes``.
Failures become one-line ``SourceError``s whose text is scrubbed of secrets (``auth.scrub``).
"""

from __future__ import annotations

import contextvars
import math
import ssl
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from skewscope.errors import SourceError
from skewscope.sources.auth import HttpAuth, quoted, redact_url

# Monotonic time by which the request running in this thread must be done (inf: no request).
_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("deadline", default=math.inf)


def _left(timeout: float | None, kind: type[Exception]) -> float | None:
    """The smaller of an operation's own timeout and the time left to the request deadline."""
    left = _DEADLINE.get() - time.monotonic()
    if left <= 0:
        raise kind("total deadline exceeded")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every operation ends by the current request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        tls = self._inner.start_tls(
            ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)
        )
        return DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.SyncBackend):
    """httpcore's socket backend with connections wrapped in ``DeadlineStream``."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(super().connect_tcp(host, port, left, local_address, socket_options))


def make_client(auth: HttpAuth | None, timeout_s: float, **kwargs: Any) -> httpx.Client:
    """An httpx client whose requests honour ``bounded_get``'s total deadline.

    httpx has no public hook for the socket backend; the pool's backend attribute is set
    directly (tests/integration/test_limits.py fails if a new httpx stops honouring it).
    """
    # a client bound to an http:// base URL sends every request there: it needs no CAs
    plain = str(kwargs.get("base_url", "")).lower().startswith("http://")
    options = (auth or HttpAuth()).client_kwargs(tls=not plain)
    transport = httpx.HTTPTransport(verify=options.pop("verify"))
    transport._pool._network_backend = DeadlineBackend()
    try:
        return httpx.Client(timeout=timeout_s, transport=transport, **options, **kwargs)
    except httpx.InvalidURL as exc:  # a base URL too long or malformed for httpx
        raise invalid_url("server", str(kwargs.get("base_url", "")), exc) from None


def invalid_url(what: str, url: str, exc: Exception) -> SourceError:
    """httpx.InvalidURL (no HTTPError) as one line: the reason, and the URL's head only."""
    return SourceError(
        f"{what}: not a URL httpx can request ({quoted(exc, 80)}): {quoted(redact_url(url), 100)}"
    )


@dataclass(frozen=True)
class Fetched:
    """A whole, size-checked response."""

    status: int
    headers: httpx.Headers
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def bounded_get(
    client: httpx.Client,
    url: str,
    *,
    what: str,
    shown_url: str,
    deadline_s: float,
    max_bytes: int,
    params: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Fetched:
    """GET ``url`` within ``deadline_s`` seconds in total, reading at most ``max_bytes``.

    ``what`` names the server in messages ("Prometheus", "/metrics target") and ``shown_url``
    its URL (shown redacted). Every failure is one SourceError line.
    """
    where = f"{what} at {redact_url(shown_url)}"
    try:
        with deadline(deadline_s), client.stream("GET", url, params=params, headers=headers) as r:
            declared = r.headers.get("Content-Length", "")
            if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
                raise SourceError(
                    f"{where} sent {_size(int(declared))}; the limit is {_size(max_bytes)}"
                )
            chunks: list[bytes] = []
            got = 0
            for chunk in r.iter_bytes():
                got += len(chunk)
                if got > max_bytes:
                    raise SourceError(
                        f"{where} sent more than the {_size(max_bytes)} response limit; aborted"
                    )
                chunks.append(chunk)
            return Fetched(r.status_code, r.headers, b"".join(chunks))
    except httpx.InvalidURL as exc:  # not an HTTPError: too long, a bad character ...
        raise invalid_url(what, shown_url, exc) from None
    except httpx.TimeoutException:
        raise SourceError(f"{where} did not answer within {deadline_s:g}s") from None
    except httpx.ConnectError as exc:
        why = "connection refused" if "refused" in str(exc).lower() else quoted(exc)
        raise SourceError(f"cannot connect to {where}: {why}") from None
    except httpx.HTTPError as exc:
        raise SourceError(f"request to {where} failed: {type(exc).__name__}") from None
    except (ssl.SSLError, OSError) as exc:
        raise SourceError(f"request to {where} failed: {quoted(exc)}") from None


def _size(n: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"
