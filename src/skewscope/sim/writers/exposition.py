"""The /metrics of every simulated instance at any simulated time, per engine dialect.

One model, three consumers: live HTTP endpoints (one scalar time per scrape), OpenMetrics history
and VictoriaMetrics import lines (hundreds of times at once).  So all state is precomputed once
per DP rank as sorted event arrays; a value at times ``T`` is a ``searchsorted`` away and a
histogram at ``T`` is one ``bincount``.  Every function takes a *sorted array* of times, the
scalar case is just ``T`` of length 1.

The metric names of each dialect live in ``metric_specs`` and nowhere else (this is the
simulator's side; the online reader keeps its own alias table for reading).
The state of each DP rank is ``rank_model.RankModel``, what it counts ``rank_events``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from skewscope.catalogue import MetricType
from skewscope.sim.writers.exposition_text import CONTENT_TYPE as CONTENT_TYPE
from skewscope.sim.writers.exposition_text import Family as Family
from skewscope.sim.writers.exposition_text import Labels, sorted_labels
from skewscope.sim.writers.exposition_text import Series as Series
from skewscope.sim.writers.exposition_text import format_labels as format_labels
from skewscope.sim.writers.exposition_text import format_value as format_value
from skewscope.sim.writers.exposition_text import render_text as render_text
from skewscope.sim.writers.exposition_text import type_name as type_name
from skewscope.sim.writers.families import family_values
from skewscope.sim.writers.metric_spec import MetricSpec as MetricSpec
from skewscope.sim.writers.metric_specs import DIALECTS as DIALECTS
from skewscope.sim.writers.metric_specs import dialect_specs as dialect_specs
from skewscope.sim.writers.rank_events import COUNTERS
from skewscope.sim.writers.rank_model import RankModel
from skewscope.sim.writers.specs_devices import device_specs

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from skewscope.sim.records import SimResult

    F64 = NDArray[np.float64]


class RankStack:
    """Ranks counted one by one (``RankModel``), read as the [rank, time] grids
    ``families.family_values`` takes."""

    def __init__(self, ranks: list[RankModel]) -> None:
        self.ranks, self.n = ranks, len(ranks)

    def is_counter(self, role: str) -> bool:
        return role in COUNTERS

    def counter(self, role: str, t: F64) -> F64:
        return np.stack([r.counters[role].at(t) for r in self.ranks])

    def hist(self, role: str, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        parts = [r.hists[role].at(bounds, t) for r in self.ranks]
        b, c, s = (np.stack([p[k] for p in parts]) for k in range(3))
        return b, c, s

    def gauge(self, role: str, t: F64) -> F64:
        return np.stack([r.gauge(role, t) for r in self.ranks])


class InstanceModel:
    """All metric families of one instance in one dialect (and its devices' exporter, if any:
    one device per DP rank, on the instance's own target so the host join places them)."""

    def __init__(
        self, instance: str, model_name: str, specs: list[MetricSpec], ranks: list[RankModel]
    ) -> None:
        self.instance = instance
        self.model_name = model_name
        self.specs = specs
        self.ranks = sorted(ranks, key=lambda r: r.info.dp_rank)
        self._layout: list[list[list[list[tuple[str, Labels]]]]] | None = None

    def _labels(self, spec: MetricSpec, rank: RankModel | None) -> dict[str, str]:
        labels = dict(spec.labels)
        if spec.model_label:
            labels["model_name"] = self.model_name
        if (
            rank is not None
            and spec.rank_label is not None
            and (spec.rank_label_single or len(self.ranks) > 1)
        ):
            labels[spec.rank_label] = str(rank.info.dp_rank)
        if spec.unit_label is not None:
            multi = spec.rank_in_unit and rank is not None and len(self.ranks) > 1
            labels[spec.unit_label] = (
                f"{self.instance}-rank-{rank.info.dp_rank}"
                if multi and rank is not None
                else self.instance
            )
        if spec.host_label is not None and rank is not None:
            labels[spec.host_label] = rank.info.hostname
        if spec.role == "cache_config" and rank is not None:
            bs, nb = rank.info.block_size, rank.info.total_blocks
            labels.update(
                block_size=str(bs),
                effective_attention_block_size=str(bs),
                num_gpu_blocks=str(nb),
                kv_cache_size_tokens=str(bs * nb),
            )
        return labels

    def _groups(self, spec: MetricSpec) -> list[tuple[list[RankModel], RankModel | None]]:
        """The ranks behind each label group of ``spec``: one per rank, or all of them."""
        return [([r], r) for r in self.ranks] if spec.per_rank else [(self.ranks, None)]

    def layout(self) -> list[list[list[tuple[str, Labels]]]]:
        """Every family's series names and labels, per label group (``families`` order);
        they never change, so they are worked out once."""
        if self._layout is None:
            self._layout = [
                [self._group_layout(spec, rank) for _ranks, rank in self._groups(spec)]
                for spec in self.specs
            ]
        return [[g for gs in fam for g in gs] for fam in self._layout]

    def _group_layout(
        self, spec: MetricSpec, rank: RankModel | None
    ) -> list[list[tuple[str, Labels]]]:
        """The label groups one rank group of ``spec`` exposes (several for split/parts)."""
        labels = self._labels(spec, rank)
        if spec.kind is MetricType.HISTOGRAM:
            les = [format_value(b) for b in spec.buckets] + ["+Inf"]
            return [
                [(spec.name + "_bucket", sorted_labels({**labels, "le": le})) for le in les]
                + [
                    (spec.name + "_count", sorted_labels(labels)),
                    (spec.name + "_sum", sorted_labels(labels)),
                ]
            ]
        sample = spec.name + ("_total" if spec.kind is MetricType.COUNTER else "")
        if spec.parts is not None:
            key, roles = spec.parts
            return [[(sample, sorted_labels({**labels, key: v}))] for v, _role in roles]
        if spec.split is None:
            return [[(sample, sorted_labels(labels))]]
        key, options, _carrier = spec.split
        return [[(sample, sorted_labels({**labels, key: o}))] for o in options]

    def values(self, t: F64) -> list[F64]:
        """Every family's values at the sorted times ``t``: one row per series of ``layout``
        (groups in order), one column per time."""
        t = np.asarray(t, dtype=np.float64)
        fams = family_values(self.specs, RankStack(self.ranks), len(self.ranks), t)
        return [v[0] for v in fams]

    def families(self, t: F64) -> list[Family]:
        """Every family of this instance at the sorted times ``t``."""
        fams: list[Family] = []
        for spec, groups, values in zip(self.specs, self.layout(), self.values(t), strict=True):
            rows = iter(values)
            fams.append(
                Family(
                    spec, [[Series(name, labels, next(rows)) for name, labels in g] for g in groups]
                )
            )
        return fams


def model_specs(dialect: str, devices: str | None, meta: Mapping[str, object]) -> list[MetricSpec]:
    """The families an instance exposes: its dialect's, and its device exporter's if any."""
    max_len = int(str(meta.get("max_model_len", 32768)))
    return dialect_specs(dialect, max_len) + (device_specs(devices) if devices else [])


class ClusterModel:
    """Every instance's exposition model for one run and dialect (``devices``: a device
    exporter, ``specs_devices.DEVICE_EXPORTERS``, written next to it)."""

    def __init__(
        self, result: SimResult, dialect: str = "vllm", devices: str | None = None
    ) -> None:
        dialect_specs(dialect)  # validate early
        if devices:
            device_specs(devices)
        self.dialect = dialect
        self.start_s, self.end_s = result.start_s, result.end_s
        self.model_name = result.model_name
        specs = model_specs(dialect, devices, result.meta)
        self.instances = {
            i: InstanceModel(
                i,
                result.model_name,
                specs,
                [RankModel.build(result, r) for r in result.ranks if r.instance == i],
            )
            for i in result.instances
        }

    def text(self, instance: str, t: float) -> str:
        """Prometheus text format 0.0.4 of ``instance`` at simulated time ``t``."""
        fams = self.instances[instance].families(np.array([t]))
        return render_text(fams)
