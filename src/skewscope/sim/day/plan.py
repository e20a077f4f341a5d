"""The fleet day's shape and its timetable: when each noise and each injected skew happens.

A day is laid out as one sequence of blocks after a near-idle night: the seven skew episodes,
each on its own instance, none overlapping another, with the fleet's operations (a rolling
restart of every instance, a scale-out, a deploy) in their own slots between them, so every
noise event is something an alert must stay quiet through and every episode something it
must flag. Bursts fall anywhere but the night. The timetable is known truth (``truth.json``);
``load`` turns it into per-unit load arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

DAY_DIALECTS = ("vllm", "sglang")
T0 = 1_764_547_200  # 2025-12-01T00:00:00Z: windows of any whole minute divide its offsets
EPISODE_KINDS = (  # (id, level, kind), in the order they happen
    ("inst-count", "instance", "count"),
    ("dp-count", "dp", "count"),
    ("inst-weight", "instance", "weight"),
    ("inst-capability", "instance", "capability"),
    ("dp-weight", "dp", "weight"),
    ("inst-starved", "instance", "starved"),
    ("dp-stale-load", "dp", "stale_load"),
)
# episode lengths around the mean: the day's are 20-40 min (full) but never the same
_LENGTH_SHAPE = (0.0, -1.0, 1.0, 0.5, -0.75, 0.0, 0.25)


@dataclass(frozen=True)
class DaySpec:
    """A fleet day: ``instances`` x ``ranks`` DP engines (plus ``scale_out`` instances joining
    midway), ``hours`` of samples every ``step_s`` seconds, in ``dialect``'s metric names.

    ``window_s`` is the rate window the day's episodes are sized for: each lasts at least the
    alerts' persistence horizon (3 windows) plus 3 windows at that window."""

    instances: int = 16
    ranks: int = 2
    hours: float = 6.0
    step_s: int = 15
    seed: int = 0
    dialect: str = "vllm"
    scale_out: int = 2
    window_s: int = 300
    peak_rps: float = 4.0  # requests/s a unit gets at the day's peak (fair share)
    night_share: float = 0.1  # of the span, near-idle at the start
    restart_spacing_s: int = 150  # one instance after the other
    deploy_s: int = 600
    warm_s: int = 240  # a restarted or joining unit gets its full share after this
    gap_share: float = 0.2  # gap between blocks, as a share of the mean episode
    length_spread: float = 0.2  # episode lengths: mean x (1 +- spread)
    stale_publish_s: int = 30  # the stale-load balancer's publish period
    bursts: int = 24

    @classmethod
    def full(cls, **kw: Any) -> DaySpec:
        """6 h of 16 x 2 DP ranks (+2 joining), episodes of 20-40 min (5 min windows)."""
        return cls(**kw)

    @classmethod
    def short(cls, **kw: Any) -> DaySpec:
        """90 min of 8 x 2 (+2 joining) for the default suite: every noise and every skew
        kind, episodes of ~7 min sized for 1 min windows (3 min persistence + 3 windows)."""
        base: dict[str, Any] = dict(
            instances=8,
            hours=1.5,
            window_s=60,
            night_share=1 / 15,
            restart_spacing_s=120,
            deploy_s=180,
            warm_s=150,
            gap_share=0.12,
            length_spread=0.1,
            bursts=8,
        )
        return cls(**(base | kw))

    def __post_init__(self) -> None:
        if self.dialect not in DAY_DIALECTS:
            raise ValueError(f"dialect {self.dialect!r}: the day writes {DAY_DIALECTS}")
        if self.ranks < 2 or self.instances < len(EPISODE_KINDS) + 1:
            raise ValueError(
                f"a day needs >= 2 ranks and >= {len(EPISODE_KINDS) + 1} "
                f"instances (one per episode and a peer), got {self.instances} x "
                f"{self.ranks}"
            )
        if self.step_s <= 0 or self.hours <= 0:
            raise ValueError("step_s and hours must be positive")

    @property
    def span_s(self) -> int:
        return round(self.hours * 3600 / self.step_s) * self.step_s

    @property
    def times(self) -> np.ndarray:
        return T0 + self.step_s * np.arange(self.span_s // self.step_s + 1)

    @property
    def n_instances(self) -> int:
        return self.instances + self.scale_out

    def instance_label(self, i: int) -> str:
        port = 8000 if self.dialect == "vllm" else 30000
        return f"10.0.{i // 250}.{i % 250 + 1}:{port}"


@dataclass(frozen=True)
class Episode:
    id: str
    level: str
    kind: str
    instance: int
    dp_rank: int | None
    start: float  # s from t0
    end: float


@dataclass(frozen=True)
class Noise:
    what: str
    instance: int | None
    dp_rank: int | None
    start: float
    end: float
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """The day's timetable (seconds from t0)."""

    spec: DaySpec
    episodes: tuple[Episode, ...]
    noise: tuple[Noise, ...]
    restart: dict[int, tuple[float, float]]  # instance -> (down, back)
    joins: dict[int, float]  # scale-out instance -> joined at
    night_end: float
    deploy: tuple[float, float]

    def truth(self) -> dict[str, Any]:
        """truth.json (notes/contract-day.md): epoch seconds, label values as strings."""
        s = self.spec

        def inst(i: int | None) -> str | None:
            return None if i is None else s.instance_label(i)

        def rank(r: int | None) -> str | None:
            return None if r is None else str(r)

        eps = []
        for e in self.episodes:
            d: dict[str, Any] = {
                "id": e.id,
                "level": e.level,
                "instance": inst(e.instance),
                "dp_rank": rank(e.dp_rank),
                "kind": e.kind,
                "start": _at(e.start),
                "end": _at(e.end),
            }
            if e.kind == "stale_load":
                d["publish_period_s"] = s.stale_publish_s
            eps.append(d)
        noise = [
            {
                "what": n.what,
                "instance": inst(n.instance),
                "dp_rank": rank(n.dp_rank),
                "start": _at(n.start),
                "end": _at(n.end),
                **{k: _at(v) if k in _TIME_KEYS else v for k, v in n.extra.items()},
            }
            for n in self.noise
        ]
        return {
            "t0": T0,
            "t1": T0 + s.span_s,
            "step_s": s.step_s,
            "dialect": s.dialect,
            "window_s": s.window_s,
            "instances": s.instances,
            "ranks": s.ranks,
            "seed": s.seed,
            "episodes": eps,
            "noise": noise,
        }


_TIME_KEYS = ("back",)


def _at(offset: float) -> int | float:
    """Epoch seconds of an offset from t0 (an integer when whole: every step is)."""
    x = T0 + offset
    return int(x) if float(x).is_integer() else x


def make_plan(spec: DaySpec) -> Plan:
    """Lay the day out (deterministic in ``spec.seed``)."""
    rng = np.random.default_rng((spec.seed, 11))
    span, step = float(spec.span_s), spec.step_s
    night_end = _snap(spec.night_share * span, step)
    warm = float(spec.warm_s)
    restart_len = spec.instances * spec.restart_spacing_s + warm  # the last one warm again
    tail = 2.0 * spec.window_s
    n_ep, n_gaps = len(EPISODE_KINDS), len(EPISODE_KINDS) + 3  # a gap before each block
    free = span - night_end - restart_len - spec.deploy_s - warm - tail
    mean = free / (n_ep + n_gaps * spec.gap_share)
    gap = spec.gap_share * mean
    lengths = [mean * (1 + spec.length_spread * f) for f in _LENGTH_SHAPE]
    if min(lengths) < 4 * spec.window_s:
        raise ValueError(
            f"{spec.hours:g} h is too short for {n_ep} episodes of >= 4 windows "
            f"of {spec.window_s} s beside the operations"
        )
    # instances: the episodes' (distinct, never one that joins late), then the others
    order = rng.permutation(spec.instances)
    ep_inst = [int(i) for i in order[:n_ep]]
    blocks: list[tuple[str, float]] = []  # (name, length) in the order they happen
    for k, (eid, _lvl, _kind) in enumerate(EPISODE_KINDS):
        blocks.append((eid, lengths[k]))
        if k == 0:
            blocks.append(("restart", restart_len))
        elif k == 1:
            blocks.append(("scale_out", warm))
        elif k == 2:
            blocks.append(("deploy", float(spec.deploy_s)))
    at = night_end + gap
    episodes: list[Episode] = []
    noise: list[Noise] = []
    restart: dict[int, tuple[float, float]] = {}
    joins: dict[int, float] = {}
    deploy = (0.0, 0.0)
    kinds = {eid: (lvl, kind) for eid, lvl, kind in EPISODE_KINDS}
    for name, length in blocks:
        start, end = _snap(at, step), _snap(at + length, step)
        if name in kinds:
            lvl, kind = kinds[name]
            i = ep_inst[len(episodes)]
            r = int(rng.integers(spec.ranks)) if lvl == "dp" and kind != "stale_load" else None
            episodes.append(Episode(name, lvl, kind, i, r, start, end))
        elif name == "restart":
            for j, i in enumerate(rng.permutation(spec.instances).tolist()):
                down = _snap(start + j * spec.restart_spacing_s + 15, step)
                back = down + _snap(float(rng.uniform(60, 120)), step)
                restart[int(i)] = (down, back)
                noise.append(Noise("restart", int(i), None, down, back + warm, {"back": back}))
        elif name == "scale_out":
            for i in range(spec.instances, spec.n_instances):
                joins[i] = start
                noise.append(Noise("scale_out", i, None, start, start + warm))
        else:
            deploy = (start, end)
            noise.append(Noise("deploy", None, None, start, end))
        at = end + gap
    if at - gap > span - tail + step * len(blocks):
        raise AssertionError("day layout overran its span")  # the arithmetic above forbids it
    noise.append(Noise("diurnal", None, None, 0.0, span))
    noise.append(Noise("night", None, None, 0.0, night_end))
    noise.append(Noise("unit_noise", None, None, 0.0, span))
    noise.extend(_bursts(spec, rng, night_end, restart, joins, episodes))
    return Plan(spec, tuple(episodes), tuple(noise), restart, joins, night_end, deploy)


def _bursts(
    spec: DaySpec,
    rng: np.random.Generator,
    night_end: float,
    restart: dict[int, tuple[float, float]],
    joins: dict[int, float],
    episodes: list[Episode],
) -> list[Noise]:
    """Bursts of 30-90 s on random units after the night, never on an absent or cold unit,
    nor on an episode's instance during its episode (the truth stays one thing at a time)."""
    out: list[Noise] = []
    step = spec.step_s
    while len(out) < spec.bursts:
        i = int(rng.integers(spec.n_instances))
        r = int(rng.integers(spec.ranks))
        start = _snap(float(rng.uniform(night_end, spec.span_s - 120)), step)
        end = start + _snap(float(rng.uniform(30, 90)), step)
        down, back = restart.get(i, (-1.0, -1.0))
        if end >= down - step and start <= back + spec.warm_s:
            continue
        if start < joins.get(i, 0.0) + spec.warm_s:
            continue
        if any(e.instance == i and end >= e.start and start <= e.end for e in episodes):
            continue
        out.append(Noise("burst", i, r, start, end))
    return sorted(out, key=lambda n: n.start)


def _snap(x: float, step: int) -> float:
    return float(round(x / step) * step)
