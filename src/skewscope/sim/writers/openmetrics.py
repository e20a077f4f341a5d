"""History of every instance's /metrics, as if Prometheus had scraped the run every ``step_s``.

Two forms of the same samples (both from :mod:`exposition`, so they cannot disagree):
- an OpenMetrics file for ``promtool tsdb create-blocks-from openmetrics`` (timestamps in
  seconds, each family's samples contiguous, counters typed without ``_total``, ``# EOF``);
- Prometheus text lines with millisecond timestamps for VictoriaMetrics'
  ``/api/v1/import/prometheus``.
The scrape-time labels ``instance`` and ``job`` are added here, as a scraper would add them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import polars as pl

from skewscope.atomic import atomic_open_binary
from skewscope.errors import SimulationError
from skewscope.sim.writers.exposition import (
    ClusterModel,
    Family,
    MetricSpec,
    Series,
    format_labels,
    format_value,
    type_name,
)
from skewscope.sim.writers.metric_specs import ROLE_LABELS

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from numpy.typing import NDArray

    from skewscope.sim.records import SimResult

DEFAULT_JOB = "skewscope-sim"


def default_instance_label(instance: str) -> str:
    """The ``instance`` label a scraper would give: loopback host, the instance name as port."""
    return f"127.0.0.1:{instance}"


def scrape_times(start_s: float, end_s: float, step_s: float) -> NDArray[np.float64]:
    """Scrape instants from the run start to its end (inclusive), every ``step_s`` seconds."""
    if step_s <= 0:
        raise ValueError("step_s must be positive")
    n = int(np.floor((end_s - start_s) / step_s + 1e-9)) + 1
    return start_s + step_s * np.arange(n, dtype=np.float64)


def scrape_labels(
    instances: list[str],
    job: str,
    instance_labels: Mapping[str, str] | None,
    pools: Mapping[str, str] | None = None,
    role_label: str | None = None,
) -> dict[str, dict[str, str]]:
    """Per instance, the labels a scraper adds: ``instance``, ``job`` and, in a prefill/decode
    run, its pool under the dialect's role label (``metric_specs.ROLE_LABELS``)."""
    names = instance_labels or {}
    out = {i: {"instance": names.get(i, default_instance_label(i)), "job": job} for i in instances}
    if pools and role_label:
        for i, labels in out.items():
            if i in pools:
                labels[role_label] = pools[i]
    return out


def pool_labels(
    result: SimResult,
    dialect: str,
    role_label: str | None = None,
) -> tuple[Mapping[str, str] | None, str | None]:
    """(instance -> pool, the role label: ``role_label``, else the dialect's) of a run (no pools:
    aggregated serving)."""
    return result.meta.get("pools"), role_label or ROLE_LABELS.get(dialect)


def series_head(s: Series, extra: Mapping[str, str]) -> str:
    """A sample line's name and labels (the scrape labels ``extra`` added)."""
    return f"{s.name}{format_labels(sorted({**dict(s.labels), **extra}.items()))}"


def stamp_texts(times: NDArray[np.float64]) -> list[str]:
    """Sample timestamps as the history writes them (seconds, three decimals)."""
    return [f"{t:.3f}" for t in times]


def family_header(spec: MetricSpec) -> bytes:
    """A family's ``# TYPE`` and ``# HELP`` lines."""
    name = type_name(spec, openmetrics=True)
    return f"# TYPE {name} {spec.kind}\n# HELP {name} {spec.help}\n".encode()


def value_text(values: NDArray[np.float64]) -> pl.Series:
    """Sample values as the history writes them: the shortest text that reads back as the
    same float (``repr`` but for the exponent's form, ``1e-05`` is ``0.00001``), ``NaN``, and
    ``+Inf``/``-Inf`` as Go writes them (polars alone writes ``inf``)."""
    column = pl.Series("v", values, dtype=pl.Float64)
    if not np.isinf(values).any():
        return column.cast(pl.String)
    return (
        pl.DataFrame([column])
        .select(
            pl.when(pl.col("v") == np.inf)
            .then(pl.lit("+Inf"))
            .when(pl.col("v") == -np.inf)
            .then(pl.lit("-Inf"))
            .otherwise(pl.col("v").cast(pl.String))
        )
        .to_series()
    )


def lines_size(
    per_instance: Iterable[tuple[str, list[list[Series]]]],
    stamps: list[str],
    extra: Mapping[str, Mapping[str, str]],
) -> int:
    """The bytes ``write_family(..., header=False)`` writes for these series: known before
    any line is written, so groups formatted apart can write into one file side by side."""
    n, stamp_bytes = len(stamps), sum(len(s.encode()) for s in stamps)
    total = 0
    values: list[NDArray[np.float64]] = []
    for inst, metrics in per_instance:
        for group in metrics:
            heads = sum(len(series_head(s, extra[inst]).encode()) for s in group)
            total += n * heads + len(group) * (stamp_bytes + 3 * n)  # 2 spaces, a newline
            values.extend(s.values for s in group)
    if values:
        total += int(value_text(np.concatenate(values)).str.len_bytes().sum())
    return total


# Scrapes (sample times x instances) in one history. One scrape is ~180 lines, ~30 KB, so this
# bounds a file to ~1.5 GB: a day at the default 5 s for 2 instances, or 7 days at 60 s for 4.
MAX_SCRAPES = 50_000


