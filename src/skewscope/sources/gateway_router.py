"""A router's own metrics in the Prometheus the engines are read from -> GatewayEvidence.

Detected by name: when the Prometheus holds a known router's per-worker request series
(``gateway_names.ROUTERS``: sglang-router, vllm-router, the llm-d and Gateway API Inference
Extension endpoint pickers, vLLM production-stack's router), they are read over the same range:
instant queries at the range end for the totals (``increase``, and ``[range:5s]`` subqueries
for the shares of time unhealthy / circuit-open), and, when the engines' windows are given, one
range query per window series (requests sent to each worker, the load the router believed it
had). The engines' ``--selector`` is not applied: the router is a different scrape job.

Workers are named as the engines are joined on (``frame.upstream_key``); a DP-aware router's
``url@rank`` keeps its rank, an endpoint picker's ``<pod>-rank-<n>`` becomes ``<pod>@<n>`` and
its per-port scheduling counts ``<pod>@<k>`` for the pod's k-th port in ascending order.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from skewscope.errors import SourceError
from skewscope.frame import GatewayEvidence, GatewayUnit, upstream_key
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, normalise_url
from skewscope.sources.gateway_names import (
    ALSO_EXPORTS,
    CB_OPEN,
    ROUTERS,
    RouterNames,
    WorkerSeries,
)
from skewscope.sources.prom_client import PromClient
from skewscope.sources.promql import duration
from skewscope.sources.validate import parse_number

SUBQUERY_STEP_S = 5.0  # resolution of the unhealthy / open-share subqueries
_RANK_SUFFIX = re.compile(r"^(?P<pod>.+)-rank-(?P<rank>[0-9]+)$")
Rows = list[tuple[dict[str, str], Any]]


def _sample(client: PromClient, query: str, raw: Any) -> float:
    value = parse_number(raw)
    if value is None:
        raise SourceError(f"{client.where} returned a malformed sample for {query}")
    return value


def _vector(client: PromClient, query: str, at: float) -> list[tuple[dict[str, str], float]]:
    data: Any = client.get("/api/v1/query", {"query": query, "time": at})
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise SourceError(f"{client.where} did not return an instant vector for {query}")
    out = []
    for s in data.get("result") or []:
        try:
            labels = {str(k): str(v) for k, v in s["metric"].items()}
            raw = s["value"][1]
        except (KeyError, TypeError, IndexError, AttributeError):
            raise SourceError(f"{client.where} returned a malformed sample for {query}") from None
        out.append((labels, _sample(client, query, raw)))
    return out


def _matrix(
    client: PromClient, query: str, win: tuple[float, float, int]
) -> list[tuple[dict[str, str], tuple[float, ...]]]:
    """Per series, one value per window of ``win`` (first start, length, count); NaN where the
    range query has no point."""
    first, w, n = win
    out = []
    for s in client.query_range(query, first + w, first + n * w, w):
        try:
            labels = {str(k): str(v) for k, v in s["metric"].items()}
            points = {
                round((float(t) - first) / w) - 1: _sample(client, query, v) for t, v in s["values"]
            }
        except (KeyError, TypeError, ValueError, AttributeError):
            raise SourceError(f"{client.where} returned a malformed series for {query}") from None
        out.append((labels, tuple(points.get(i, math.nan) for i in range(n))))
    return out


class _Names:
    """A series' worker names: ``url@rank`` kept, ``<pod>-rank-<n>`` -> ``<pod>@<n>``, and a
    pod's ports -> ranks in ascending port order (read from every row first)."""

    def __init__(self, series: WorkerSeries, rows: list[dict[str, str]]) -> None:
        self.series = series
        ports: dict[str, set[int]] = defaultdict(set)
        if series.port:
            for lab in rows:
                port = lab.get(series.port, "")
                if lab.get(series.worker) and port.isdigit():
                    ports[lab[series.worker]].add(int(port))
        self.rank = {(pod, p): i for pod, ps in ports.items() for i, p in enumerate(sorted(ps))}

    def of(self, labels: dict[str, str]) -> str | None:
        name = labels.get(self.series.worker, "")
        if not name:
            return None
        if self.series.rank_suffix and (m := _RANK_SUFFIX.match(name)):
            return upstream_key(f"{m['pod']}@{m['rank']}")
        port = labels.get(self.series.port or "", "")
        if port.isdigit() and (name, int(port)) in self.rank:
            return upstream_key(f"{name}@{self.rank[name, int(port)]}")
        return upstream_key(name)


