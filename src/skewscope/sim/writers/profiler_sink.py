"""msServiceProfiler folders written as the run goes (``skewscope simulate --out``).

A ``ProfilerSinks`` (a ``simulate(sinks=...)`` factory) gives each instance group, in the
process that runs it, a ``ProfilerSink`` that appends each time chunk's rows to the group's
batch.csv, kvcache.csv and request_status.csv (time order is chunk order, so the files are
those of the whole table). forward.csv needs each device's NEXT forward (``bubble_time``), which
may come chunks later for an idle device, so its few columns are spilled per instance and the
file is written from them when the run ends; request.csv needs the requests' final state and
is written by the parent (``write_requests``). The tables are ``profiler``'s own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from skewscope.catalogue import Generation
from skewscope.sim.records import START_S
from skewscope.sim.tables import steps_frame
from skewscope.sim.writers.profiler import (
    batch_table,
    forward_table,
    kvcache_table,
    request_status_table,
    request_table,
)
from skewscope.sim.writers.profiler_headers import GENERATIONS

if TYPE_CHECKING:
    from pathlib import Path

    from numpy.typing import NDArray

    from skewscope.sim.rank import RequestState
    from skewscope.sim.records import RankInfo, SimResult
    from skewscope.sim.workload import Workload

# the step columns forward.csv reads, spilled per instance until the run ends
_FORWARD = ("start_s", "end_s", "batch_size", "prefill_batch_size", "decode_batch_size", "dp_rank")


@dataclass
class _Tables:
    """One time chunk (or one instance's spilled steps) as ``profiler.StepTables``."""

    start_s: float
    ranks: list[RankInfo]
    steps: pl.DataFrame
    members: pl.DataFrame | None


@dataclass
class ProfilerSinks:
    """Factory of the groups' sinks (picklable: workers make their own)."""

    out_dir: Path
    generation: str = Generation.CURRENT
    rid_suffix: bool = False

    def __call__(
        self, lo: int, hi: int, wl: Workload, ranks: list[RankInfo], duration: float
    ) -> ProfilerSink:
        if self.generation not in GENERATIONS:
            raise ValueError(
                f"unknown profiler generation {self.generation!r}; expected {GENERATIONS}"
            )
        return ProfilerSink(self, lo, hi, ranks)


class ProfilerSink:
    """One instance group's folders; see the module docstring."""

    def __init__(self, f: ProfilerSinks, lo: int, hi: int, ranks: list[RankInfo]) -> None:
        self.f, self.ranks = f, ranks
        self.instances = list(dict.fromkeys(r.instance for r in ranks))[lo:hi]
        for inst in self.instances:
            (f.out_dir / inst).mkdir(parents=True, exist_ok=True)
        self.started: set[Path] = set()

    def _append(self, path: Path, table: pl.DataFrame) -> None:
        with path.open("ab") as out:
            table.write_csv(
                out, include_header=path not in self.started, quote_style="necessary", null_value=""
            )
        self.started.add(path)

    def chunk(
        self,
        rows: NDArray[np.float64],
        members: pl.DataFrame | None,
        first_id: int,
        cut: float,
        reqs: RequestState,
    ) -> None:
        f = self.f
        view = _Tables(START_S, self.ranks, steps_frame(rows, self.ranks, first_id), members)
        for inst in self.instances:
            folder = f.out_dir / inst
            self._append(
                folder / "batch.csv", batch_table(view, inst, f.generation, rid_suffix=f.rid_suffix)
            )
            self._append(folder / "kvcache.csv", kvcache_table(view, inst, f.generation))
            if f.generation == Generation.CURRENT:
                self._append(folder / "request_status.csv", request_status_table(view, inst))
            mine = view.steps.filter(pl.col("instance") == inst).select(_FORWARD)
            with (folder / ".forward.f64").open("ab") as out:
                mine.cast(pl.Float64).to_numpy(order="c").tofile(out)

    def close(self, reqs: RequestState) -> list[str]:
        """forward.csv of each instance from its spilled steps; the instances written."""
        for inst in self.instances:
            spill = self.f.out_dir / inst / ".forward.f64"
            a = np.fromfile(spill, dtype=np.float64).reshape(-1, len(_FORWARD))
            steps = pl.DataFrame(
                {
                    "step_id": np.arange(len(a), dtype=np.int64),
                    "instance": pl.Series([inst] * len(a), dtype=pl.Utf8),
                    **{c: a[:, k] for k, c in enumerate(_FORWARD)},
                }
            )
            steps = steps.with_columns(pl.col(c).cast(pl.Int64) for c in _FORWARD[2:])
            view = _Tables(START_S, self.ranks, steps, None)
            path = self.f.out_dir / inst / "forward.csv"
            self._append(path, forward_table(view, inst, self.f.generation))
            spill.unlink()
        return self.instances


def write_requests(result: SimResult, out_dir: Path, generation: str) -> None:
    """request.csv of every instance (the requests' final state, known to the parent)."""
    for inst in result.instances:
        table = request_table(result, inst, generation)
        table.write_csv(out_dir / inst / "request.csv", quote_style="necessary", null_value="")
