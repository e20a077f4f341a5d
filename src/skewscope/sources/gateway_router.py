"""A router's own metrics in the Prometheus the engines are read from -> GatewayEvidence.

Detected by name: when the Prometheus holds a known router's per-worker series, they are read
over the same range. Each router's names are in :data:`ROUTERS`; they were read from the
routers' live ``/metrics`` in front of the simulator (tests/online/test_gateway_router.py), one
series per worker URL in the ``worker`` label:

- sglang-router 0.3.2 (SGLang Model Gateway, prefix ``smg_``): ``smg_worker_cb_outcomes_total
  {worker, outcome}`` (every request sent to a worker, as its circuit breaker counted it),
  ``smg_worker_health`` (1 healthy, 0 unhealthy; later versions -1 for a removed worker),
  ``smg_worker_cb_state`` (0 closed, 1 open, 2 half-open: the router's own ``describe_gauge``),
  ``smg_worker_selection_total{policy}``;
- vllm-router 0.1.17 (a fork of it, prefix ``vllm_router_``):
  ``vllm_router_processed_requests_total{worker}``, ``vllm_router_worker_health``,
  ``vllm_router_cb_state`` (same encoding), ``vllm_router_policy_decisions_total{policy, worker}``.

Queries are instant queries at the range end over the whole range (``increase``, and
``[range:5s]`` subqueries for the shares of time unhealthy / circuit-open). The engines'
``--selector`` is not applied: the router is a different scrape job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from skewscope.catalogue import GatewaySource
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import SourceError
from skewscope.frame import GatewayEvidence, GatewayUnit, upstream_key
from skewscope.sources.auth import HttpAuth, normalise_url
from skewscope.sources.prometheus import PromClient
from skewscope.sources.promql import duration
from skewscope.sources.validate import parse_number


@dataclass(frozen=True)
class RouterNames:
    """A router's metric names (each with a ``worker`` label but ``policy``)."""

    source: GatewaySource
    requests: str  # counter: requests sent to the worker
    health: str  # gauge: 1 healthy, 0 unhealthy, -1 removed
    cb_state: str  # gauge: 0 closed, 1 open, 2 half-open
    policy: str  # counter with a ``policy`` label: routing decisions


ROUTERS: tuple[RouterNames, ...] = (
    RouterNames(GatewaySource.SGLANG_ROUTER, "smg_worker_cb_outcomes_total", "smg_worker_health",
                "smg_worker_cb_state", "smg_worker_selection_total"),
    RouterNames(GatewaySource.VLLM_ROUTER, "vllm_router_processed_requests_total",
                "vllm_router_worker_health", "vllm_router_cb_state",
                "vllm_router_policy_decisions_total"),
)
CB_OPEN = 1  # circuit-breaker gauge value of an open breaker
SUBQUERY_STEP_S = 5.0  # resolution of the unhealthy / open-share subqueries


def _vector(client: PromClient, query: str, at: float) -> list[tuple[dict[str, str], float]]:
    data: Any = client.get("/api/v1/query", {"query": query, "time": at})
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise SourceError(f"{client.where} did not return an instant vector for {query}")
    out = []
    for s in data.get("result") or []:
        try:
            labels = {str(k): str(v) for k, v in s["metric"].items()}
            value = parse_number(s["value"][1])
        except (KeyError, TypeError, IndexError, AttributeError):
            value = None
        if value is None:
            raise SourceError(f"{client.where} returned a malformed sample for {query}")
        out.append((labels, value))
    return out


def _per_worker(rows: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    return {upstream_key(lab["worker"]): v for lab, v in rows if lab.get("worker")}


def load_router_prometheus(
    url: str,
    *,
    start: float,
    end: float,
    auth: HttpAuth | None = None,
    timeout_s: float = 30.0,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> GatewayEvidence | None:
    """The router's view of [start, end], or None when the Prometheus holds no router metrics."""
    url, _ = normalise_url(url, "--prometheus")
    client = PromClient(url, auth=auth, timeout_s=timeout_s,
                        max_bytes=int(thresholds.max_query_mb * 2**20))
    try:
        names = set(client.metric_names(start, end, ""))
        found = [r for r in ROUTERS if r.requests in names]
        if not found:
            return None
        router = found[0]
        r, step = duration(end - start), duration(SUBQUERY_STEP_S)

        def query(q: str, needs: str) -> dict[str, float]:
            return _per_worker(_vector(client, q, end)) if needs in names else {}

        sent = query(f"sum by (worker) (increase({router.requests}[{r}]))", router.requests)
        health = query(f"avg by (worker) (avg_over_time(({router.health} == bool 0)[{r}:{step}]))",
                       router.health)
        listed = query(f"{router.health} >= 0", router.health)
        breaker = query(
            f"avg by (worker) (avg_over_time(({router.cb_state} == bool {CB_OPEN})[{r}:{step}]))",
            router.cb_state)
        policies = _vector(client, f"sum by (policy) (increase({router.policy}[{r}]))", end) \
            if router.policy in names else []
    finally:
        client.close()
    workers = sorted(set(sent) | set(health) | set(breaker))
    units = tuple(
        GatewayUnit(
            upstream=w,
            requests=sent.get(w, 0.0) if math.isfinite(sent.get(w, 0.0)) else 0.0,
            in_pool=w in listed if listed else True,
            unhealthy_share=health.get(w, math.nan),
            breaker_open_share=breaker.get(w, math.nan),
        )
        for w in workers
    )
    used = sorted(((v, lab.get("policy", "")) for lab, v in policies if v > 0), reverse=True)
    notes = [f"gateway: {router.source} metrics ({router.requests}) read from the same "
             "Prometheus"]
    if len(found) > 1:
        notes.append(f"several routers' metrics found ({', '.join(f.source for f in found)}); "
                     f"{router.source} read")
    if len(used) > 1:
        notes.append("the router used several policies in the range: "
                     + ", ".join(f"{p} ({v:.0f})" for v, p in used))
    return GatewayEvidence(
        source=router.source,
        units=units,
        policy=used[0][1] if used else None,
        notes=tuple(notes),
    )
