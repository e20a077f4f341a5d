"""forward.csv, offline: each device's forward passes give its busy share (``device_util``), the
per-step price of DP skew and the device-or-host verdict, on simulated runs whose steps are the
truth (the simulator writes forward.csv as msServiceProfiler does, in every header generation).
Bad rows are located one-line errors or noted, never a traceback."""

from __future__ import annotations

import contextlib
import io
import math
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from helpers.profiler_fixtures import set_cell
from skewscope.analysis.diagnose import diagnose
from skewscope.cli import main
from skewscope.report.document import lines, report_document
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.profiler import write_profiler
from skewscope.sources.profiler import load_profiler

WINDOW = 10.0


@cache
def run(name: str) -> SimResult:
    return simulate(builtin_scenarios()[name])


def _steps(result: SimResult) -> pl.DataFrame:
    return result.steps.sort("instance", "dp_rank", "start_s").with_columns(
        ((pl.col("end_s") - pl.col("start_s")) * 1000.0).alias("ms"),
        pl.int_range(1, pl.len() + 1).over("instance", "dp_rank").alias("step"),
    )


@pytest.mark.parametrize("generation", ["current", "dec2025", "cann2025"])
def test_device_busy_share_per_rank_is_the_forward_time_of_each_window(
    tmp_path: Path, generation: str
) -> None:
    result = run("dp-count")
    write_profiler(result, tmp_path, generation)
    ev = load_profiler([str(tmp_path)], window_s=WINDOW)
    assert ev.dp is not None and ev.dp.aliases["device_util"] == "forward.csv:during_time(ms)"
    truth = (
        _steps(result)
        .group_by("dp_rank", (pl.col("start_s") / WINDOW).floor().alias("w"))
        .agg((pl.col("ms").sum() / (WINDOW * 1000.0)).clip(upper_bound=1.0).alias("want"))
    )
    got = (
        ev.dp.df.select(
            "dp_rank", (pl.col("window_start_s") / WINDOW).round(0).alias("w"), "device_util"
        )
        .join(truth, on=["dp_rank", "w"], how="left")
        .with_columns(pl.col("want").fill_null(0.0))
    )
    assert got.height > 20
    assert (got["device_util"] - got["want"]).abs().max() < 1e-4  # type: ignore[operator]
    # the instance is the mean of its ranks' devices
    inst = ev.instance.df.sort("window_start_s")["device_util"].to_numpy()
    per_window = got.group_by("w").agg(pl.col("want").mean()).sort("w")["want"].to_numpy()
    assert abs(inst - per_window).max() < 1e-4


def test_the_price_of_dp_skew_is_taken_per_step(tmp_path: Path) -> None:
    """dp-count: rank 0 gets twice the requests. Per forward iteration the four ranks' batches
    give 1 − mean/max, weighted by the step's longest pass: that is the price reported."""
    result = run("dp-count")
    write_profiler(result, tmp_path)
    report = diagnose(load_profiler([str(tmp_path)], window_s=WINDOW), level="dp")
    (price,) = report.skew_price
    steps = _steps(result)
    common = (
        steps.group_by("step")
        .agg(
            pl.len().alias("n"),
            (1.0 - pl.col("batch_size").mean() / pl.col("batch_size").max()).alias("share"),
            pl.col("batch_size").max().alias("peak"),
            pl.col("ms").max(),
        )
        .filter((pl.col("n") == 4) & (pl.col("peak") > 0))
    )
    want = float((common["share"] * common["ms"]).sum() / common["ms"].sum())
    assert price.basis == "forward_batch" and price.steps == common.height
    assert math.isclose(price.idle_share, want, rel_tol=1e-3)
    hours = float((common["share"] * common["ms"]).sum()) * 4 / 3.6e6
    assert math.isclose(price.device_hours, hours, rel_tol=1e-3)
    assert any("the batch of each forward step" in n for n in lines(report.notes)), report.notes


@pytest.mark.parametrize(
    ("forward_scale", "cause", "ratio"),
    [
        (1.0, "device_or_process", "device_cost_ratio"),
        (1 / 1.8, "scheduler_bound", "step_cost_ratio"),
    ],
)
def test_a_slow_unit_is_told_device_from_host_by_its_forward_cost(
    tmp_path: Path, forward_scale: float, cause: str, ratio: str
) -> None:
    """slow-device: every device steps all the time (busy ~93 %, so none is "busier"), but
    inst-1's forwards take 1.8x what its peers' cost model predicts for the same work: the
    device. With its forward passes cut back to its peers' speed (÷1.8) while its steps
    (batch.csv execution rows) stay 1.8x slow, the time goes around the device: the host and
    scheduler."""
    write_profiler(run("slow-device"), tmp_path)
    f = tmp_path / "inst-1" / "forward.csv"
    fwd = pl.read_csv(f, infer_schema=False)
    during = (pl.col("during_time(ms)").cast(pl.Float64) * forward_scale).round(3)
    fwd.with_columns(during.cast(pl.Utf8).alias("during_time(ms)")).write_csv(f, null_value="")
    doc = report_document(diagnose(load_profiler([str(tmp_path)])))
    (finding,) = doc["findings"]
    assert finding["units"] == ["inst-1"] and finding["kind"] == "capability"
    assert finding["root_causes"][0]["key"] == cause
    ev = finding["evidence"]
    assert ev["device_busier"] is False  # busy all the time, or at its peers' share
    assert ev["device_saturated"] is (cause == "device_or_process")
    assert ev["device_slower"] is (cause == "device_or_process")
    assert ev["host_bound"] is (cause == "scheduler_bound")
    assert math.isclose(ev[ratio], 1.8, rel_tol=0.05)


# --------------------------------------------------------------------------- trust
def _forward(tmp_path: Path) -> Path:
    write_profiler(run("dp-count"), tmp_path)
    return tmp_path / "inst-0" / "forward.csv"


def test_a_bad_cell_is_one_located_line(tmp_path: Path) -> None:
    f = _forward(tmp_path)
    set_cell(f, 7, "during_time(ms)", "fast")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["diagnose", str(tmp_path)])
    text = err.getvalue()
    assert rc == 3 and text.count("\n") == 1, text
    assert f"{f}: line 7, column 'during_time(ms)': 'fast' is not a number" in text


def test_impossible_and_repeated_rows_are_noted_not_counted(tmp_path: Path) -> None:
    f = _forward(tmp_path)
    set_cell(f, 5, "during_time(ms)", "-3")
    lines = f.read_text().splitlines()
    f.write_text("\n".join([*lines, lines[9]]) + "\n")  # a forward written twice
    notes = load_profiler([str(tmp_path)]).notes
    assert any("during_time(ms) outside 0..2.592e+09 (first: -3 at line 5)" in n for n in notes)
    assert any("row(s) have no during_time(ms)" in n for n in notes), notes
    assert any("1 row(s) repeat a device's forward_iter" in n for n in notes), notes
