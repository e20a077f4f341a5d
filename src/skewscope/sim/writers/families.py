"""Every metric family's values at the queried times, for all instances of a run of ranks at
once: one array operation per family over [rank, time] grids, not one per instance and rank.

The ranks come from a ``RankSource``: a history sink's group (``rank_group.RankGroup``, whose
counts are [rank, time] grids already) or one instance's ``RankModel``s stacked
(``exposition.InstanceModel``: live mode, the kept table). Ranks are instance-major, ``n_dp``
to an instance, in DP rank order. Sums over an instance's ranks add them one after another
in rank order (as Python's ``sum`` over the ranks did), so the floats are the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from skewscope.catalogue import MetricType

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from skewscope.sim.writers.metric_spec import MetricSpec

    F64 = NDArray[np.float64]


class RankSource(Protocol):
    """The counts of ``n`` ranks at sorted times ``t``, each as a [rank, time] grid."""

    n: int

    def is_counter(self, role: str) -> bool: ...

    def counter(self, role: str, t: F64) -> F64: ...

    def hist(self, role: str, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        """([rank, time, bucket] cumulative ``le`` counts, [rank, time] count and sum)."""
        ...

    def gauge(self, role: str, t: F64) -> F64: ...


def family_values(specs: list[MetricSpec], src: RankSource, n_dp: int, t: F64) -> list[F64]:
    """Every family's values: [instance, series, time] per family, the series in the order
    of ``InstanceModel.layout`` (label groups in order; per-rank families rank by rank)."""
    return [_family(spec, src, n_dp, t) for spec in specs]


def roles_read(specs: list[MetricSpec]) -> set[str]:
    """The counter and histogram roles the families read (and gauge roles, harmlessly)."""
    return {spec.role for spec in specs} | {
        role for spec in specs if spec.parts is not None for _v, role in spec.parts[1] if role
    }


def _family(spec: MetricSpec, src: RankSource, n_dp: int, t: F64) -> F64:
    units = src.n if spec.per_rank else src.n // n_dp  # a row group per rank or per instance
    if spec.kind is MetricType.HISTOGRAM:
        b, c, s = src.hist(spec.role, spec.buckets, t)
        if not spec.per_rank:
            b, c, s = (_sum_dp(x, n_dp) for x in (b, c, s))
        nb = b.shape[2]
        out = np.empty((units, nb + 3, len(t)))
        out[:, :nb] = b.transpose(0, 2, 1)
        out[:, nb] = c
        out[:, nb + 1] = c
        out[:, nb + 2] = s
    elif spec.parts is not None:
        out = np.zeros((units, len(spec.parts[1]), len(t)))
        for k, (_v, role) in enumerate(spec.parts[1]):
            if role:
                out[:, k] = _per_unit(src.counter(role, t), spec, n_dp)
    elif spec.split is None:
        out = _scalar(spec, src, n_dp, t)[:, None]
    else:
        _key, options, carrier = spec.split
        out = np.zeros((units, len(options), len(t)))
        out[:, options.index(carrier)] = _scalar(spec, src, n_dp, t)
    # a per-rank family's row groups of an instance follow one another in rank order
    return np.ascontiguousarray(out, dtype=np.float64).reshape(src.n // n_dp, -1, len(t))


def _scalar(spec: MetricSpec, src: RankSource, n_dp: int, t: F64) -> F64:
    """[unit, time]: per rank, or summed over each instance's ranks (KV usage pooled)."""
    if spec.kind is MetricType.COUNTER or (
        spec.kind is MetricType.GAUGE and src.is_counter(spec.role)
    ):
        v = src.counter(spec.role, t)
    elif spec.role == "kv_usage" and not spec.per_rank and n_dp > 1:  # pooled, not averaged
        used = _sum_dp(src.gauge("used_blocks", t), n_dp)
        total = _sum_dp(src.gauge("total_blocks", t), n_dp)
        pooled: F64 = np.asarray(used / total) * spec.scale
        return pooled
    else:
        v = src.gauge(spec.role, t)
    out: F64 = np.asarray(_per_unit(v, spec, n_dp)) * spec.scale
    return out


def _per_unit(v: F64, spec: MetricSpec, n_dp: int) -> F64:
    return 0 + v if spec.per_rank else _sum_dp(v, n_dp)


def _sum_dp(x: F64, n_dp: int) -> F64:
    """Each instance's ranks added one after another ([rank, ...] -> [instance, ...])."""
    g = x.reshape(-1, n_dp, *x.shape[1:])
    acc: F64 = 0 + g[:, 0]
    for d in range(1, n_dp):
        acc = acc + g[:, d]
    return acc