def check_scrapes(span_s: float, step_s: float, n_instances: int) -> None:
    """Refuse a history above ``MAX_SCRAPES`` (the CLI calls this before simulating)."""
    n = (span_s / step_s + 1) * n_instances
    if not n <= MAX_SCRAPES:
        raise SimulationError(
            f"metrics interval {step_s:g} s over {span_s:g} s for {n_instances} instances gives "
            f"{n:,.0f} scrapes; at most {MAX_SCRAPES:,} (choose a longer interval)"
        )


def _history(
    result: SimResult, dialect: str, step_s: float, devices: str | None = None
) -> tuple[NDArray[np.float64], dict[str, list[Family]]]:
    check_scrapes(result.end_s - result.start_s, step_s, len(result.instances))
    model = ClusterModel(result, dialect, devices)
    times = scrape_times(result.start_s, result.end_s, step_s)
    return times, {i: m.families(times) for i, m in model.instances.items()}


def write_family(
    out: BinaryIO,
    spec: MetricSpec,
    per_instance: Iterable[tuple[str, list[list[Series]]]],
    stamps: list[str],
    extra: Mapping[str, Mapping[str, str]],
    *,
    header: bool = True,
) -> None:
    """One family of the history: its header, then per instance and label group one
    MetricPoint per scrape (all samples of a group at time j, then j+1).

    The lines are written by polars' CSV writer (``head value stamp``, space-separated, never
    quoted) a block of instances at a time, not formatted one value at a time in Python; the
    values as ``value_text`` gives them."""
    if header:
        out.write(family_header(spec))
    heads: list[str] = []
    rows: list[tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]] = []
    size = 0
    for inst, metrics in per_instance:
        for group in metrics:
            m, n = len(group), len(stamps)
            head = np.arange(len(heads), len(heads) + m, dtype=np.int64)
            heads.extend(series_head(s, extra[inst]) for s in group)
            values = np.stack([s.values for s in group]).astype(np.float64)
            rows.append((np.tile(head, n), values.T.ravel(), np.repeat(np.arange(n), m)))
            size += m * n
        if size >= _BLOCK_ROWS:
            _write_rows(out, heads, rows, stamps)
            heads, rows, size = [], [], 0
    if rows:
        _write_rows(out, heads, rows, stamps)


# lines handed to the CSV writer at once (bounds the memory of a family's block: a block's
# head column is ~150 B a line)
_BLOCK_ROWS = 500_000


def _write_rows(
    out: BinaryIO,
    heads: list[str],
    rows: list[tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]],
    stamps: list[str],
) -> None:
    """``heads[h] value stamps[t]`` lines of the rows (head index, value, stamp index)."""
    frame = pl.DataFrame(
        [
            pl.Series("h", heads).gather(np.concatenate([r[0] for r in rows])),
            value_text(np.concatenate([r[1] for r in rows])),
            pl.Series("s", stamps).gather(np.concatenate([r[2] for r in rows])),
        ]
    )
    frame.write_csv(out, separator=" ", quote_style="never", include_header=False)


def _write_om(
    out: BinaryIO,
    times: NDArray[np.float64],
    fams: dict[str, list[Family]],
    extra: dict[str, dict[str, str]],
) -> None:
    stamps = stamp_texts(times)
    instances = list(fams)
    for k, first in enumerate(fams[instances[0]]):
        write_family(out, first.spec, ((i, fams[i][k].metrics) for i in instances), stamps, extra)
    out.write(b"# EOF\n")


def write_openmetrics(
    result: SimResult,
    path: Path,
    dialect: str = "vllm",
    step_s: float = 15.0,
    *,
    job: str = DEFAULT_JOB,
    instance_labels: Mapping[str, str] | None = None,
    devices: str | None = None,
    role_label: str | None = None,
) -> Path:
    """Write every instance's exposition sampled every ``step_s`` over the run as OpenMetrics.

    ``instance_labels`` maps instance name -> ``instance`` label value (default
    ``127.0.0.1:<name>``); ``devices`` adds a device exporter's series (``dcgm``,
    ``npu-exporter``); ``role_label`` names a prefill/decode run's pool label (default: the
    dialect's, ``metric_specs.ROLE_LABELS``). Load it with ``promtool tsdb create-blocks-from
    openmetrics``.
    """
    times, fams = _history(result, dialect, step_s, devices)
    extra = scrape_labels(
        list(fams), job, instance_labels, *pool_labels(result, dialect, role_label)
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open_binary(path) as out:  # an interrupted write leaves no truncated history
        _write_om(out, times, fams, extra)
    return path


def iter_import_lines(
    result: SimResult,
    dialect: str = "vllm",
    step_s: float = 15.0,
    *,
    job: str = DEFAULT_JOB,
    instance_labels: Mapping[str, str] | None = None,
    devices: str | None = None,
    role_label: str | None = None,
) -> Iterator[str]:
    """The same samples as ``name{labels} value ts_ms`` lines (no newline) for
    VictoriaMetrics ``/api/v1/import/prometheus``."""
    times, fams = _history(result, dialect, step_s, devices)
    extra = scrape_labels(
        list(fams), job, instance_labels, *pool_labels(result, dialect, role_label)
    )
    stamps = [str(round(t * 1000)) for t in times]
    for inst, families in fams.items():
        for fam in families:
            for group in fam.metrics:
                for s in group:
                    head = f"{series_head(s, extra[inst])} "
                    for v, stamp in zip(s.values.tolist(), stamps, strict=True):
                        yield f"{head}{format_value(v)} {stamp}"
