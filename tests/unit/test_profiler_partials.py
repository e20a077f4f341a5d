"""The profiler reader at fleet scale: (rank, tick) partials give the frames the rows give,
instances read concurrently within a memory budget, the first bad instance's error, progress."""

from __future__ import annotations

import threading
from pathlib import Path

import polars as pl
import pytest

from helpers.profiler_fixtures import T0, KvSnap, set_cell, simple_instance, write_kvcache
from skewscope.errors import SchemaError
from skewscope.frame import SIGNAL_COLUMNS, Level
from skewscope.sources import profiler as prof
from skewscope.sources import profiler_pool as pool
from skewscope.sources.profiler_frame import DP_LEVEL, INSTANCE_LEVEL, make_grid, unit_frame
from skewscope.sources.profiler_instance import Instance, load_instance
from skewscope.sources.profiler_layout import discover_all
from skewscope.sources.profiler_partials import reduce_instance


def _fleet(tmp_path: Path, n: int = 3) -> list[str]:
    """Instances whose steps fall at uneven sub-second times (periods 0.37 s, 0.61 s, ...)."""
    specs = []
    for i in range(n):
        folder = tmp_path / f"inst-{i}"
        folder.mkdir()
        simple_instance(folder, 80 + 15 * i, ranks=2 + i % 2, period_s=0.37 + 0.24 * i)
        if i == 0:
            write_kvcache(
                folder / "kvcache.csv",
                [
                    KvSnap(T0 + 0.7 * k, 100 + 7 * k, allocated=k % 3, freed=k % 2)
                    for k in range(60)
                ],
            )
        specs.append(str(folder))
    return specs


def _rows_frames(specs: list[str], window_s: float | None) -> dict[Level, pl.DataFrame]:
    """The frames built from the instances' rows, reduced at the window itself."""
    instances = [load_instance(f) for f in discover_all(specs)]
    assert all(i.tick_s is None for i in instances)
    grid = make_grid(instances, window_s)
    dp = [i for i in instances if i.has_dp]
    return {
        Level.INSTANCE: unit_frame(instances, INSTANCE_LEVEL, grid, []).df,
        Level.DP: unit_frame(dp, DP_LEVEL, grid, []).df,
    }


@pytest.mark.parametrize("window_s", [None, 2.5, 7.0])
def test_partials_give_the_frames_the_rows_give(tmp_path: Path, window_s: float | None) -> None:
    specs = _fleet(tmp_path)
    ev = prof.load_profiler(specs, window_s=window_s)
    assert ev.dp is not None
    expected = _rows_frames(specs, window_s)
    for got in (ev.instance, ev.dp):
        want = expected[got.level]
        assert got.df.select("window_start_s", "unit").equals(want.select("window_start_s", "unit"))
        for col in SIGNAL_COLUMNS:
            a, b = got.df[col], want[col]
            assert a.is_null().equals(b.is_null()), col
            assert ((a - b).abs() <= 1e-9 * (1 + b.abs())).fill_null(True).all(), col


def test_steps_per_window_match_the_written_steps(tmp_path: Path) -> None:
    rows = []
    for i, period in enumerate((0.37, 0.61)):
        folder = tmp_path / f"inst-{i}"
        folder.mkdir()
        _, steps = simple_instance(folder, 90, ranks=2, period_s=period)
        rows += [(f"inst-{i}", st.dp_rank, st.start_s // 5 * 5) for st in steps]
    ev = prof.load_profiler([str(tmp_path)], window_s=5.0)
    assert ev.dp is not None
    want = pl.DataFrame(rows, schema=["instance", "dp_rank", "window_start_s"], orient="row")
    want = want.group_by("instance", "dp_rank", "window_start_s").agg(pl.len().alias("n"))
    got = ev.dp.df.filter(pl.col("steps") > 0).select(
        "instance", "dp_rank", "window_start_s", pl.col("steps").cast(pl.UInt32).alias("n")
    )
    key = ["instance", "dp_rank", "window_start_s"]
    assert got.sort(key).equals(want.sort(key).select(got.columns))


def test_reduced_instance_keeps_its_exact_span(tmp_path: Path) -> None:
    specs = _fleet(tmp_path, n=1)
    inst = load_instance(discover_all(specs)[0])
    reduced = reduce_instance(inst, 1.0)
    assert reduced.span() == inst.span()
    assert reduced.steps is not None and inst.steps is not None
    assert reduced.steps.height < inst.steps.height
    assert reduce_instance(reduced, 1.0) is reduced
    with pytest.raises(ValueError):
        reduce_instance(reduced, 2.0)


def test_first_bad_instance_in_order_is_the_error(tmp_path: Path) -> None:
    specs = _fleet(tmp_path, n=3)
    for i in (1, 2):  # a non-numeric batch_size in the second and third instance
        set_cell(Path(specs[i]) / "batch.csv", 3, "batch_size", "lots")
    with pytest.raises(SchemaError) as err:
        prof.load_profiler(specs)
    assert str(err.value).startswith(str(Path(specs[1]) / "batch.csv"))
    assert "'lots'" in str(err.value)


def test_progress_reports_every_byte(tmp_path: Path) -> None:
    specs = _fleet(tmp_path)
    seen: list[tuple[int, int]] = []
    prof.load_profiler(specs, progress=lambda done, total: seen.append((done, total)))
    total = sum(p.stat().st_size for s in specs for p in Path(s).iterdir())
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert len(seen) == len(specs) + 1


def _in_flight(monkeypatch: pytest.MonkeyPatch, barrier: threading.Barrier | None) -> list[int]:
    """Patch the instance read to record how many reads run at once."""
    lock, now, most = threading.Lock(), [0], [0]
    real = pool.load_instance

    def counting(files: object, clocks: object) -> Instance:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        if barrier is not None:
            barrier.wait()  # the first two reads must be in flight together
        try:
            return real(files, clocks)  # type: ignore[arg-type]
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(pool, "load_instance", counting)
    return most


def test_two_instances_are_read_at_once_within_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = _fleet(tmp_path, n=2)
    most = _in_flight(monkeypatch, threading.Barrier(2, timeout=60))
    prof.load_profiler(specs, budget=prof.ReadBudget(workers=2))
    assert most[0] == 2


def test_a_tight_budget_reads_one_instance_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = _fleet(tmp_path, n=3)
    most = _in_flight(monkeypatch, None)
    ev = prof.load_profiler(specs, budget=prof.ReadBudget(workers=2, memory_bytes=1))
    assert most[0] == 1
    assert ev.instance.df["instance"].n_unique() == 3
