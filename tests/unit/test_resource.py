"""Method step 4 beyond the KV peak: is the hot unit's device full (capability with a busier
device -> device or process; a growing queue on an unsaturated device -> KV or scheduler
bound), the KV block shortage finding, and the price of DP skew (1 - mean/max)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.analysis.matrix import build_matrix
from skewscope.analysis.price import skew_price
from skewscope.frame import Level, UnitFrame
from skewscope.report.document import (
    actions,
    finding_document,
    lines,
    report_document,
    summary,
)

FOUR = ("a", "b", "c", "d")


def even(**over: Spec) -> dict[str, Spec]:
    return {u: over.get(u, Spec()) for u in FOUR}


def with_columns(frame: UnitFrame, unit: str, **values: float) -> UnitFrame:
    """The frame with ``values`` set on ``unit``'s rows (other units keep theirs)."""
    df = frame.df.with_columns(
        pl.when(pl.col("unit") == unit).then(pl.lit(v)).otherwise(pl.col(k)).alias(k)
        for k, v in values.items()
    )
    return UnitFrame(df=df, level=frame.level, window_s=frame.window_s, source=frame.source)


def everywhere(frame: UnitFrame, **values: float) -> UnitFrame:
    df = frame.df.with_columns(pl.lit(v).alias(k) for k, v in values.items())
    return UnitFrame(df=df, level=frame.level, window_s=frame.window_s, source=frame.source)


@pytest.mark.parametrize(
    ("hot_util", "first"), [(0.95, "device_or_process"), (0.5, "scheduler_bound")]
)
def test_capability_skew_names_the_device_only_when_it_is_busier(
    hot_util: float, first: str
) -> None:
    """d's steps take 1.9x as long: with a busier device it is the device; with its device as
    busy as its peers' for the same steps and tokens, the time goes around the device (host /
    scheduler, the profiler's bubbles)."""
    frame = everywhere(make_frame(even(d=Spec(speed=1.9))), device_util=0.5)
    report = diagnose_frame(with_columns(frame, "d", device_util=hot_util))
    (f,) = report.findings
    assert f.kind == "capability"
    assert f.root_causes[0] == first
    assert f.evidence["device_basis"] == "device_util"
    assert f.evidence["device_busier"] is (hot_util == 0.95)
    assert ("device or the process on it is slower" in summary(f)) is (hot_util == 0.95)
    assert f.evidence["host_bound"] is (hot_util == 0.5)
    assert math.isclose(f.evidence["step_cost_ratio"], 1.9, rel_tol=0.1)


def test_device_time_against_the_peers_cost_model() -> None:
    """d's device works 1.9x as long as the peers' cost model (a x steps + c x tokens)
    predicts for its own steps and tokens. (A device busy all the time, never "busier", is the
    simulated slow-device case in test_profiler_forward.py.)"""
    frame = make_frame(even(d=Spec(speed=1.9)))
    df = frame.df.with_columns((pl.col("busy_ms") / (frame.window_s * 1000.0)).alias("device_util"))
    report = diagnose_frame(
        UnitFrame(df=df, level=frame.level, window_s=frame.window_s, source=frame.source)
    )
    (f,) = report.findings
    assert f.kind == "capability" and f.root_causes[0] == "device_or_process"
    assert math.isclose(f.evidence["device_cost_ratio"], 1.9, rel_tol=0.1)


def test_busy_share_alone_never_blames_the_device() -> None:
    """A slower unit always spends more time in steps: busy share cannot tell device from
    configuration, so without a device metric the cause stays capability_mismatch."""
    report = diagnose_frame(make_frame(even(d=Spec(speed=1.9))))
    (f,) = report.findings
    assert f.evidence["device_basis"] == "busy_share"
    assert f.root_causes[0] == "capability_mismatch"


def saturated(util: float, kv_peak: float, preempt: float) -> UnitFrame:
    """d gets twice the traffic but finishes at most 28 per window: its batch sits at 16 and
    its queue grows."""
    frame = make_frame(even(d=Spec(rate=40.0, ceiling=28.0)), source="prometheus")
    frame = everywhere(frame, device_util=0.45, preemptions=0.0, kv_usage_max=0.5)
    return with_columns(frame, "d", device_util=util, kv_usage_max=kv_peak, preemptions=preempt)


def test_queue_growing_on_an_unsaturated_device_is_scheduler_or_kv_bound() -> None:
    report = diagnose_frame(saturated(util=0.4, kv_peak=0.5, preempt=0.0))
    (f,) = report.findings
    assert f.units == ("d",) and f.evidence["queue_growing"]
    assert "scheduler_bound" in f.root_causes
    assert "KV capacity or the scheduler limits it, not compute" in summary(f)
    # the queue symptoms hold, but without a KV symptom there is no KV shortage finding
    assert f.evidence["kv_shortage"] == ["batch_at_ceiling", "waiting_grows_running_flat"]
    # the same queue on a saturated device is compute-bound: no scheduler cause
    report = diagnose_frame(saturated(util=0.97, kv_peak=0.5, preempt=0.0))
    assert "scheduler_bound" not in report.findings[0].root_causes


