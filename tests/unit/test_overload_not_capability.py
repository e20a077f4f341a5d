"""A rank slowed by its own overload (more running, KV near full, preemptions) is not a weaker
rank: its service time, compared with peers at far lower concurrency, is no capability signal
(issue 21, 2b: it read "1.47x the service time at equal load: capability skew")."""

from __future__ import annotations

import polars as pl

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose
from skewscope.frame import Evidence, Level
from skewscope.report.document import summary

UNITS = [f"i/dp{r}" for r in range(4)]


def overloaded_rank(*, cost: float = 1.0) -> Evidence:
    """dp0 gets its fair share of requests (counted as they finish), yet holds 3.4x the running
    requests at 98 % KV with preemptions, and its requests take 1.47x as long in service;
    ``cost`` scales its execution time per scheduled token (1.0: as fast as its peers)."""
    frame = make_frame({u: Spec() for u in UNITS}, level=Level.DP, source="prometheus")
    hot = pl.col("unit") == UNITS[0]
    df = frame.df.with_columns(
        pl.when(hot).then(pl.col("running") * 3.4).otherwise(pl.col("running")).alias("running"),
        pl.when(hot).then(0.95).otherwise(pl.col("kv_usage")).alias("kv_usage"),
        pl.when(hot).then(0.98).otherwise(pl.col("kv_usage_max")).alias("kv_usage_max"),
        pl.when(hot).then(5.0).otherwise(0.0).alias("preemptions"),
        pl.when(hot)
        .then(pl.col("e2e_mean_ms") * 1.47)
        .otherwise(pl.col("e2e_mean_ms"))
        .alias("e2e_mean_ms"),
        pl.when(hot).then(pl.col("busy_ms") * cost).otherwise(pl.col("busy_ms")).alias("busy_ms"),
    )
    from dataclasses import replace

    return Evidence(instance=make_frame({"i": Spec()}), dp=replace(frame, df=df))


def test_an_overloaded_rank_is_not_called_capability() -> None:
    report = diagnose(overloaded_rank(), level="dp")
    assert report.hot_units == (UNITS[0],)
    (f,) = [f for f in report.findings if f.units == (UNITS[0],) and f.kind != "kv_shortage"]
    assert f.kind == "unknown", summary(f)
    assert f.evidence["capability_not_judged"] == "overloaded"
    assert f.root_causes[0] != "capability_mismatch"
    assert "overload" in summary(f)


def test_an_overloaded_rank_slower_per_token_is_still_capability() -> None:
    """Execution time per scheduled token is measured at the batch the rank ran, so it still
    tells a weaker rank under overload (1.8x here)."""
    report = diagnose(overloaded_rank(cost=1.8), level="dp")
    (f,) = [f for f in report.findings if f.units == (UNITS[0],) and f.kind != "kv_shortage"]
    assert f.kind == "capability", summary(f)
    assert f.evidence["capability_basis"] == "cost_us_per_token"
    assert "execution time per scheduled token" in summary(f)
