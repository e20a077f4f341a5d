"""One range read's queries answered and decoded into value tables per level (``prom_plan``'s
jobs: a signal's values, a mean's sum and count, a percentile's buckets), each job decoded by
the worker that fetched it."""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from skewscope.frame import Level
from skewscope.sources.daemon_pool import DaemonPool
from skewscope.sources.dialects import SIGNAL_SPECS, SPEC_BY_SIGNAL, Alias
from skewscope.sources.evidence import Key, Values
from skewscope.sources.prom_client import PromClient
from skewscope.sources.prom_matrix import matrix_to_values
from skewscope.sources.prom_plan import (
    BUCKETS,
    COUNT,
    SUM,
    VALUE,
    Job,
    bucket_quantiles,
    counts_cover,
    fold_instances,
    inf_bucket_counts,
    mark_bucket_bounds,
    mean_table,
    query_scale,
    series_rows,
)
from skewscope.sources.promql import bucket_bounds_query

Tables = dict[Level, dict[Key, float]]


@dataclass
class Decoded:
    """One job's answer read: its value tables per level, the series without a usable unit,
    a percentile's bucket bounds and a bucket answer's +Inf counts (``prom_plan``)."""

    tables: Tables
    bad: list[str]
    les: set[float] | None = None
    counts: Tables | None = None


def _decode(client: PromClient, job: Job, result: list[Any], window_s: float) -> Decoded:
    """One job's answer as value tables (``prom_plan``)."""
    spec = SPEC_BY_SIGNAL[job.signal]
    bad: list[str] = []
    where = client.where

    def read(level: Level, across: str) -> dict[Key, float]:
        return matrix_to_values(
            result,
            window_s=window_s,
            alias=job.alias,
            level=level,
            across=across,
            bad=bad,
            where=where,
        )

    if job.part == BUCKETS:
        rows = series_rows(result, job.alias, where)
        tables, les = bucket_quantiles(rows, spec, job.alias, window_s, bad)
        counts = inf_bucket_counts(result, rows, job.alias, window_s, where) if job.counts else None
        return Decoded(tables, bad, les, counts)
    across = spec.across if job.part == VALUE else "sum"
    tables = {job.level: read(job.level, across)}
    if job.derive:
        tables[Level.INSTANCE] = (
            read(Level.INSTANCE, across)
            if job.alias.rank_in_unit
            else fold_instances(
                series_rows(result, job.alias, where), job.alias, across, window_s, bad
            )
        )
    return Decoded(tables, bad if job.part != COUNT else [])  # a mean's series noted once


def load_tables(
    client: PromClient,
    jobs: list[Job],
    levels: list[Level],
    *,
    selector: str,
    span: tuple[float, float, float],
    max_workers: int,
) -> tuple[dict[Level, Values], list[str], list[str]]:
    """(value tables per level, series without a usable unit, notes) of every job's range query.

    Each worker decodes its own answer into value tables as soon as it arrives, so the
    client's decoding overlaps the server's work on the other queries (a bare fetch is server
    bound). Percentiles worked out from rank-level buckets (``prom_plan``) mark the values
    equal to a bucket bound of their answer (frame.py ``<signal>_bound``); where
    histogram_quantile answered instead, one ``count by (le)`` query per histogram over the
    whole range finds the bounds, sent as soon as its first quantile table is read. That check
    is an extra: when the backend refuses it, the percentiles stay unmarked and a note says so.
    """
    first_t, last_t, w = span
    whole = max(last_t - first_t, 1.0)
    bounds: dict[str, Future[list[Any]]] = {}
    lock = threading.Lock()
    with DaemonPool(max_workers) as pool:  # a stopping watch abandons its queries

        def run(job: Job) -> Decoded:
            got = _decode(client, job, client.query_range_series(job.query, first_t, last_t, w), w)
            if (
                job.part == VALUE
                and got.tables[job.level]
                and SPEC_BY_SIGNAL[job.signal].over_time == "quantile"
            ):
                with lock:
                    if job.alias.name not in bounds:
                        q = bucket_bounds_query(job.alias, whole, selector)
                        bounds[job.alias.name] = pool.submit(
                            client.query_range, q, last_t, last_t, whole
                        )
            return got

        sent = [job for job in jobs if not job.spare]
        results = [f.result() for f in [pool.submit(run, job) for job in sent]]
        found: dict[Level, dict[str, dict[Key, float]]] = {lvl: {} for lvl in levels}
        parts: dict[tuple[Level, str], dict[str, dict[Key, float]]] = defaultdict(dict)
        les: dict[tuple[Level, str], set[float]] = {}
        inf: dict[str, Tables] = {}
        bad: list[str] = []
        for job, got in zip(sent, results, strict=True):
            bad += got.bad
            if got.counts is not None:
                inf[job.counts] = got.counts
            for level, table in got.tables.items():
                if job.part in (SUM, COUNT):
                    parts[(level, job.signal)][job.part] = table
                    continue
                found[level][job.signal] = table
                if got.les is not None:
                    les[(level, job.signal)] = got.les
        for job in jobs:  # a mean's count: its buckets' +Inf where that covers its sums
            if not job.spare:
                continue
            counts = inf.get(job.signal)
            if counts is None or not all(
                counts_cover(parts[(lvl, job.signal)].get(SUM, {}), counts[lvl]) for lvl in counts
            ):
                counts = run(job).tables
            for level, table in counts.items():
                parts[(level, job.signal)][COUNT] = table
        for (level, signal), pair in parts.items():
            if len(pair) == 2:
                scale = query_scale(SPEC_BY_SIGNAL[signal], resolve_alias(jobs, signal))
                found[level][signal] = mean_table(pair[SUM], pair[COUNT], scale)
        per_level: dict[Level, Values] = {lvl: {} for lvl in levels}
        for level in levels:  # the tables in signal order, as one query per table gave them
            for spec in SIGNAL_SPECS:
                if found[level].get(spec.signal):
                    per_level[level][spec.signal] = found[level][spec.signal]
        notes = mark_bucket_bounds(jobs, levels, per_level, bounds, les)
    return per_level, bad, notes


def resolve_alias(jobs: list[Job], signal: str) -> Alias:
    return next(job.alias for job in jobs if job.signal == signal)
