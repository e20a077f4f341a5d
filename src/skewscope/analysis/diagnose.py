"""Which frames the method judges (``analysis.judge`` judges one) and the Report of them.

Level handling (``auto``): one instance with several DP ranks is judged at DP level; several
instances are judged at instance level first, then the DP ranks of every multi-rank instance
are drilled into (hot instances always kept, others when their ranks are imbalanced). When the
instances are balanced but DP data exists, the ranks of every instance are judged against their
own siblings. The same rank hot in most instances is reported once as a fleet-wide pattern.
"""

from __future__ import annotations

from dataclasses import replace

from skewscope.analysis.detect import quiet_groups
from skewscope.analysis.fleet import fleet_dp_patterns
from skewscope.analysis.gateway import join_gateway, missing_gateway_note
from skewscope.analysis.judge import QUEUE_ONLY_NOTE, diagnose_frame
from skewscope.analysis.matrix import SignalMatrix, build_matrix, sub_matrix
from skewscope.analysis.stall import find_stalls
from skewscope.catalogue import Verdict
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import UsageError
from skewscope.frame import Evidence, Level, UnitFrame
from skewscope.report.facts import Note, NoteCode
from skewscope.report.model import Report

__all__ = ["QUEUE_ONLY_NOTE", "diagnose", "diagnose_frame"]


def diagnose(
    evidence: Evidence, level: str = "auto", th: Thresholds = DEFAULT_THRESHOLDS
) -> Report:
    """The method over the evidence; gateway evidence, when read, is joined to the top level."""
    report = _diagnose(evidence, level, th)
    if evidence.gateway is None:
        return missing_gateway_note(report)
    return join_gateway(report, evidence.gateway, th)


def _diagnose(evidence: Evidence, level: str, th: Thresholds) -> Report:
    notes = (*map(Note.text, evidence.notes), *_dp_size_note(evidence))
    if level == Level.INSTANCE:
        return diagnose_frame(evidence.instance, th, extra_notes=notes)
    if level == Level.DP:
        if evidence.dp is None:
            raise UsageError("--level dp: the input has no DP ranks (one rank per instance)")
        return diagnose_frame(evidence.dp, th, extra_notes=notes, unplaced=_unplaced(evidence))
    if level != "auto":
        raise UsageError(f"--level: expected instance, dp or auto, got {level!r}")
    n_instances = evidence.instance.df["instance"].n_unique()
    if evidence.dp is not None and n_instances == 1:
        return diagnose_frame(evidence.dp, th, extra_notes=notes, unplaced=_unplaced(evidence))
    top = diagnose_frame(evidence.instance, th, extra_notes=notes)
    if evidence.dp is None:
        return top
    multi = _multi_rank(evidence.dp)
    if top.verdict == Verdict.BALANCED:
        inside = diagnose_frame(
            evidence.dp,
            th,
            extra_notes=(*notes, Note(NoteCode.DP_WITHIN_INSTANCES)),
            unplaced=_unplaced(evidence),
        )
        if inside.verdict == Verdict.IMBALANCED:
            patterns = fleet_dp_patterns(
                inside.findings, inside.units, len(multi), th, _multi_by_pool(evidence.dp, multi)
            )
            return replace(inside, findings=(*patterns, *inside.findings))
        return top
    if top.verdict != Verdict.IMBALANCED:
        return top
    # Every multi-rank instance is drilled into, not only the hot ones: a DP skew inside a
    # normal instance, or the same rank hot everywhere, is invisible at instance level.
    # Most drills find nothing and are dropped: they are judged without the per-unit detail
    # (summaries, series, episodes) and only the kept ones are judged again in full; the
    # findings are the same either way (at 256 instances this is most of the analysis' time).
    # Those that certainly find nothing are not judged at all (``_nothing_inside``).
    unplaced = _unplaced(evidence)
    whole = build_matrix(evidence.dp.df, group_by_instance=True, window_s=evidence.dp.window_s)

    columns: dict[str, list[int]] = {}  # each instance's ranks in the fleet's matrix
    for j, inst in enumerate(whole.instances):
        columns.setdefault(inst, []).append(j)

    def drill(i: str, detail: bool) -> Report:
        windows = parts[i].df["window_start_s"].unique().to_numpy()
        m = sub_matrix(whole, columns.get(i, []), windows)
        return diagnose_frame(parts[i], th, unplaced=unplaced, detail=detail, matrix=m)

    skip = _nothing_inside(whole, evidence.dp, th) - set(top.hot_units)
    parts = _by_instance(evidence.dp, [i for i in multi if i not in skip])
    drills = [(i, drill(i, i in top.hot_units)) for i in parts]
    drills = [
        (i, d if i in top.hot_units or d.verdict != Verdict.IMBALANCED else drill(i, True))
        for i, d in drills
    ]
    pooled, pool_notes = _pool_quiet_drills(drills, parts, whole, columns, unplaced, th)
    if pooled is not None:
        small = {u.instance for u in pooled.units}
        drills = [(i, d) for i, d in drills if i not in small]
    kept = tuple(d for i, d in drills if i in top.hot_units or d.verdict == Verdict.IMBALANCED)
    if pooled is not None and (
        pooled.verdict == Verdict.IMBALANCED
        or {u.instance for u in pooled.units} & set(top.hot_units)
    ):
        kept = (*kept, pooled)
    judged = [d for _, d in drills] + ([pooled] if pooled is not None else [])
    patterns = fleet_dp_patterns(
        [f for d in judged for f in d.findings],
        [u for d in judged for u in d.units],
        len(multi),
        th,
        _multi_by_pool(evidence.dp, multi),
    )
    return replace(
        top, drilldown=kept, findings=(*top.findings, *patterns), notes=(*top.notes, *pool_notes)
    )


