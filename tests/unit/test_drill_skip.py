"""The ``auto`` drill-downs skip instances whose drill would find nothing: the groups
``detect.quiet_groups`` scores at once are among those a judge of each instance alone finds no
hot, starved or cold unit in, and the report is the one with every instance drilled into; a
matrix computes each unit summary once."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis import diagnose as diagnose_mod
from skewscope.analysis.detect import detect, floors, quiet_groups
from skewscope.analysis.matrix import build_matrix, sub_matrix
from skewscope.analysis.summary import unit_summary
from skewscope.config import DEFAULT_THRESHOLDS as TH
from skewscope.frame import Evidence, Level, UnitFrame
from skewscope.report.document import report_document

RANKS = 4


def _spec(i: int, r: int, seed: int) -> Spec:
    """Instances of different request sizes (the tokens floor is each instance's own), some
    with one odd rank: hot, starved, slow, stalled, or a cold minority."""
    rng = np.random.default_rng(seed * 100 + i)  # one request size an instance
    base = Spec(
        rate=20.0,
        prompt=float(rng.choice([200.0, 1000.0, 6000.0])),
        output=float(rng.choice([50.0, 200.0])),
    )
    odd = {
        1: Spec(rate=40.0),
        2: Spec(rate=2.0),
        3: Spec(rate=20.0, speed=2.5),
        4: Spec(rate=20.0, stalled_from=8),
        5: Spec(rate=9.0),
    }.get(i % 9)
    if odd is not None and r == 0:
        return replace(odd, prompt=base.prompt, output=base.output)
    return base


def _fleet(seed: int, instances: int = 12) -> tuple[UnitFrame, UnitFrame]:
    dp = make_frame(
        {f"i{i:02d}/dp{r}": _spec(i, r, seed) for i in range(instances) for r in range(RANKS)},
        level=Level.DP,
        seed=seed,
    )
    # one instance joined late: its drill has fewer windows than the fleet, never skipped
    first = dp.df["window_start_s"].min()
    late = (pl.col("instance") == "i07") & (pl.col("window_start_s") < first + 30)
    dp = replace(dp, df=dp.df.filter(~late))
    inst = make_frame(
        {f"i{i:02d}": Spec(rate=80.0 * (1.8 if i == 6 else 1.0)) for i in range(instances)},
        seed=seed,
    )
    return inst, dp


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_quiet_groups_are_instances_a_judge_alone_finds_quiet(seed: int) -> None:
    _, dp = _fleet(seed)
    whole = build_matrix(dp.df, group_by_instance=True, window_s=dp.window_s)
    quiet = quiet_groups(whole, dp.window_s, TH)
    full = [i for i in sorted(set(whole.groups)) if i != "i07"]
    for inst in full:
        cols = [j for j, g in enumerate(whole.groups) if g == inst]
        alone = detect(sub_matrix(whole, cols, whole.windows), dp.window_s, TH)
        busy = any(h.persistent_hot or h.persistent_starved or h.persistent_cold for h in alone)
        if busy:
            assert inst not in quiet, inst
    assert quiet and set(full) - quiet, "both kinds of instance are in the fleet"
    # a rank hot in most windows keeps its instance, even without the run the rule needs
    assert "i01" not in quiet and "i02" not in quiet


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_skipping_quiet_drills_keeps_the_report(seed: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    inst, dp = _fleet(seed)
    skipped: list[set[str]] = []
    real = diagnose_mod._nothing_inside

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        skipped.append(out)
        return out

    monkeypatch.setattr(diagnose_mod, "_nothing_inside", spy)
    got = diagnose_mod.diagnose(Evidence(instance=inst, dp=dp), level="auto")
    assert got.verdict == "imbalanced" and got.drilldown
    assert skipped and skipped[0], "some drills were skipped"
    assert "i07" not in skipped[0]  # joined late: its drill has fewer windows
    # the hot instance is drilled into whatever its ranks look like
    assert "i06" in {d.units[0].instance for d in got.drilldown}
    monkeypatch.setattr(diagnose_mod, "_nothing_inside", lambda *a, **k: set())
    every = diagnose_mod.diagnose(Evidence(instance=inst, dp=dp), level="auto")
    assert report_document(got) == report_document(every)


def test_per_group_floors_are_each_instance_alone() -> None:
    _, dp = _fleet(1)
    whole = build_matrix(dp.df, group_by_instance=True, window_s=dp.window_s)
    got = floors(whole, dp.window_s, TH, per_group=True)
    fleet = floors(whole, dp.window_s, TH)
    for inst in sorted(set(whole.groups)):
        cols = [j for j, g in enumerate(whole.groups) if g == inst]
        alone = floors(sub_matrix(whole, cols, whole.windows), dp.window_s, TH)
        for sig, value in alone.items():
            per_unit = np.broadcast_to(got[sig], (len(whole.units),))
            assert np.all(per_unit[cols] == value), (inst, sig)
    # the instances' request sizes differ, so the fleet's tokens floor is none of theirs alone
    assert len(set(np.asarray(got["total_tokens"]).tolist())) > 1
    assert np.ndim(fleet["total_tokens"]) == 0


def test_unit_summaries_are_computed_once_per_matrix_and_copied() -> None:
    _, dp = _fleet(1)
    m = build_matrix(dp.df, group_by_instance=True, window_s=dp.window_s)
    every = np.ones(len(m.windows), dtype=bool)
    first = unit_summary(m, 0, every)
    first["requests_per_s"] = -1.0  # a caller's change stays its own
    again = unit_summary(m, 0, every)
    assert again["requests_per_s"] > 0 and len(m.summaries) == 1
    fewer = every.copy()
    fewer[:3] = False
    assert unit_summary(m, 0, fewer) != again and len(m.summaries) == 2
    # a matrix made from this one by dataclasses.replace starts without its summaries
    assert replace(m, values={k: v * 2 for k, v in m.values.items()}).summaries == {}
