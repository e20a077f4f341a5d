"""A router's own metrics in the Prometheus the engines are read from -> GatewayEvidence.

Detected by name: when the Prometheus holds the SGLang Model Gateway's (``sglang-router``,
prefix ``smg_``) per-worker series, they are read over the same range. The names below were
read from a running sglang-router 0.3.2 ``/metrics`` (tests/gateway: a real router in front of
the simulator): one series per worker URL in the ``worker`` label.

- ``smg_worker_cb_outcomes_total{worker, outcome}``: every request the router sent a worker,
  counted by the worker's circuit breaker (success or failure): the per-worker request count;
- ``smg_worker_health{worker}``: 1 healthy, 0 unhealthy (the router's health checks; later
  versions also write -1 for a removed worker);
- ``smg_worker_cb_state{worker}``: circuit breaker, 0 closed, 1 open, 2 half-open (the router's
  own ``describe_gauge`` text);
- ``smg_worker_selection_total{policy}``: selections by policy name: the policy in use.
Queries are instant queries at the range end over the whole range (``increase``,
``avg_over_time``), with a subquery for the breaker's open share. The engines' ``--selector``
is not applied: the router is a different scrape job.
"""

from __future__ import annotations

import math
from typing import Any

from skewscope.catalogue import GatewaySource
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import SourceError
from skewscope.frame import GatewayEvidence, GatewayUnit, upstream_key
from skewscope.sources.auth import HttpAuth, normalise_url
from skewscope.sources.prometheus import PromClient
from skewscope.sources.promql import duration
from skewscope.sources.validate import parse_number

SMG_OUTCOMES = "smg_worker_cb_outcomes_total"
SMG_HEALTH = "smg_worker_health"
SMG_CB_STATE = "smg_worker_cb_state"
SMG_SELECTION = "smg_worker_selection_total"
CB_OPEN = 1  # smg_worker_cb_state value of an open breaker
SUBQUERY_STEP_S = 5.0  # resolution of the breaker's open-share subquery


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
        if SMG_OUTCOMES not in names:
            return None
        r = duration(end - start)
        sent = _per_worker(_vector(
            client, f"sum by (worker) (increase({SMG_OUTCOMES}[{r}]))", end))
        step = duration(SUBQUERY_STEP_S)
        health = _per_worker(_vector(
            client,
            f"avg by (worker) (avg_over_time(({SMG_HEALTH} == bool 0)[{r}:{step}]))", end)
        ) if SMG_HEALTH in names else {}
        listed = _per_worker(_vector(client, f"{SMG_HEALTH} >= 0", end)) \
            if SMG_HEALTH in names else {}
        breaker = _per_worker(_vector(
            client,
            f"avg by (worker) (avg_over_time(({SMG_CB_STATE} == bool {CB_OPEN})[{r}:{step}]))",
            end,
        )) if SMG_CB_STATE in names else {}
        policies = _vector(client, f"sum by (policy) (increase({SMG_SELECTION}[{r}]))", end) \
            if SMG_SELECTION in names else []
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
    notes = [f"gateway: {GatewaySource.SGLANG_ROUTER} metrics ({SMG_OUTCOMES}) read from the "
             "same Prometheus"]
    if len(used) > 1:
        notes.append("the router used several policies in the range: "
                     + ", ".join(f"{p} ({v:.0f})" for v, p in used))
    return GatewayEvidence(
        source=GatewaySource.SGLANG_ROUTER,
        units=units,
        policy=used[0][1] if used else None,
        notes=tuple(notes),
    )
