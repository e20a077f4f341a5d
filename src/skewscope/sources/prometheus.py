"""Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics) -> Evidence.

One ``label/__name__/values`` call finds which metric names exist (dialect and aliases), then one
``query_range`` per signal and level fetches every unit at once. Windows are aligned to
multiples of the window length since the epoch (as Grafana and VictoriaMetrics' cache do), so
the same range gives the same windows on every backend; only whole windows inside
[start, end] are used. Each evaluation at time t covers the window (t - W, t].
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import SourceError, UsageError
from skewscope.frame import MAX_WINDOWS, Evidence, Level, choose_window
from skewscope.sources.auth import HttpAuth, redact_url
from skewscope.sources.dialects import (
    SIGNAL_SPECS,
    Alias,
    Key,
    Values,
    build_evidence,
    detect_dialect,
    get_dialect,
    resolve,
)
from skewscope.sources.promql import build_query, normalise_selector

MAX_POINTS = MAX_WINDOWS  # Prometheus refuses query_range with more points per series
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class PromClient:
    """Minimal Prometheus API client: envelope handling, bounded retries, safe error messages."""

    url: str
    auth: HttpAuth | None = None
    timeout_s: float = 30.0
    retries: int = 3  # extra attempts on 429/5xx
    backoff_s: float = 0.25  # first back-off; doubles, capped at max_backoff_s
    max_backoff_s: float = 4.0
    warnings: list[str] = field(default_factory=list)
    _client: httpx.Client | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        kwargs = (self.auth or HttpAuth()).client_kwargs()
        self._client = httpx.Client(base_url=self.url.rstrip("/"), timeout=self.timeout_s, **kwargs)

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _send(self, path: str, params: Mapping[str, Any]) -> httpx.Response:
        assert self._client is not None
        for attempt in range(self.retries + 1):
            try:
                resp = self._client.get(path, params=params)
            except httpx.TimeoutException:
                raise SourceError(
                    f"Prometheus at {self.shown_url} did not answer within {self.timeout_s:g}s"
                ) from None
            except httpx.ConnectError as exc:
                reason = (
                    "connection refused" if "refused" in str(exc).lower() else _one_line(str(exc))
                )
                raise SourceError(
                    f"cannot connect to Prometheus at {self.shown_url}: {reason}"
                ) from None
            except httpx.HTTPError as exc:
                raise SourceError(
                    f"request to Prometheus at {self.shown_url} failed: {type(exc).__name__}"
                ) from None
            if resp.status_code not in RETRY_STATUS or attempt == self.retries:
                return resp
            time.sleep(self._delay(attempt, resp))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, resp: httpx.Response) -> float:
        delay = self.backoff_s * (2**attempt)
        after = resp.headers.get("Retry-After", "")
        if after.replace(".", "", 1).isdigit():
            delay = max(delay, float(after))
        return float(min(delay, self.max_backoff_s))

    def get(self, path: str, params: Mapping[str, Any]) -> Any:
        """GET an API path and return ``data``; API warnings are collected in ``warnings``."""
        resp = self._send(path, params)
        if resp.status_code in (401, 403):
            raise SourceError(
                f"Prometheus at {self.shown_url} refused the credentials (HTTP {resp.status_code})"
            )
        try:
            body = resp.json()
        except ValueError:
            raise SourceError(
                f"Prometheus at {self.shown_url} answered HTTP {resp.status_code} with a body "
                "that is not JSON (is this the Prometheus API base URL?)"
            ) from None
        if not isinstance(body, dict) or "status" not in body:
            raise SourceError(f"Prometheus at {self.shown_url} answered without an API envelope")
        for w in body.get("warnings") or ():
            self.warnings.append(f"Prometheus warning: {_one_line(w)}")
        if body["status"] != "success":
            kind = body.get("errorType", "error")
            raise SourceError(
                f"Prometheus at {self.shown_url} rejected the request ({kind}): "
                f"{_one_line(body.get('error', 'no error message'))}"
            )
        return body.get("data")

    def metric_names(self, start: float, end: float, selector: str) -> list[str]:
        params: dict[str, Any] = {"start": start, "end": end}
        if selector:
            params["match[]"] = "{" + selector + "}"
        data = self.get("/api/v1/label/__name__/values", params)
        return [str(n) for n in data or ()]

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Any]:
        data = self.get(
            "/api/v1/query_range", {"query": query, "start": start, "end": end, "step": step}
        )
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise SourceError(f"Prometheus at {self.shown_url} did not return a range matrix")
        return list(data.get("result") or ())


def plan_windows(start: float, end: float, window_s: float) -> tuple[float, float, int]:
    """(first evaluation time, last evaluation time, number of windows) for whole windows."""
    first_start = math.ceil(start / window_s - 1e-9) * window_s
    last_end = math.floor(end / window_s + 1e-9) * window_s
    n = round((last_end - first_start) / window_s)
    if n < 1:
        raise UsageError(
            f"the range {end - start:g}s holds no whole window of {window_s:g}s "
            "(windows are aligned to multiples of the window length)"
        )
    if n > MAX_POINTS:
        raise UsageError(f"{n} windows of {window_s:g}s exceed {MAX_POINTS}; use a larger step")
    return first_start + window_s, last_end, n


def matrix_to_values(
    result: list[Any], *, window_s: float, dp_label: str | None, bad: list[str]
) -> dict[Key, float]:
    """Series of a range matrix -> {(window_start_s, instance, dp_rank): value}.

    Series without an instance label (or with a DP label that is not an integer) are skipped;
    their label sets are reported through ``bad``.
    """
    out: dict[Key, float] = {}
    for series in result:
        labels = series.get("metric", {})
        inst = labels.get("instance", "")
        dp: int | None = None
        if dp_label is not None:
            raw = labels.get(dp_label, "")
            if not raw.isdigit():
                bad.append(f"{dp_label}={raw!r} on {inst or '?'}")
                continue
            dp = int(raw)
        if not inst:
            bad.append("series without an instance label")
            continue
        for ts, value in series.get("values", ()):
            out[(round(float(ts) - window_s, 6), inst, dp)] = float(value)
    return out


def load_prometheus(
    url: str,
    *,
    start: float,
    end: float,
    step_s: float | None = None,
    selector: str = "",
    dialect: str | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float = 30,
    window_s: float | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    max_workers: int = 4,
) -> Evidence:
    """Load per-window, per-unit signals for [start, end] (epoch seconds) from a Prometheus API.

    The window equals the query step (default: ``choose_window``), so windows tile the range.
    """
    if end <= start:
        raise UsageError("end must be after start")
    if step_s is not None and window_s is not None and abs(step_s - window_s) > 1e-9:
        raise UsageError("step and window must be equal (windows must tile the range)")
    w = (
        window_s
        or step_s
        or choose_window(end - start, thresholds.target_windows, thresholds.min_window_s)
    )
    first_t, last_t, _ = plan_windows(start, end, w)
    sel = normalise_selector(selector)
    client = PromClient(url, auth=auth, timeout_s=timeout_s)
    try:
        names = client.metric_names(start, end, sel)
        chosen = get_dialect(dialect) if dialect else get_dialect(detect_dialect(names))
        resolved = resolve(chosen, names)
        notes = [f"dialect: {chosen.name} ({'given' if dialect else 'detected'})"]
        levels = [Level.INSTANCE]
        if any(a.dp_label for a in resolved.values()):
            levels.append(Level.DP)
        jobs: list[tuple[Level, str, Alias, str]] = []
        for level in levels:
            for spec in SIGNAL_SPECS:
                alias = resolved.get(spec.signal)
                if alias is None:
                    continue
                q = build_query(spec, alias, level=level, window_s=w, selector=sel)
                if q is not None:
                    jobs.append((level, spec.signal, alias, q))
        with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
            results = list(
                pool.map(lambda job: client.query_range(job[3], first_t, last_t, w), jobs)
            )
        bad: list[str] = []
        per_level: dict[Level, Values] = {lvl: {} for lvl in levels}
        for (level, signal, alias, _), result in zip(jobs, results, strict=True):
            dp_label = alias.dp_label if level is Level.DP else None
            table = matrix_to_values(result, window_s=w, dp_label=dp_label, bad=bad)
            if table:
                per_level[level][signal] = table
        if bad:
            notes.append(
                f"skipped {len(bad)} series without a usable instance or DP label "
                f"(e.g. {sorted(set(bad))[0]})"
            )
        notes.extend(dict.fromkeys(client.warnings))
        if not per_level[Level.INSTANCE]:
            raise SourceError(
                f"Prometheus at {client.shown_url} has {chosen.name} metric names but no samples "
                "in whole windows of the range; widen the range or check the selector"
            )
        return build_evidence(
            per_level[Level.INSTANCE],
            per_level.get(Level.DP),
            resolved=resolved,
            names=names,
            window_s=w,
            source="prometheus",
            notes=notes,
        )
    finally:
        client.close()
