"""The percentiles the Prometheus source works out from per-rank buckets (``prom_plan``,
``prom_quantile``) are the floats a real Prometheus' ``histogram_quantile`` answers for the same
buckets, at rank level and summed per instance.

Prometheus is asked about literal buckets (``label_replace(vector(count), "le", ...)``), so any
bucket layout can be tried: unsorted and repeated bounds (``1.5`` and ``1.5e0``), a missing
+Inf bucket, non-monotonic, zero, NaN and infinite counts, negative bounds, ranks with different
bucket sets, quantiles on and between bounds.
"""

from __future__ import annotations

import math

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skewscope.frame import Level
from skewscope.sources.dialects import SignalSpec, get_dialect
from skewscope.sources.prom_plan import Row, bucket_quantiles

BOUNDS = (-1.0, 0.0, 0.005, 0.1, 0.25, 0.5, 1.0, 1.5, 2.5, 10.0, math.inf)
COUNTS = st.one_of(
    st.integers(0, 40).map(float), st.sampled_from([0.0, 0.5, 1e-9, 2.5, math.nan, math.inf, -1.0])
)
ALIAS = get_dialect("vllm").roles["ttft"][0]


def _spelled(bound: float, second: bool) -> str:
    if math.isinf(bound):
        return "+Inf" if not second else "Inf"
    return repr(bound) + ("e0" if second else "")


def _number(v: float) -> str:
    return "NaN" if math.isnan(v) else ("Inf" if v == math.inf else repr(v))


@st.composite
def fleets(draw: st.DrawFn) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """(instance, rank) -> [(le text, count)]: two instances of two ranks."""
    bounds = draw(st.lists(st.sampled_from(BOUNDS), min_size=1, max_size=6, unique=True))
    twice = draw(st.sampled_from([None, *bounds]))  # one bound also spelled another way
    out = {}
    for inst in ("a", "b"):
        for rank in ("0", "1"):
            have = draw(st.lists(st.sampled_from(bounds), min_size=1, unique=True))
            les = [(_spelled(b, False), draw(COUNTS)) for b in have]
            if twice in have:
                les.append((_spelled(twice, True), draw(COUNTS)))
            out[(inst, rank)] = les
    return out


def _prometheus(
    url: str, q: float, fleet: dict[tuple[str, str], list[tuple[str, float]]], by: str
) -> dict[str, float]:
    parts = [
        f'label_replace(label_replace(label_replace(vector({_number(c)}), "le", "{le}", "", ""),'
        f' "instance", "{inst}", "", ""), "engine", "{rank}", "", "")'
        for (inst, rank), les in fleet.items()
        for le, c in les
    ]
    query = f"histogram_quantile({q!r}, sum by ({by}, le) ({' or '.join(parts)}))"
    r = httpx.get(f"{url}/api/v1/query", params={"query": query, "time": "1000"}, timeout=30)
    assert r.status_code == 200, r.text
    return {
        "/".join(s["metric"][k.strip()] for k in by.split(",")): float(s["value"][1])
        for s in r.json()["data"]["result"]
    }


def _same(a: float, b: float) -> bool:
    """Equal to the last bits: Go may fuse the interpolation's multiply-add (one rounding
    where numpy rounds twice: 0.005 + 0.095 * 0.4 is 0.043 there, 0.043000000000000003
    here), and the table's milliseconds are divided back to seconds."""
    return (math.isnan(a) and math.isnan(b)) or a == b or math.isclose(a, b, rel_tol=1e-14)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fleet=fleets(), q=st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]), st.floats(0.0, 1.0))
)
def test_client_percentiles_are_prometheus_histogram_quantile(
    prometheus_url: str, fleet: dict[tuple[str, str], list[tuple[str, float]]], q: float
) -> None:
    rows: list[Row] = [
        ({"instance": inst, "engine": rank, "le": le}, (1000.0,), [c])
        for (inst, rank), les in fleet.items()
        for le, c in les
    ]
    spec = SignalSpec("ttft_p99_ms", "ttft", "quantile", quantile=q)
    bad: list[str] = []
    tables, les = bucket_quantiles(rows, spec, ALIAS, 60.0, bad)
    assert not bad
    for level, by in ((Level.DP, "instance, engine"), (Level.INSTANCE, "instance")):
        want = _prometheus(prometheus_url, q, fleet, by)
        got = {
            k[1] + ("" if k[2] is None else f"/{k[2]}"): v / 1000.0
            for k, v in tables[level].items()
        }
        assert got.keys() == want.keys()
        for unit, value in want.items():
            assert _same(got[unit], value), (level, unit, got[unit], value)
    assert les == {
        b
        for les_ in fleet.values()
        for le, _ in les_
        for b in [float(le.replace("+Inf", "inf").replace("Inf", "inf"))]
    }


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_a_rank_without_buckets_in_a_window_has_no_percentile_there(
    prometheus_url: str, q: float
) -> None:
    # rank 0 has buckets at both evaluation times, rank 1 only at the second: PromQL answers
    # rank 1 at the second time only, and the instance from whatever ranks answered
    rows: list[Row] = [
        ({"instance": "a", "engine": "0", "le": "0.5"}, (60.0, 120.0), [1.0, 3.0]),
        ({"instance": "a", "engine": "0", "le": "+Inf"}, (60.0, 120.0), [2.0, 4.0]),
        ({"instance": "a", "engine": "1", "le": "0.5"}, (120.0,), [5.0]),
        ({"instance": "a", "engine": "1", "le": "+Inf"}, (120.0,), [5.0]),
    ]
    spec = SignalSpec("ttft_p99_ms", "ttft", "quantile", quantile=q)
    tables, _ = bucket_quantiles(rows, spec, ALIAS, 60.0, [])
    assert set(tables[Level.DP]) == {(0.0, "a", 0), (60.0, "a", 0), (60.0, "a", 1)}
    assert set(tables[Level.INSTANCE]) == {(0.0, "a", None), (60.0, "a", None)}
    # at the second time the instance sums both ranks: 8 of 9 at or below 0.5
    rank = q * 9
    want = 0.5 * (rank / 8) if rank <= 8 else 0.5
    assert tables[Level.INSTANCE][(60.0, "a", None)] == pytest.approx(1000 * want)
