"""A vLLM fleet's metric history with known hot units, written straight from arrays.

``instances`` x ``ranks`` engine units (label ``engine``), one sample every ``STEP`` seconds over
``span_s``, each unit with 3 counters, 3 gauges and 3 histograms (5 buckets) plus the iteration
counters: 29 series a unit. Unit (instance 7, rank 0) gets 2x the requests of its siblings (a DP
hot spot) and every rank of instance 42 1.8x the fleet's rate (an instance hot spot), with
queueing and slower first tokens to match. Rendered as OpenMetrics for ``promtool tsdb
create-blocks-from openmetrics`` and as Prometheus text lines with millisecond timestamps for
VictoriaMetrics' ``/api/v1/import/prometheus``, in chunks so no whole-history string is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

T0 = 1_699_999_200  # a multiple of 3600: windows align on both backends
STEP = 15
BOUNDS = ("0.1", "0.5", "1.0", "2.5", "+Inf")
HOT_DP = (7, 0)
HOT_INSTANCE = 42


def instance_label(i: int) -> str:
    return f"10.0.{i // 250}.{i % 250}:8000"


@dataclass(frozen=True)
class Fleet:
    instances: int = 256
    ranks: int = 4
    span_s: int = 3600
    seed: int = 3

    @property
    def times(self) -> np.ndarray:
        return T0 + STEP * np.arange(self.span_s // STEP + 1)

    def rate(self, i: int, r: int) -> float:
        """Requests per 15 s of a unit (the fleet runs 2 req/s a unit)."""
        if (i, r) == HOT_DP:
            return 60.0
        return 54.0 if i == HOT_INSTANCE else 30.0

    def series(self, i: int, r: int) -> Iterator[tuple[str, str, str, np.ndarray]]:
        """(family type, sample name, extra labels, values per time) of one unit."""
        rng = np.random.default_rng((self.seed, i, r))
        n = len(self.times)
        hot = self.rate(i, r) / 30.0
        reqs = rng.poisson(self.rate(i, r), n).astype(float)
        reqs[0] = 0
        cum = np.cumsum(reqs)
        yield "counter", "vllm:request_success_total", ',finished_reason="stop"', cum
        yield "counter", "vllm:prompt_tokens_total", "", np.cumsum(reqs * rng.normal(512, 20, n))
        yield "counter", "vllm:generation_tokens_total", "", np.cumsum(reqs * 128.0)
        yield "gauge", "vllm:num_requests_running", "", np.round(8 * hot + rng.normal(0, 1, n))
        waiting = np.maximum(0.0, np.round(12 * (hot - 1.5) + rng.normal(0, 0.5, n)))
        yield "gauge", "vllm:num_requests_waiting", "", waiting
        yield (
            "gauge",
            "vllm:kv_cache_usage_perc",
            "",
            np.clip(0.3 * hot + rng.normal(0, 0.02, n), 0, 1),
        )
        # latency histograms: the share of requests per bucket moves up on a hot unit
        shares = {
            "vllm:time_to_first_token_seconds": (0.6, 0.3, 0.08, 0.02)
            if hot < 1.5
            else (0.1, 0.3, 0.4, 0.2),
            "vllm:e2e_request_latency_seconds": (0.0, 0.1, 0.6, 0.3)
            if hot < 1.5
            else (0.0, 0.0, 0.3, 0.7),
            "vllm:request_queue_time_seconds": (0.95, 0.05, 0.0, 0.0)
            if hot < 1.5
            else (0.2, 0.4, 0.3, 0.1),
        }
        mids = (0.05, 0.3, 0.75, 1.75)
        for name, share in shares.items():
            acc = np.zeros(n)
            for bound, s in zip(BOUNDS[:-1], share, strict=True):
                acc = acc + np.round(cum * s)
                yield "histogram", f"{name}_bucket", f',le="{bound}"', acc
            yield "histogram", f"{name}_bucket", ',le="+Inf"', cum
            yield "histogram", f"{name}_sum", "", cum * float(np.dot(share, mids))
            yield "histogram", f"{name}_count", "", cum
        steps = np.cumsum(np.full(n, 500.0 * (1 if hot < 1.5 else 1.2)))
        steps[0] = 0
        yield "summary", "vllm:iteration_tokens_total_count", "", steps
        yield "summary", "vllm:iteration_tokens_total_sum", "", steps * 40.0 * hot

    def units(self) -> Iterator[tuple[int, int]]:
        for i in range(self.instances):
            for r in range(self.ranks):
                yield i, r


def _labels(i: int, r: int) -> str:
    return f'engine="{r}",instance="{instance_label(i)}",job="vllm",model_name="m"'


def _family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def openmetrics_chunks(fleet: Fleet) -> Iterator[str]:
    """OpenMetrics text: each family's samples contiguous, a histogram's samples of one
    timestamp together (one MetricPoint), ``# EOF`` last."""
    stamps = [str(t) for t in fleet.times]
    by_family: dict[str, list[tuple[str, int, int, str, str, np.ndarray]]] = {}
    for i, r in fleet.units():
        for kind, name, extra, values in fleet.series(i, r):
            by_family.setdefault(_family(name), []).append((kind, i, r, name, extra, values))
    for fam, rows in by_family.items():
        yield f"# TYPE {fam} {rows[0][0]}\n"
        if rows[0][0] in ("counter", "gauge"):
            for _, i, r, name, extra, values in rows:
                head = f"{name}{{{_labels(i, r)}{extra}}} "
                yield "".join(
                    f"{head}{v:.6g} {s}\n" for v, s in zip(values.tolist(), stamps, strict=True)
                )
            continue
        per_unit: dict[tuple[int, int], list[tuple[str, list[float]]]] = {}
        for _, i, r, name, extra, values in rows:
            per_unit.setdefault((i, r), []).append(
                (f"{name}{{{_labels(i, r)}{extra}}} ", values.tolist())
            )
        for group in per_unit.values():
            yield "".join(
                f"{head}{vals[j]:.6g} {s}\n" for j, s in enumerate(stamps) for head, vals in group
            )
    yield "# EOF\n"


def import_chunks(fleet: Fleet, units_per_chunk: int = 64) -> Iterator[bytes]:
    """Prometheus text lines with millisecond timestamps, ``units_per_chunk`` units a chunk."""
    stamps = [str(t * 1000) for t in fleet.times]
    buf: list[str] = []
    for k, (i, r) in enumerate(fleet.units(), 1):
        for _, name, extra, values in fleet.series(i, r):
            head = f"{name}{{{_labels(i, r)}{extra}}} "
            buf.extend(f"{head}{v:.6g} {s}\n" for v, s in zip(values.tolist(), stamps, strict=True))
        if k % units_per_chunk == 0:
            yield "".join(buf).encode()
            buf = []
    if buf:
        yield "".join(buf).encode()
