"""Would-be alert episodes over a backfilled history, at explicit times (no wall-clock replay),
for the fleet-day benchmark: a PromQL alert through ``query_range`` with Prometheus' ``for:``
semantics, and ``watch``'s own loop (``Watcher.loop`` on a ``ManualClock``, incidents kept
by its tracker and history store exactly as ``watch --save`` keeps them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.monitor.incidents import CALM_RUNS
from skewscope.sources.prom_client import PromClient


@dataclass(frozen=True)
class Fired:
    """One alert episode. ``instance``/``dp_rank`` None: the alert names no unit there (a group
    rule fires for every unit of its group)."""

    source: str
    level: str  # "instance" | "dp"
    instance: str | None
    dp_rank: str | None
    kind: str | None  # None: the source names no kind
    start: float
    end: float  # last evaluation that fired

    @property
    def names_unit(self) -> bool:
        return self.instance is not None and (self.level == "instance" or self.dp_rank is not None)


def firing_runs(stamps: Iterable[float], step_s: float, for_s: float) -> list[tuple[float, float]]:
    """(first firing, last firing) of each run of consecutive evaluations at which the
    expression returned the series, firing once it has been true for ``for_s`` (a missed step
    resets the pending timer, as a rule evaluation that drops the series does)."""
    out: list[tuple[float, float]] = []
    run_start = prev = math.nan
    fired: float | None = None
    for t in sorted(stamps):
        if not (t - prev <= step_s * 1.5):  # a gap (or the first point): a new run
            if fired is not None:
                out.append((fired, prev))
            run_start, fired = t, None
        if fired is None and t - run_start >= for_s:
            fired = t
        prev = t
    if fired is not None:
        out.append((fired, prev))
    return out


def promql_episodes(
    client: PromClient,
    source: str,
    level: str,
    expr: str,
    for_s: float,
    start: float,
    end: float,
    step_s: float,
    unit_labels: tuple[str | None, str | None],
    kind_label: str | None = None,
) -> list[Fired]:
    """The episodes of one alert expression over [start, end] at ``step_s``. ``unit_labels``:
    (instance label, rank label or None) naming the unit on a firing series, if it has them."""
    out = []
    inst_label, rank_label = unit_labels
    for series in client.query_range(expr, start, end, step_s):
        labels: dict[str, str] = series.get("metric", {})
        stamps = [float(t) for t, _ in series.get("values", [])]
        kind = labels.get(kind_label) if kind_label else None
        for a, b in firing_runs(stamps, step_s, for_s):
            out.append(
                Fired(
                    source,
                    level,
                    labels.get(inst_label) if inst_label else None,
                    labels.get(rank_label) if rank_label else None,
                    kind,
                    a,
                    b,
                )
            )
    return out


def _split_unit(unit: str, level: str) -> tuple[str, str | None]:
    """``<instance>/dp<rank>`` (frame.dp_unit_id) back to (instance, rank)."""
    if level == "dp" and "/dp" in unit:
        inst, rank = unit.rsplit("/dp", 1)
        return inst, rank
    return unit, None


def watch_episodes(
    url: str,
    dialect: str,
    start: float,
    end: float,
    *,
    last_s: float = 900.0,
    every_s: float = 30.0,
    window_s: float | None = None,
    level: str = "auto",
    work: Path,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    calm_runs: int = CALM_RUNS,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Fired], dict[str, int]]:
    """``watch --prometheus URL --last LAST --every EVERY [--window W] --save`` over [start,
    end]: watch's loop on a ``ManualClock`` (runs at start + last, + every, ...: explicit
    instants, no wall-clock wait), incidents from its own tracker (calm runs) and store.
    Returns the incidents as episodes and the run error counts by reason."""
    from skewscope.cli import build_parser
    from skewscope.cli.watch import build_source
    from skewscope.clock import ManualClock
    from skewscope.monitor.history import open_store
    from skewscope.monitor.watch import Watcher

    argv = [
        "watch",
        "--prometheus",
        url,
        "--dialect",
        dialect,
        "--last",
        f"{last_s:g}s",
        "--every",
        f"{every_s:g}s",
        "--no-tui",
    ]
    if window_s is not None:
        argv += ["--window", f"{window_s:g}s"]
    args = build_parser().parse_args(argv)
    source = build_source(args, last_s, window_s)  # watch's own reader (incremental)
    clock = ManualClock(start + last_s)
    db = work / "watch-history.sqlite"
    db.unlink(missing_ok=True)  # this run's incidents only
    store = open_store(str(db))
    total = int((end - start - last_s) // every_s) + 1
    done = [0]

    def on_run(status: object, good: bool) -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    watcher = Watcher(
        source,
        last_s=last_s,
        every_s=every_s,
        level=level,
        thresholds=thresholds,
        store=store,
        clock=clock,
        calm_runs=calm_runs,
        on_run=on_run,
    )
    try:
        watcher.loop(max_runs=total)  # watch's own loop; its sleeps move the manual clock
    finally:
        source.close()
    errors = dict(watcher.status.errors)
    incidents = store.list()
    store.close()
    out = []
    for inc in incidents:
        inst, rank = _split_unit(inc.unit, inc.level)
        # the incident is dated from its first hot run but shows once the runs that open it
        # confirm it (confirmed_s: this run's own store, so every incident has one): it "fires"
        assert inc.confirmed_s is not None
        out.append(
            Fired(
                "watch",
                inc.level,
                inst,
                rank,
                inc.kind,
                inc.confirmed_s,
                inc.end_s if inc.end_s is not None else inc.last_seen_s,
            )
        )
    return out, errors