def _selector(s: WorkerSeries, name: str) -> str:
    return f"{name}{{{s.select}}}" if s.select else name


def _by(s: WorkerSeries) -> str:
    return ", ".join(x for x in (s.worker, s.port) if x)


class _Reader:
    """Queries of one router over [start, end] (and the engines' windows)."""

    def __init__(
        self,
        client: PromClient,
        names: set[str],
        start: float,
        end: float,
        win: tuple[float, float, int] | None,
    ) -> None:
        self.client, self.names, self.end, self.win = client, names, end, win
        self.span_s = end - start
        self.r, self.step = duration(end - start), duration(SUBQUERY_STEP_S)

    def stored(self, name: str) -> str | None:
        """The name as stored (``vllm:x`` may be stored ``vllm_x``), None when absent."""
        for n in (name, name.replace(":", "_")):
            if n in self.names:
                return n
        return None

    def total(self, s: WorkerSeries | None, expr: str) -> dict[str, float]:
        """``expr`` (with ``{x}`` for the series, ``{r}``/``{step}`` for the durations) summed
        per worker at the range end; {} when the router lacks the series."""
        name = self.stored(s.name) if s else None
        if s is None or name is None:
            return {}
        q = f"sum by ({_by(s)}) ({expr.format(x=_selector(s, name), r=self.r, step=self.step)})"
        rows = _vector(self.client, q, self.end)
        names = _Names(s, [lab for lab, _ in rows])
        out: dict[str, float] = defaultdict(float)
        for lab, v in rows:
            if (w := names.of(lab)) is not None:
                out[w] += v
        return dict(out)

    def windows(self, s: WorkerSeries | None, expr: str) -> dict[str, tuple[float, ...]]:
        """``expr`` (``{x}`` the series, ``{w}`` the window) per worker and engine window."""
        name = self.stored(s.name) if s else None
        if s is None or name is None or self.win is None:
            return {}
        w = duration(self.win[1])
        q = f"sum by ({_by(s)}) ({expr.format(x=_selector(s, name), w=w)})"
        rows = _matrix(self.client, q, self.win)
        names = _Names(s, [lab for lab, _ in rows])
        out: dict[str, list[float]] = {}
        for lab, vals in rows:
            if (key := names.of(lab)) is None:
                continue
            acc = out.setdefault(key, [math.nan] * len(vals))
            for i, v in enumerate(vals):
                if math.isfinite(v):
                    acc[i] = v if math.isnan(acc[i]) else acc[i] + v
        return {k: tuple(v) for k, v in out.items()}


def detect_router(names: set[str]) -> tuple[RouterNames | None, list[RouterNames]]:
    """The first router whose request series is stored, and every router found."""
    norm = {n.replace(":", "_") for n in names}
    found = [r for r in ROUTERS if r.requests.name.replace(":", "_") in norm]
    return (found[0] if found else None), found


def load_router_prometheus(
    url: str,
    *,
    start: float,
    end: float,
    windows: tuple[float, float, int] | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float = 30.0,
    limits: SourceLimits = DEFAULT_LIMITS,
) -> GatewayEvidence | None:
    """The router's view of [start, end], or None when the Prometheus holds no router metrics.
    ``windows`` (first window start, window length, count): the engines' grid, for the
    per-window series."""
    url, _ = normalise_url(url, "--prometheus")
    client = PromClient(url, auth=auth, timeout_s=timeout_s, max_bytes=limits.max_query_bytes)
    try:
        names = set(client.metric_names(start, end, ""))
        router, found = detect_router(names)
        if router is None:
            return None
        rd = _Reader(client, names, start, end, windows)
        return _evidence(rd, router, found)
    finally:
        client.close()