def _pool_quiet_drills(
    drills: list[tuple[str, Report]],
    parts: dict[str, UnitFrame],
    whole: SignalMatrix,
    columns: dict[str, list[int]],
    unplaced: dict[str, float],
    th: Thresholds,
) -> tuple[Report | None, tuple[Note, ...]]:
    """The drills too quiet to judge alone (the ``min_requests_total`` gate) judged together as
    ``--level dp`` judges them, each rank still against its own instance's siblings: the gate
    asks whether the service is busy enough to call imbalanced, and the ranks of several
    small instances together are (the bundled example's dp0 is hot in all three instances,
    two of which have 82 requests each). Every drill that stays unjudged gets a note why.
    Returns the pooled report (None when fewer than two drills are that quiet) and the notes."""
    import polars as pl

    quiet = [i for i, d in drills if _not_judged(d) == NoteCode.NEAR_IDLE]
    pooled = None
    if len(quiet) >= 2:
        frame = replace(parts[quiet[0]], df=pl.concat([parts[i].df for i in quiet]))
        cols = [j for i in quiet for j in columns.get(i, [])]
        windows = frame.df["window_start_s"].unique().to_numpy()
        pooled = diagnose_frame(
            frame,
            th,
            unplaced=unplaced,
            matrix=sub_matrix(whole, cols, windows),
            extra_notes=(
                Note(
                    NoteCode.DP_POOLED, {"instances": quiet, "min_requests": th.min_requests_total}
                ),
            ),
        )
        if _not_judged(pooled) is None:
            drills = [(i, d) for i, d in drills if i not in quiet]
    notes = tuple(
        Note(NoteCode.DP_NOT_JUDGED, {"instance": i, "reason": d.notes[0]})
        for i, d in drills
        if _not_judged(d) is not None
    )
    return pooled, notes


def _not_judged(report: Report) -> NoteCode | None:
    """Why a drill's skew was not judged (its gate's note code), None when it was."""
    if report.verdict != Verdict.INSUFFICIENT_DATA or not report.notes:
        return None
    return NoteCode(report.notes[0].code)


