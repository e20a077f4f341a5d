"""Offline source: msServiceProfiler output folders -> Evidence (instance and DP UnitFrames).

One folder per instance (the profiler records no instance identity). The reader runs in three
stages, each a module with one job and a frozen result:

* ``profiler_read``: an instance folder's CSVs -> tables on the epoch axis (``Read``): headers,
  cells, bad clocks, time zones; batch.csv streamed once (see ``profiler_read.read_batch``);
* ``profiler_ranks`` and ``profiler_instance``: DP ranks (``RankMap``), request placement by
  res_list rid, and each file's signal rows (``Part``), merged once into an ``Instance``;
* ``profiler_frame``: the common window grid and the (window x unit) frames.

This module only strings them together, with the ``--start/--end/--last`` zoom.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import polars as pl

from skewscope.frame import WINDOWS, Evidence, WindowPolicy
from skewscope.sources import profiler_forward as pf
from skewscope.sources import profiler_range as pr
from skewscope.sources.pools import infer_pools
from skewscope.sources.profiler_frame import DP_LEVEL, INSTANCE_LEVEL, make_grid, span, unit_frame
from skewscope.sources.profiler_instance import FRAMES, Instance
from skewscope.sources.profiler_layout import InstanceFiles, discover_all
from skewscope.sources.profiler_partials import reduce_instance
from skewscope.sources.profiler_pool import READ_BUDGET, Progress, ReadBudget, read_all


def zoom(
    instances: list[Instance], start: float | None, end: float | None, last_s: float | None
) -> tuple[list[Instance], str | None]:
    """The instances' events in ``[start, end)`` or the capture's last ``last_s``, and the
    report note (None when not zoomed)."""
    whole = span(instances)
    if whole is None or (start is None and end is None and last_s is None):
        return instances, None
    lo, hi = pr.zoom_range(whole, start, end, last_s)
    keep = (pl.col("start_s") >= lo) & (pl.col("start_s") < hi)
    zoomed = []
    for inst in instances:
        kept = {f: df.filter(keep) for f in FRAMES if (df := getattr(inst, f)) is not None}
        placed = kept["requests"]["dp_rank"].is_not_null().sum() if "requests" in kept else 0
        zoomed.append(replace(inst, **kept, placed=int(placed)))
    return zoomed, pr.zoom_note(whole, lo, hi, span(zoomed) is not None)


def whole(inst: Instance) -> Instance:
    """Keep the instance as read (a zoom needs its rows until the capture's span is known)."""
    return inst


def load_all(
    found: Sequence[InstanceFiles],
    clocks: pr.ClockPolicy,
    tick_s: float | None,
    budget: ReadBudget = READ_BUDGET,
    progress: Progress | None = None,
) -> list[Instance]:
    """Every instance read (several at once within ``budget``, see ``profiler_pool``) and, with
    ``tick_s``, reduced to (rank, tick) partials as soon as it is read, so the fleet's rows are
    never all held. A bad input raises the error of the first bad instance in order."""
    finish = whole if tick_s is None else partial(reduce_instance, tick_s=tick_s)
    return read_all(found, clocks, finish, budget, progress)


def _prefixed(inst: Instance, notes: Sequence[str]) -> list[str]:
    return [f"{inst.name}: {n}" for n in notes]


def load_profiler(
    specs: Sequence[str],
    *,
    window_s: float | None = None,
    windows: WindowPolicy = WINDOWS,
    clocks: pr.ClockPolicy = pr.CLOCKS,
    start: float | None = None,
    end: float | None = None,
    last_s: float | None = None,
    budget: ReadBudget = READ_BUDGET,
    progress: Progress | None = None,
) -> Evidence:
    """Load msServiceProfiler folders (``PATH`` or ``NAME=PATH``) into instance and DP frames,
    optionally zoomed to ``[start, end)`` (epoch s) or to the capture's last ``last_s``.
    ``progress(done, total)`` is told the CSV bytes read as each instance is done.

    Raises InputError/SchemaError with a one-line message for any bad input.
    """
    zooming = start is not None or end is not None or last_s is not None
    # every window is a whole number of ticks: the window given, else whole seconds (the
    # default window is); a zoom needs the rows until the whole capture's span is known
    tick_s = window_s if window_s is not None and window_s > 0 else 1.0
    instances = load_all(discover_all(specs), clocks, None if zooming else tick_s, budget, progress)
    pr.check_clocks({i.name: span([i]) for i in instances}, clocks)
    instances, zoomed = zoom(instances, start, end, last_s)
    grid = make_grid(instances, window_s, windows)
    notes = [n for i in instances for n in _prefixed(i, i.notes)] + ([zoomed] if zoomed else [])
    dp_notes = [n for i in instances if i.has_dp for n in _prefixed(i, i.dp_notes)]
    instance_frame = unit_frame(instances, INSTANCE_LEVEL, grid, notes)
    dp_instances = [i for i in instances if i.has_dp]
    dp_frame = unit_frame(dp_instances, DP_LEVEL, grid, dp_notes) if dp_instances else None
    if dp_frame is not None:
        steps = pf.step_loads([(i.name, i.forward) for i in dp_instances])
        dp_frame = replace(dp_frame, step_loads=steps)
    # no pool label offline: a prefill worker shows by generating one token per request
    return infer_pools(
        Evidence(instance=instance_frame, dp=dp_frame, notes=tuple(notes + dp_notes))
    )
