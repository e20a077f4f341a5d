"""Per-unit counts from counters are the engine's own counter deltas, in a real Prometheus:
every increment between two scrapes lands in exactly one window, whatever the step (down to the
scrape interval) and the scrape phase. ``increase()`` alone extrapolates the samples inside each
range to its edges and drops the step between windows (0 requests at a step equal to the scrape
interval; +10 % at 10 s on the real vLLM of scripts/vllm_e2e.sh, which now reads its 200
requests exactly at 2, 5 and 10 s).

Truth: a vLLM DP=2 history written here, counters stepping by seeded random amounts at every
2 s scrape, the scrapes 1 s off the window grid; rank 1 restarts once (counted from 0 again).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.online_history import Sample, to_openmetrics
from skewscope.sources.prometheus import load_prometheus

T1 = 1_700_100_000  # a multiple of 10 s
SCRAPE = 2
N = 120  # scrapes: 4 minutes
RESET_AT = 61  # rank 1's counters start again from 0 at this scrape


def _counters() -> dict[str, list[float]]:
    """Cumulative request counter per engine at each scrape (rank 1 resets once)."""
    rng = random.Random(20261202)
    out: dict[str, list[float]] = {}
    for eng, top in (("0", 5), ("1", 2)):
        total, values = 0.0, []
        for k in range(N):
            if eng == "1" and k == RESET_AT:
                total = 0.0
            total += rng.randint(0, top)
            values.append(total)
        out[eng] = values
    return out


COUNTERS = _counters()


def _history() -> list[Sample]:
    samples = []
    for eng, values in COUNTERS.items():
        base = {"job": "exact", "instance": "x:8000", "engine": eng, "model_name": "m"}
        for k, v in enumerate(values):
            t = T1 + 1 + SCRAPE * k

            def s(
                name: str, value: float, _b: dict[str, str] = base, _t: int = t, **extra: str
            ) -> Sample:
                return Sample(name, tuple(sorted({**_b, **extra}.items())), _t, value)

            samples += [
                s("vllm:request_success_total", v, finished_reason="length"),
                s("vllm:prompt_tokens_total", 10 * v),
                s("vllm:num_requests_running", 1.0),
                s("vllm:num_requests_waiting", 0.0),
            ]
    return samples


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prom, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("exact")
    (tmp / "history.om").write_text(to_openmetrics(_history()))
    backfill(promtool, tmp / "history.om", tmp / "blocks", timeout_s=60)
    with serve_prometheus(prom, tmp / "blocks", tmp) as u:
        yield u


def _at(eng: str, t: float) -> float:
    """The counter's last sample at or before ``t`` (0 before the first)."""
    k = (int(t) - T1 - 1) // SCRAPE
    return COUNTERS[eng][k] if k >= 0 else 0.0


@pytest.mark.parametrize("step", [2.0, 6.0, 10.0])
def test_window_counts_are_the_counters_deltas(url: str, step: float, tmp_path: Path) -> None:
    start, end = T1 + 20.0, T1 + 220.0
    ev = load_prometheus(url, start=start, end=end, step_s=step, selector='job="exact"')
    assert ev.dp is not None
    for eng in ("0", "1"):
        rows = ev.dp.df.filter(ev.dp.df["unit"] == f"x:8000/dp{eng}").sort("window_start_s")
        windows = rows["window_start_s"].to_list()
        got = rows["requests"].to_list()
        assert windows == [windows[0] + i * step for i in range(len(windows))]  # contiguous
        assert windows[0] <= start + step and windows[-1] >= end - 2 * step
        for w0, value in zip(windows, got, strict=True):
            w1 = w0 + step
            k0, k1 = (int(w0) - T1 - 1) // SCRAPE, (int(w1) - T1 - 1) // SCRAPE
            if eng == "1" and k0 < RESET_AT <= k1:  # increase() across the restart: with one
                assert value is None or value >= 0, (step, w0, value)  # sample, unknown
                continue
            assert value == _at(eng, w1) - _at(eng, w0), (eng, step, w0)
        if eng == "0":  # the range's total is the counter's own delta over it
            assert sum(got) == _at("0", windows[-1] + step) - _at("0", windows[0])
        prompt = rows["prompt_tokens"].to_list()
        assert prompt == [None if v is None else 10 * v for v in got]
