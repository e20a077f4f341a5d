"""The day written: ``history.om`` (OpenMetrics for ``promtool tsdb create-blocks-from
openmetrics``) and ``truth.json`` (notes/contract-day.md) into one folder.

The values are evaluated family by family over every unit and scrape at once
(``families.family_values`` on the day's arrays) and written by polars' CSV writer an
instance at a time, so the full day (6 h of 18 instances x 2 ranks, ~10 M samples) takes
seconds, not the event simulator's minutes. An instance's samples are written only where it
is scraped (its restart gap and the time before it joins are absent, not zero), each label
group's samples together as OpenMetrics wants them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import polars as pl

from skewscope.atomic import atomic_open_binary
from skewscope.sim.day.load import KV_TOKENS, DayLoad
from skewscope.sim.day.plan import DaySpec, Plan, make_plan
from skewscope.sim.records import RankInfo
from skewscope.sim.writers.exposition import InstanceModel, format_labels
from skewscope.sim.writers.families import family_values
from skewscope.sim.writers.metric_spec import MetricSpec
from skewscope.sim.writers.metric_specs import dialect_specs
from skewscope.sim.writers.openmetrics import family_header, value_text
from skewscope.sim.writers.rank_model import RankModel

if TYPE_CHECKING:
    from numpy.typing import NDArray

MODEL_NAME = "fleet-model"
BLOCK_SIZE = 16


@dataclass(frozen=True)
class DayFiles:
    history: Path  # OpenMetrics, ``# EOF`` last
    truth: Path
    samples: int  # sample lines written
    job: str  # the ``job`` label of every series


def job_label(dialect: str) -> str:
    return f"day-{dialect}"


def write_day(spec: DaySpec, out_dir: Path) -> DayFiles:
    """Write the day of ``spec`` into ``out_dir`` (created; history written whole or not at
    all)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = make_plan(spec)
    load = DayLoad(plan)
    history = out_dir / "history.om"
    with atomic_open_binary(history) as out:
        samples = write_history(plan, load, out)
    truth = out_dir / "truth.json"
    doc = plan.truth() | {"job": job_label(spec.dialect), "model_name": MODEL_NAME}
    truth.write_text(json.dumps(doc, indent=2) + "\n")
    return DayFiles(history, truth, samples, job_label(spec.dialect))


def layouts(
    spec: DaySpec, specs: list[MetricSpec]
) -> list[list[list[list[tuple[str, tuple[tuple[str, str], ...]]]]]]:
    """[instance][family][group][series] (name, labels) as the simulator's exposition names
    them (``InstanceModel.layout``)."""
    out = []
    for i in range(spec.n_instances):
        name = spec.instance_label(i)
        ranks = [
            RankModel(
                RankInfo(
                    name,
                    r,
                    f"node-{i}",
                    1000 + r,
                    1.0,
                    KV_TOKENS // BLOCK_SIZE,
                    BLOCK_SIZE,
                    256,
                    8192,
                )
            )
            for r in range(spec.ranks)
        ]
        out.append(InstanceModel(name, MODEL_NAME, specs, ranks).layout())
    return out


def write_history(plan: Plan, load: DayLoad, out: BinaryIO) -> int:
    """Every family of every present unit and scrape; the number of sample lines."""
    spec = plan.spec
    specs = dialect_specs(spec.dialect)
    times = spec.times.astype(np.float64)
    stamps = pl.Series("s", [str(int(t)) for t in spec.times])
    lay = layouts(spec, specs)
    job = job_label(spec.dialect)
    present = [np.flatnonzero(load.present[i]) for i in range(spec.n_instances)]
    lines = 0
    for k, fam in enumerate(specs):
        out.write(family_header(fam))
        (values,) = family_values([fam], load, spec.ranks, times)  # [instance, series, time]
        for i in range(spec.n_instances):
            extra = {"instance": spec.instance_label(i), "job": job}
            lines += _write_instance(out, lay[i][k], values[i], present[i], stamps, extra)
    out.write(b"# EOF\n")
    return lines


def _write_instance(
    out: BinaryIO,
    groups: list[list[tuple[str, tuple[tuple[str, str], ...]]]],
    values: NDArray[np.float64],
    idx: NDArray[np.int64],
    stamps: pl.Series,
    extra: dict[str, str],
) -> int:
    """One instance's series of one family at the scrapes ``idx``: each label group's
    samples together, a MetricPoint (all of the group's series) per scrape."""
    heads: list[str] = []
    head_idx: list[NDArray[np.int64]] = []
    vals: list[NDArray[np.float64]] = []
    stamp_idx: list[NDArray[np.int64]] = []
    row = 0
    for group in groups:
        m = len(group)
        first = len(heads)
        heads.extend(
            f"{name}{format_labels(sorted({**dict(labels), **extra}.items()))}"
            for name, labels in group
        )
        block = values[row : row + m][:, idx]
        row += m
        head_idx.append(np.tile(np.arange(first, first + m), len(idx)))
        vals.append(block.T.ravel())
        stamp_idx.append(np.repeat(idx, m))
    if not heads or not len(idx):
        return 0
    frame = pl.DataFrame(
        [
            pl.Series("h", heads).gather(np.concatenate(head_idx)),
            value_text(np.concatenate(vals).round(4)),
            stamps.gather(np.concatenate(stamp_idx)),
        ]
    )
    frame.write_csv(out, separator=" ", quote_style="never", include_header=False)
    return frame.height
