"""The /metrics of every simulated instance at any simulated time, per engine dialect.

One model, three consumers: live HTTP endpoints (one scalar time per scrape), OpenMetrics history
and VictoriaMetrics import lines (hundreds of times at once).  So all state is precomputed once
per DP rank as sorted event arrays; a value at times ``T`` is a ``searchsorted`` away and a
histogram at ``T`` is one ``bincount``.  Every function takes a *sorted array* of times, the
scalar case is just ``T`` of length 1.

The metric names of each dialect live in ``metric_specs`` and nowhere else (this is the
simulator's side; the online reader keeps its own alias table for reading).

What is derived from what (the SimResult contract has no token timeline per request):
- running / waiting gauges: from the request table (scheduled-not-finished, arrived-not-
  scheduled), so they are exact at any time, including idle gaps between steps;
- KV usage: the last step's used blocks (0 once nothing runs);
- prompt tokens: counted at the first token (as vLLM does); generation tokens: 1 at the first
  token plus each step's decode tokens at its end;
- TTFT at the first token; e2e, queue time, TPOT and per-request token histograms at finish
  (vLLM records those with the finished request); ITL per decode token at each step end, as the
  gap to the previous step end of the same rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from skewscope.catalogue import MetricType
from skewscope.sim.writers.event_arrays import Events, Observations
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
from skewscope.sim.writers.specs_devices import (
    DEVICE_AVERAGE_S,
    DEVICE_BLOCK_MB,
    DEVICE_MODEL_MB,
    device_specs,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from numpy.typing import NDArray

    from skewscope.sim.records import RankInfo, SimResult

    F64 = NDArray[np.float64]


def _col(df: pl.DataFrame, name: str) -> F64:
    return df.get_column(name).cast(pl.Float64).fill_null(np.nan).to_numpy()


COUNTERS = ("arrived", "scheduled", "finished", "prompt_tokens", "generation_tokens", "preemptions")
HISTOGRAMS = (
    "ttft",
    "e2e",
    "queue",
    "queue_at_schedule",
    "tpot",
    "request_prompt_tokens",
    "request_generation_tokens",
    "input_tokens",
    "itl",
    "iteration_tokens",
    "batch_size",
    "waiting_batch_size",
)
# step columns a rank model reads (``_feed_steps``), in this order
STEP_COLUMNS = (
    "start_s",
    "end_s",
    "decode_tokens",
    "preempted",
    "prefill_tokens",
    "batch_size",
    "waiting",
    "used_blocks",
)


@dataclass
class RequestEvents:
    """Requests of one rank in request order: their times (NaN: never) and lengths, and the
    times of the events to count now (NaN: not now — earlier, later or never)."""

    arrival: F64
    sched: F64
    first: F64
    finish: F64
    inp: F64
    out: F64
    accepted: NDArray[np.bool_]
    at_arrival: F64
    at_sched: F64
    at_first: F64
    at_finish: F64
    rank: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if len(self.rank) != len(self.arrival):  # one rank's requests
            self.rank = np.zeros(len(self.arrival), dtype=np.int64)


@dataclass
class StepEvents:
    """A rank's (or a group's, the ranks telling them apart) steps to count now: those that
    ended (their end, the end of the step before each, decode and prefill tokens, batch size,
    waiting requests) and those that started (start, preempted requests)."""

    end_rank: NDArray[np.int64]
    end: F64
    prev_end: F64
    decode: F64
    prefill: F64
    batch: F64
    waiting: F64
    start_rank: NDArray[np.int64]
    start: F64
    preempted: F64


if TYPE_CHECKING:
    Feed = tuple[NDArray[np.int64], F64, F64 | None]  # rank, event times, weights
    ObsFeed = tuple[NDArray[np.int64], F64, F64, F64 | None]  # rank, times, values, weights


def counter_feeds(req: RequestEvents, sev: StepEvents) -> dict[str, Feed]:
    """What each counter counts now: the events' times and weights (the one place that says
    which event moves which counter, for a rank or a group of ranks at once)."""
    t_end, decode = sev.end, sev.decode
    r = req.rank
    return {
        "arrived": (r, np.where(req.accepted, req.at_arrival, np.nan), None),
        "scheduled": (r, req.at_sched, None),
        "finished": (r, req.at_finish, None),
        "prompt_tokens": (r, req.at_first, req.inp),
        "generation_tokens": (
            np.concatenate([r, sev.end_rank]),
            np.concatenate([req.at_first, t_end]),
            np.concatenate([np.ones(len(r)), decode]),
        ),
        "preemptions": (sev.start_rank, sev.start, sev.preempted),
    }


def hist_feeds(req: RequestEvents, sev: StepEvents) -> dict[str, ObsFeed]:
    """What each histogram observes now: times, values, weights (see ``counter_feeds``)."""
    a, s, f, e, out, r = req.arrival, req.sched, req.first, req.finish, req.out, req.rank
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, (e - f) / (out - 1), np.nan)
    sr, t_end, decode = sev.end_rank, sev.end, sev.decode
    return {
        "ttft": (r, req.at_first, f - a, None),
        "e2e": (r, req.at_finish, e - a, None),
        "queue": (r, req.at_finish, s - a, None),
        "queue_at_schedule": (r, req.at_sched, s - a, None),
        "tpot": (r, req.at_finish, tpot, None),
        "request_prompt_tokens": (r, req.at_finish, req.inp, None),
        "request_generation_tokens": (r, req.at_finish, out, None),
        "input_tokens": (r, req.at_arrival, req.inp, None),
        "itl": (sr, t_end, t_end - sev.prev_end, decode),
        "iteration_tokens": (sr, t_end, sev.prefill + decode, None),
        "batch_size": (sr, t_end, sev.batch, None),
        "waiting_batch_size": (sr, t_end, sev.waiting, None),
    }


@dataclass
class RankModel:
    """The /metrics state of one DP rank, fed in time slices (or the whole run at once).

    ``feed(requests, steps, upto)`` counts every event up to ``upto`` not counted before;
    ``value``/``gauge`` then answer for times in (previous ``upto``, ``upto``]. Counters and
    histograms carry running totals; the steps are kept only as far back as a gauge at those
    times reads (the last step started, ``DEVICE_AVERAGE_S`` of busy time)."""

    info: RankInfo
    counters: dict[str, Events] = field(default_factory=dict)
    hists: dict[str, Observations] = field(default_factory=dict)
    step_start: F64 = field(default_factory=lambda: np.empty(0))
    step_end: F64 = field(default_factory=lambda: np.empty(0))
    step_used: F64 = field(default_factory=lambda: np.empty(0))
    # steps held: STEP_COLUMNS rows, the busy time done before each (``done[k]``, one more
    # than rows), the end of the step before the first held one, how many held steps' start
    # and end events are counted, and the last ``upto``
    _held: F64 = field(default_factory=lambda: np.empty((0, len(STEP_COLUMNS))))
    _done: F64 = field(default_factory=lambda: np.zeros(1))
    _prev_end: float = math.nan
    _n_started: int = 0
    _n_ended: int = 0
    upto: float = -math.inf

    def __post_init__(self) -> None:
        self.counters = {k: Events() for k in COUNTERS}
        self.hists = {k: Observations() for k in HISTOGRAMS}

    @classmethod
    def build(cls, result: SimResult, info: RankInfo) -> RankModel:
        """The whole run at once (live mode, tests): every time is answerable."""
        req = result.requests.filter(
            (pl.col("instance") == info.instance) & (pl.col("dp_rank") == info.dp_rank)
        )
        st = result.steps.filter(
            (pl.col("instance") == info.instance) & (pl.col("dp_rank") == info.dp_rank)
        ).sort("start_s")
        arrival, sched = _col(req, "arrival_s"), _col(req, "first_scheduled_s")
        first, finish = _col(req, "first_token_s"), _col(req, "finish_s")
        accepted = (req.get_column("status") != "rejected").to_numpy()
        ev = RequestEvents(
            arrival,
            sched,
            first,
            finish,
            _col(req, "input_tokens"),
            _col(req, "output_tokens"),
            accepted,
            arrival,
            sched,
            first,
            finish,
        )
        m = cls(info)
        m.feed(ev, np.column_stack([_col(st, c) for c in STEP_COLUMNS]), math.inf)
        return m

    def feed(self, req: RequestEvents, steps: F64, upto: float) -> None:
        """Count the requests' events given now and the new steps' (rows of
        ``STEP_COLUMNS``, the rank's next steps in time order) up to ``upto``."""
        sev = self._feed_steps(steps, upto)
        for role, (_r, t, w) in counter_feeds(req, sev).items():
            self.counters[role].feed(t, w)
        for role, (_r, t, v, w) in hist_feeds(req, sev).items():
            self.hists[role].feed(t, v, w)

    def _feed_steps(self, steps: F64, upto: float) -> StepEvents:
        """Hold the new steps (what the gauges read) and give the step events up to ``upto``
        not counted yet (all of this one rank: rank id 0)."""
        self._trim()
        self.upto = upto
        if len(steps):
            done = np.cumsum(np.concatenate([self._done[-1:], steps[:, 1] - steps[:, 0]]))
            self._done = np.concatenate([self._done, done[1:]])
            self._held = np.concatenate([self._held, steps]) if len(self._held) else steps
        h = self._held
        start, end = h[:, 0], h[:, 1]
        s0, s1 = self._n_started, int(np.searchsorted(start, upto, side="right"))
        e0, e1 = self._n_ended, int(np.searchsorted(end, upto, side="right"))
        self._n_started, self._n_ended = s1, e1
        self.step_start, self.step_end, self.step_used = start, end, h[:, 7]
        ended = h[e0:e1]
        prev = np.concatenate([[self._prev_end], end[:-1]])[e0:e1]
        return StepEvents(
            np.zeros(e1 - e0, np.int64),
            ended[:, 1],
            prev,
            ended[:, 2],
            ended[:, 4],
            ended[:, 5],
            ended[:, 6],
            np.zeros(s1 - s0, np.int64),
            start[s0:s1],
            h[s0:s1, 3],
        )

    def _trim(self) -> None:
        """Drop held steps no later query reads: counted, ended ``DEVICE_AVERAGE_S`` (and a
        second) before the last ``upto``, and not the last step started by then."""
        if not math.isfinite(self.upto) or not len(self._held):
            return
        h = self._held
        k = min(
            self._n_started,
            self._n_ended,
            int(np.searchsorted(h[:, 1], self.upto - DEVICE_AVERAGE_S - 1.0, side="right")),
            max(int(np.searchsorted(h[:, 0], self.upto, side="right")) - 1, 0),
        )
        if k <= 0:
            return
        self._prev_end = float(h[k - 1, 1])
        self._held, self._done = h[k:], self._done[k:]
        self._n_started -= k
        self._n_ended -= k

    def gauge(self, role: str, t: F64) -> F64:
        i = self.info
        return gauge_values(
            role,
            t,
            lambda k: self.counters[k].at(t),
            self._used,
            self._busy,
            np.full(len(t), float(i.total_blocks)),
            i.block_size,
            i.max_running,
        )

    def _used(self, t: F64, running: F64) -> F64:
        """KV blocks used at ``t``: the last step started's (0 while nothing runs)."""
        used: F64 = np.zeros(len(t))
        if len(self.step_start):
            i = np.searchsorted(self.step_start, t, side="right") - 1
            used = np.where((i >= 0) & (running > 0), self.step_used[np.maximum(i, 0)], 0.0)
        return used

    def _busy(self, t: F64) -> F64:
        """Time spent in steps up to each of ``t`` (a rank's steps follow one another)."""
        start, end = self.step_start, self.step_end
        done = self._done  # busy time before each held step (and after the last)
        i = np.searchsorted(end, t, side="right")  # steps finished by t
        nxt = np.minimum(i, max(len(start) - 1, 0))
        partial = (
            np.where((i < len(start)) & (start[nxt] < t), t - start[nxt], 0.0)
            if len(start)
            else np.zeros(len(t))
        )
        busy: F64 = done[i] + partial
        return busy

    def value(self, spec: MetricSpec, t: F64) -> F64:
        if spec.kind is MetricType.COUNTER or (
            spec.kind is MetricType.GAUGE and spec.role in self.counters
        ):
            return self.counters[spec.role].at(t)
        return self.gauge(spec.role, t)


def gauge_values(
    role: str,
    t: F64,
    count: Callable[[str], F64],
    used: Callable[[F64, F64], F64],
    busy: Callable[[F64], F64],
    total: F64,
    block_size: int | NDArray[np.int64],
    max_running: int | NDArray[np.int64],
) -> F64:
    """A gauge of one rank (``total`` of shape [time]) or of many ([rank, time], the per-rank
    numbers as [rank, 1] columns): ``count(role)`` a counter at ``t``, ``used(t, running)``
    the KV blocks in use, ``busy(times)`` the time spent in steps up to each of ``times``."""
    running = count("scheduled") - count("finished")
    if role == "running":
        return running
    if role == "waiting":
        return count("arrived") - count("scheduled")
    if role == "total_blocks":
        return total
    if role == "kv_capacity_tokens":
        return total * block_size
    if role == "cache_config":
        return np.ones(total.shape)
    if role == "max_running":
        return np.zeros(total.shape) + max_running
    if role == "device_util":
        util: F64 = (busy(t) - busy(t - DEVICE_AVERAGE_S)) / DEVICE_AVERAGE_S
        return util
    u = used(t, running)
    if role == "used_blocks":
        return u
    if role == "free_blocks":
        return total - u
    if role == "kv_usage":
        usage: F64 = u / total
        return usage
    if role == "device_mem":
        mem: F64 = DEVICE_MODEL_MB + u * DEVICE_BLOCK_MB
        return mem
    raise KeyError(role)


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