def test_kv_shortage_is_a_finding_of_its_own_with_the_fixes_in_order() -> None:
    report = diagnose_frame(saturated(util=0.4, kv_peak=0.99, preempt=3.0))
    kinds = [f.kind for f in report.findings]
    assert kinds == ["count", "kv_shortage"]
    kv = report.findings[1]
    assert kv.units == ("d",) and kv.severity == "high"
    assert {"kv_high", "batch_at_ceiling", "preemptions"} <= set(kv.evidence["symptoms"])
    assert kv.root_causes[0] == "kv_shortage"
    assert actions(kv)[0].startswith("Move traffic off the unit first")
    assert "prefix caching" in actions(kv)[-1]
    assert "KV usage peaks at 99%" in summary(kv)
    assert finding_document(kv)["kind"] == "kv_shortage"
    # the hot finding itself points at it, and KV exhaustion (not the scheduler) comes first
    hot = report.findings[0]
    assert hot.root_causes[0] == "kv_exhaustion"
    assert "scheduler_bound" not in hot.root_causes
    assert "see the kv_shortage finding" in summary(hot)


def test_kv_shortage_from_free_blocks_offline() -> None:
    """Offline (kvcache.csv): free blocks falling to ~0 of the unit's own free capacity, with
    blocks allocated outpacing blocks freed."""
    frame = make_frame(even(d=Spec(rate=40.0, ceiling=28.0)))
    frame = everywhere(frame, free_blocks_min=800.0, blocks_allocated=100.0, blocks_freed=100.0)
    df = frame.df.with_columns(
        pl.when(pl.col("unit") == "d")
        .then(
            pl.when(pl.col("window_start_s") == pl.col("window_start_s").min())
            .then(900.0)
            .otherwise(10.0)
        )
        .otherwise(pl.col("free_blocks_min"))
        .alias("free_blocks_min"),
        pl.when(pl.col("unit") == "d")
        .then(150.0)
        .otherwise(pl.col("blocks_allocated"))
        .alias("blocks_allocated"),
    )
    report = diagnose_frame(
        UnitFrame(df=df, level=frame.level, window_s=frame.window_s, source="profiler")
    )
    kv = next(f for f in report.findings if f.kind == "kv_shortage")
    assert {"kv_high", "alloc_outpaces_free", "batch_at_ceiling"} <= set(kv.evidence["symptoms"])
    assert "free KV blocks fall to 10 (of up to 900 free)" in summary(kv)


def dp_frame(busy: dict[int, float], windows: int = 12, window_s: float = 30.0) -> UnitFrame:
    rows = [
        {
            "window_start_s": 1.7e9 + w * window_s,
            "unit": f"i:1/dp{r}",
            "instance": "i:1",
            "dp_rank": r,
            "requests": 10.0,
            "busy_ms": b,
            "running": 2.0,
        }
        for w in range(windows)
        for r, b in busy.items()
    ]
    from skewscope.frame import conform

    return UnitFrame(
        df=conform(pl.DataFrame(rows)), level=Level.DP, window_s=window_s, source="prometheus"
    )


@pytest.mark.parametrize(
    ("busy", "idle"),
    [
        ({0: 900.0, 1: 300.0}, 1 / 3),
        ({0: 500.0, 1: 500.0}, 0.0),
        ({0: 800.0, 1: 200.0, 2: 200.0, 3: 0.0}, 1 - 300.0 / 800.0),
    ],
)
def test_price_is_one_minus_mean_over_max_in_device_hours(
    busy: dict[int, float], idle: float
) -> None:
    frame = dp_frame(busy)
    m = build_matrix(frame.df, group_by_instance=True, window_s=frame.window_s)
    (p,) = skew_price(m)
    assert p.basis == "busy_ms" and p.ranks == len(busy) and p.windows == 12
    assert p.idle_share == pytest.approx(idle)
    assert p.device_hours == pytest.approx(idle * 12 * len(busy) * 30.0 / 3600.0)


def test_price_is_in_the_dp_report_and_its_json() -> None:
    frame = make_frame(
        {f"i/dp{r}": Spec(rate=40.0 if r == 0 else 20.0) for r in range(4)}, level=Level.DP
    )
    report = diagnose_frame(frame)
    (p,) = report.skew_price
    assert p.instance == "i" and 0.1 < p.idle_share < 0.5
    doc = report_document(report)
    assert doc["skew_price"][0]["idle_share"] == pytest.approx(p.idle_share, abs=1e-6)
    assert any(n.startswith("price of DP skew on i:") for n in lines(report.notes))
    assert not math.isnan(doc["skew_price"][0]["device_hours"])
    assert diagnose_frame(make_frame(even())).skew_price == ()  # instance level: no price


def test_renderers_and_watch_name_the_kv_shortage_without_calling_it_a_skew() -> None:
    from skewscope.monitor.units import hot_units
    from skewscope.report.document import headline
    from skewscope.report.fmt import finding_title

    report = diagnose_frame(saturated(util=0.4, kv_peak=0.99, preempt=3.0))
    assert headline(report).endswith("(count skew).")
    assert "KV block shortage on d" in headline(report)
    assert finding_title(report.findings[1]) == "[HIGH] KV block shortage — d"
    assert [h.kind for h in hot_units(report)] == ["count"]  # its own finding, not the KV one


def test_a_hurting_unit_is_not_also_said_to_have_no_impact() -> None:
    (f, _) = diagnose_frame(saturated(util=0.4, kv_peak=0.99, preempt=3.0)).findings
    assert "Impact against its peers:" in summary(f)
    assert "No measurable queueing or latency impact yet" not in summary(f)