def _evidence(rd: _Reader, router: RouterNames, found: list[RouterNames]) -> GatewayEvidence:
    req = router.requests
    if router.requests_per_s:  # a request-rate gauge: its mean over the range times the range
        sent = {k: v * rd.span_s for k, v in rd.total(req, "avg_over_time({x}[{r}])").items()}
        series = (
            {
                k: tuple(v * rd.win[1] for v in vs)
                for k, vs in rd.windows(req, "avg_over_time({x}[{w}])").items()
            }
            if rd.win
            else {}
        )
    else:
        sent = rd.total(req, "increase({x}[{r}])")
        series = rd.windows(req, "increase({x}[{w}])")
    health = rd.total(router.health, "avg_over_time(({x} == bool 0)[{r}:{step}])")
    breaker = rd.total(router.cb_state, f"avg_over_time(({{x}} == bool {CB_OPEN})[{{r}}:{{step}}])")
    load_s = next((s for s in router.load if rd.stored(s.name)), None)
    load = rd.windows(load_s, "avg_over_time({x}[{w}])")
    # in the pool at the range end: listed by the health gauge (>= 0), else by the load gauge
    listed = (
        rd.total(router.health, "{x} >= 0")
        if router.health and rd.stored(router.health.name)
        else rd.total(load_s, "{x} * 0 + 1")
    )
    workers = sorted(set(sent) | set(health) | set(breaker) | set(listed))
    n = rd.win[2] if rd.win else 0
    units = tuple(
        GatewayUnit(
            upstream=w,
            requests=sent.get(w, 0.0) if math.isfinite(sent.get(w, 0.0)) else 0.0,
            in_pool=w in listed if listed else True,
            unhealthy_share=health.get(w, math.nan),
            breaker_open_share=breaker.get(w, math.nan),
            series=tuple(0.0 if math.isnan(v) else v for v in series.get(w, (0.0,) * n)),
            load_series=load.get(w, (math.nan,) * n) if load_s else (),
        )
        for w in workers
    )
    policy, notes = _policy(rd, router)
    notes.insert(
        0, f"gateway: {router.source} metrics ({rd.stored(req.name)}) read from the same Prometheus"
    )
    others = sorted(
        {f.source for f in found} - {router.source} - ALSO_EXPORTS.get(router.source, set())
    )
    if others:
        notes.append(
            f"several routers' metrics found ({', '.join([router.source, *others])}); "
            f"{router.source} read"
        )
    pool = []
    for what, name in router.pool:
        if stored := rd.stored(name):
            vals = [
                v for _, v in _vector(rd.client, f"avg(avg_over_time({stored}[{rd.r}]))", rd.end)
            ]
            if vals and math.isfinite(vals[0]):
                pool.append((what, vals[0]))
    return GatewayEvidence(
        source=router.source,
        units=units,
        policy=policy,
        notes=tuple(notes),
        window_starts=tuple(rd.win[0] + i * rd.win[1] for i in range(n)) if rd.win else (),
        pool=tuple(pool),
        load_polled=router.load_polled and load_s is not None,
    )


def _policy(rd: _Reader, router: RouterNames) -> tuple[str | None, list[str]]:
    """The policy with most decisions in the range (a note when several), else the router's
    fixed one."""
    name = rd.stored(router.policy) if router.policy else None
    if name is None:
        return router.fixed_policy, []
    lab = router.policy_label
    rows = _vector(rd.client, f"sum by ({lab}) (increase({name}[{rd.r}]))", rd.end)
    used = sorted(((v, la.get(lab, "")) for la, v in rows if v > 0), reverse=True)
    notes = []
    if len(used) > 1:
        notes.append(
            "the router used several policies in the range: "
            + ", ".join(f"{p} ({v:.0f})" for v, p in used)
        )
    return (used[0][1] if used else router.fixed_policy), notes
