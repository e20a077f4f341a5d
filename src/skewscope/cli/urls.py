"""A bare URL given as ``diagnose``'s source, as users of one-argument tools expect.

``skewscope diagnose http://prom:9090`` reads a Prometheus-compatible API and
``skewscope diagnose http://host:8000/metrics`` scrapes the endpoint; ``host:9090`` (no scheme)
is read as ``http://host:9090`` and the user is told so. A URL with a ``/metrics`` path is
scraped; otherwise the Prometheus API is probed (``/api/v1/status/buildinfo``, then
``/api/v1/query``), then the URL itself and ``URL/metrics`` as an exposition. When nothing
answers, one line says what was tried.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from skewscope.errors import SourceError, UsageError

if TYPE_CHECKING:
    import httpx

    from skewscope.settings import SourceLimits
    from skewscope.sources.auth import HttpAuth
    from skewscope.sources.fetch import Fetched

_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[\w.-]+):\d{1,5}(?:/\S*)?$")
_NO_ANSWER = "no answer"
_EXPOSITION = re.compile(r"^(?:# (?:TYPE|HELP) |[A-Za-z_:][\w:]*(?:\{[^}]*\})? \S)", re.M)


def looks_like_url(arg: str) -> bool:
    """A PATH argument that is a URL: it has a scheme, or is ``host:port[/path]`` and no such
    file exists (a folder could be named ``a:1``)."""
    from skewscope.sources.auth import has_scheme

    if has_scheme(arg):
        return True
    if _HOST_PORT.match(arg) is None:
        return False
    try:
        return not Path(arg).exists()
    except OSError:  # a name the OS refuses (too long) is no file
        return True


def note(text: str) -> None:
    from skewscope.errors import one_line

    print(f"skewscope: note: {one_line(text)}", file=sys.stderr)


def classify(
    urls: list[str], auth: HttpAuth, timeout_s: float, limits: SourceLimits
) -> tuple[str, list[str]]:
    """``("prometheus", [base])`` or ``("scrape", [metrics URLs])`` for the URLs given as
    sources, with a note on stderr saying how each was read (a probe's body is bounded by
    ``limits.max_scrape_mb``)."""
    from skewscope.sources.auth import normalise_url, redact_url
    from skewscope.sources.fetch import make_client

    kinds: list[tuple[str, str]] = []
    # Probes are bounded like every online request (fetch.bounded_get). The API probe carries
    # the credentials a --prometheus URL would; the /metrics probes only named ones (an ambient
    # token never goes to a scrape target).
    with (
        make_client(auth, timeout_s) as api_client,
        make_client(auth.without_ambient(), timeout_s) as scrape_client,
    ):
        for raw in urls:
            url, scheme_note = normalise_url(raw, "source")
            if scheme_note:
                note(scheme_note)
            bound = _Bound(timeout_s, limits.max_scrape_bytes)
            kind, target, how = _probe((api_client, scrape_client), url.rstrip("/"), bound)
            note(f"{redact_url(url)} {how}: reading it as --{kind} {redact_url(target)}")
            kinds.append((kind, target))
    found = {k for k, _ in kinds}
    if found == {"scrape"}:
        return "scrape", [t for _, t in kinds]
    if len(kinds) == 1:
        return kinds[0][0], [kinds[0][1]]
    raise UsageError(
        "diagnose: give one Prometheus URL, or one or more /metrics URLs "
        "(these are a mix or several Prometheus APIs)"
    )


@dataclass(frozen=True)
class _Bound:
    """Every probe's deadline and body limit."""

    timeout_s: float
    max_bytes: int


def _probe(
    clients: tuple[httpx.Client, httpx.Client], url: str, bound: _Bound
) -> tuple[str, str, str]:
    """(kind, target URL, how it answered); SourceError when neither kind answers."""
    from skewscope.sources.auth import redact_url

    tried: list[str] = []
    path = url.split("://", 1)[1].partition("/")[2]
    if not path.endswith("metrics"):
        for api, params in (("/api/v1/status/buildinfo", None), ("/api/v1/query", {"query": "1"})):
            ok, why = _api_answers(clients[0], url + api, params, bound)
            if ok:
                return "prometheus", url, f"answers as a Prometheus API ({api})"
            if why.startswith(_NO_ANSWER):  # the host itself is unreachable: say so once
                raise SourceError(
                    f"{redact_url(url)}: {why}; nothing to read as a Prometheus "
                    "API or a /metrics endpoint"
                )
            tried.append(f"{api}: {why}")
    candidates = [url] if path else []
    if not path.endswith("metrics"):
        candidates.append(url + "/metrics")
    for cand in candidates:
        ok, why = _exposition_answers(clients[1], cand, bound)
        if ok:
            return "scrape", cand, "serves /metrics"
        tried.append(f"{redact_url(cand)}: {why}")
    raise SourceError(
        f"{redact_url(url)}: neither a Prometheus API nor a /metrics endpoint "
        f"answers ({'; '.join(tried)}); use --prometheus URL or --scrape URL"
    )


def _get(
    client: httpx.Client, url: str, params: dict[str, str] | None, bound: _Bound
) -> tuple[Fetched | None, str]:
    from skewscope.sources.auth import quoted
    from skewscope.sources.fetch import bounded_get

    try:
        got = bounded_get(
            client,
            url,
            what="source",
            shown_url=url,
            deadline_s=bound.timeout_s,
            max_bytes=bound.max_bytes,
            params=params,
        )
    except SourceError as e:
        return None, quoted(f"{_NO_ANSWER} ({e})", 160)
    return got, ""


def _api_answers(
    client: httpx.Client, url: str, params: dict[str, str] | None, bound: _Bound
) -> tuple[bool, str]:
    resp, why = _get(client, url, params, bound)
    if resp is None:
        return False, why
    if resp.status != 200:
        return False, f"HTTP {resp.status}"
    try:
        body = json.loads(resp.body)
    except (ValueError, RecursionError):
        return False, "not JSON"
    ok = isinstance(body, dict) and body.get("status") == "success"
    return ok, "" if ok else "not a Prometheus API answer"


def _exposition_answers(client: httpx.Client, url: str, bound: _Bound) -> tuple[bool, str]:
    resp, why = _get(client, url, None, bound)
    if resp is None:
        return False, why
    if resp.status != 200:
        return False, f"HTTP {resp.status}"
    ok = _EXPOSITION.search(resp.text()[:65536]) is not None
    return ok, "" if ok else "not a metrics exposition"