def _nothing_inside(whole: SignalMatrix, dp: UnitFrame, th: Thresholds) -> set[str]:
    """Instances whose drill-down would find nothing, from one scoring of every rank against
    its own siblings (``detect.quiet_groups``, the fleet's matrix at once instead of a judge
    per instance) and no stalled rank; only instances with data in every window of the fleet,
    whose slice of the matrix is what their drill judges."""
    import polars as pl

    counts = dp.df.group_by("instance").agg(pl.col("window_start_s").n_unique().alias("n"))
    whole_grid = set(counts.filter(pl.col("n") == len(whole.windows))["instance"].to_list())
    stalled = {whole.groups[s.index] for s in find_stalls(whole, th)}
    return (quiet_groups(whole, dp.window_s, th) & whole_grid) - stalled


def _dp_size_note(evidence: Evidence) -> tuple[Note, ...]:
    """Instances with different DP sizes are not expected to carry equal load: say so."""
    sizes = dict.fromkeys(evidence.instance.df["instance"].unique().to_list(), 1)
    if evidence.dp is not None:
        import polars as pl

        counts = evidence.dp.df.group_by("instance").agg(n=pl.col("unit").n_unique())
        sizes.update(zip(counts["instance"].to_list(), counts["n"].to_list(), strict=True))
    if len(set(sizes.values())) <= 1:
        return ()
    return (Note(NoteCode.DP_SIZES, {"sizes": dict(sorted(sizes.items()))}),)


def _unplaced(evidence: Evidence) -> dict[str, float]:
    """Per instance, mean requests per window the source could not put on a DP rank (the
    instance frame counts them, the DP frame does not): where they are evident, the report
    links them to a saturated rank."""
    if evidence.dp is None:
        return {}
    import polars as pl

    def per_window(df: pl.DataFrame) -> pl.DataFrame:
        return df.group_by("window_start_s", "instance").agg(
            pl.col("requests").sum().alias("n"), pl.col("requests").is_not_null().any().alias("ok")
        )

    joined = (
        per_window(evidence.instance.df)
        .join(per_window(evidence.dp.df), on=("window_start_s", "instance"), suffix="_dp")
        .filter(pl.col("ok") & pl.col("ok_dp"))
    )
    gap = joined.group_by("instance").agg((pl.col("n") - pl.col("n_dp")).clip(0).mean())
    return dict(zip(gap["instance"].to_list(), gap["n"].to_list(), strict=True))


def _multi_by_pool(frame: UnitFrame, multi: list[str]) -> dict[str, int]:
    """In a prefill/decode fleet, the multi-rank instances of each pool ("" none); {} else."""
    if "pool" not in frame.df.columns or frame.df["pool"].is_null().all():
        return {}
    import polars as pl

    rows = (
        frame.df.filter(pl.col("instance").is_in(multi))
        .select("instance", "pool")
        .unique("instance")
    )
    out: dict[str, int] = {}
    for p in rows["pool"].to_list():
        out[p or ""] = out.get(p or "", 0) + 1
    return out


def _multi_rank(frame: UnitFrame) -> list[str]:
    """The instances of a DP frame with two or more ranks, sorted."""
    import polars as pl

    counts = frame.df.group_by("instance").agg(pl.col("unit").n_unique().alias("n"))
    return sorted(counts.filter(pl.col("n") >= 2)["instance"].to_list())


def _by_instance(frame: UnitFrame, instances: list[str]) -> dict[str, UnitFrame]:
    """The DP frame of each of ``instances`` (in their order), split in one pass (not one
    filter of the whole frame each)."""
    import polars as pl

    rows = frame.df.filter(pl.col("instance").is_in(instances))
    parts = rows.partition_by("instance", as_dict=True, maintain_order=True)
    split = {str(key[0]): replace(frame, df=df, notes=()) for key, df in parts.items()}
    return {i: split[i] for i in instances}
