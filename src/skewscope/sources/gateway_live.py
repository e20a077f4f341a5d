"""``--gateway-url``: a router's worker list read live (``GET /workers`` of sglang-router and
vllm-router) and merged into the gateway evidence.

The list says which workers are in the router's pool *now* and whether the router holds each
healthy; it has no request counts. Alone it settles "not in the pool" for a starved unit; with
router metrics or an access log it corrects their pool membership (a worker the router dropped
keeps old series in Prometheus)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from skewscope.catalogue import GatewaySource
from skewscope.errors import SourceError
from skewscope.frame import GatewayEvidence, GatewayUnit, upstream_key
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, normalise_url
from skewscope.sources.fetch import bounded_get, make_client


def read_workers(
    url: str,
    *,
    auth: HttpAuth | None = None,
    timeout_s: float = 10.0,
    limits: SourceLimits = DEFAULT_LIMITS,
) -> dict[str, bool]:
    """host:port of every worker the router lists -> whether it holds it healthy now."""
    url, _ = normalise_url(url, "--gateway-url")
    base = url.rstrip("/")
    with make_client(auth, timeout_s) as client:
        got = bounded_get(
            client,
            f"{base}/workers",
            what="router",
            shown_url=base,
            deadline_s=timeout_s,
            max_bytes=limits.max_scrape_bytes,
        )
    where = f"router at {base}/workers"
    if got.status != 200:
        raise SourceError(
            f"{where} answered HTTP {got.status} (expected sglang-router's or "
            "vllm-router's worker list)"
        )
    try:
        workers = json.loads(got.body)["workers"]
        out = {upstream_key(str(w["url"])): bool(w.get("is_healthy", True)) for w in workers}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SourceError(
            f"{where} did not return a worker list "
            '({"workers": [{"url": ..., "is_healthy": ...}]})'
        ) from None
    return out


def with_worker_list(
    gw: GatewayEvidence | None, workers: dict[str, bool], url: str
) -> GatewayEvidence:
    """``gw`` with pool membership from the live list; a list-only evidence when ``gw`` is None
    (requests unknown: NaN)."""
    unhealthy = sorted(w for w, ok in workers.items() if not ok)
    note = f"gateway worker list ({url}) now: {len(workers)} worker(s)" + (
        f", unhealthy now: {', '.join(unhealthy)}" if unhealthy else ""
    )
    if gw is None:
        units = tuple(GatewayUnit(upstream=w, requests=math.nan) for w in sorted(workers))
        return GatewayEvidence(source=GatewaySource.WORKER_LIST, units=units, notes=(note,))
    known = {u.upstream for u in gw.units}
    units = (
        *(replace(u, in_pool=u.upstream in workers) for u in gw.units),
        *(GatewayUnit(upstream=w, requests=0.0) for w in sorted(workers) if w not in known),
    )
    return replace(gw, units=units, notes=(*gw.notes, note))
