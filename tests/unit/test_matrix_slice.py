"""A drill's slice of the fleet's DP matrix is the matrix of that instance's rows alone, and the
``auto`` drill-down built from slices gives the same report as one built instance by instance."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose, diagnose_frame
from skewscope.analysis.matrix import build_matrix, sub_matrix
from skewscope.frame import Evidence, Level
from skewscope.report.document import report_document


def _dp_fleet() -> pl.DataFrame:
    specs = {
        f"i{i}/dp{r}": Spec(rate=20.0 * (2.0 if (i, r) == (1, 0) else 1.0))
        for i in range(3)
        for r in range(3)
    }
    df = make_frame(specs, level=Level.DP).df
    # instance i2 joined late: no rows in the first four windows
    first = df["window_start_s"].min()
    return df.filter(~((pl.col("instance") == "i2") & (pl.col("window_start_s") < first + 40)))


def test_slice_equals_the_instance_matrix() -> None:
    df = _dp_fleet()
    whole = build_matrix(df, group_by_instance=True, window_s=10.0)
    for inst in ("i0", "i1", "i2"):
        part = df.filter(pl.col("instance") == inst)
        want = build_matrix(part, group_by_instance=True, window_s=10.0)
        units = [j for j, i in enumerate(whole.instances) if i == inst]
        got = sub_matrix(whole, units, part["window_start_s"].unique().to_numpy())
        assert got.units == want.units and got.groups == want.groups
        assert got.dp_ranks == want.dp_ranks and got.instances == want.instances
        assert np.array_equal(got.windows, want.windows)
        assert got.values.keys() == want.values.keys()
        for k in want.values:
            assert np.array_equal(got.values[k], want.values[k], equal_nan=True), k
        assert got.bounds.keys() == want.bounds.keys()


def test_auto_drilldown_from_slices_is_the_per_instance_report() -> None:
    dp = make_frame(
        {
            f"i{i}/dp{r}": Spec(rate=20.0 * (2.0 if (i, r) == (1, 0) else 1.0))
            for i in range(3)
            for r in range(3)
        },
        level=Level.DP,
    )
    inst = make_frame({"i0": Spec(rate=60.0), "i1": Spec(rate=120.0), "i2": Spec(rate=60.0)})
    report = diagnose(Evidence(instance=inst, dp=dp), level="auto")
    assert report.drilldown, "the hot instance i1 is drilled into"
    for drill in report.drilldown:
        only = dp.df["instance"] == drill.units[0].instance
        alone = diagnose_frame(replace(dp, df=dp.df.filter(only), notes=()))
        assert report_document(drill) == report_document(alone)
