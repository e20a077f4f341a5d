"""What a simulated cluster is: the frozen specs a scenario is made of (its ranks, health,
prefill/decode split, routing and workload) and the ground truth it must be diagnosed with.

Plain data that imports only the routing and workload specs: ``scenario`` reads TOML into
these, ``limits`` checks them, ``engine``/``loop``/``rank``/``pd`` run them and ``records``
carries the truth into the result. Each of them imports this module, and none needs another
for a type, so the simulator's modules form no import cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from skewscope.frame import dp_unit_id
from skewscope.sim.policies import RoutingSpec
from skewscope.sim.workload import WorkloadSpec


@dataclass(frozen=True)
class GroundTruth:
    """What a correct diagnosis of this run must say (written beside the output as truth.json)."""

    scenario: str
    verdict: str  # a catalogue.Verdict, as the scenario's TOML spells it
    level: str  # a catalogue.Level
    hot_units: tuple[str, ...] = ()  # unit ids: "inst-1" or "inst-0/dp2"
    idle_units: tuple[str, ...] = ()  # units that get (almost) no traffic, e.g. failed health check
    kind: str | None = None  # a catalogue.Kind (scenario.KINDS)
    weight_side: str | None = None  # "input" | "output" for weight skew
    root_cause: str | None = None  # a catalogue.Cause
    kv_exhausted: bool = False  # the hot unit runs out of KV blocks
    description: str = ""
    # units taking turns at the bursts of a balancer deciding on stale load (kind stale_load)
    rotating_units: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hot_units"] = list(self.hot_units)
        d["idle_units"] = list(self.idle_units)
        d["rotating_units"] = list(self.rotating_units)
        return d


@dataclass(frozen=True)
class PdSpec:
    """The ``[pd]`` table of a scenario."""

    prefill_instances: int
    transfer_ms: float = 5.0  # first token out on prefill -> request queued on decode
    decode_prefill_token_ms: float = 0.004  # loading a transferred prompt's KV, per token


@dataclass(frozen=True)
class RankSpec:
    """One DP rank's engine: continuous batching limits, KV pool and step-time model.

    step time = (fixed_ms + per_prefill_token_ms * prefill tokens
                 + per_decode_seq_ms * decode sequences) * speed
    """

    max_running: int = 64
    token_budget: int = 4096
    chunked_prefill: bool = True
    block_size: int = 16
    total_blocks: int = 8192
    fixed_ms: float = 25.0
    per_prefill_token_ms: float = 0.04
    per_decode_seq_ms: float = 0.5
    speed: float = 1.0  # step-time multiplier: 1.8 = 1.8x slower


@dataclass(frozen=True)
class Health:
    """An instance that fails its health check at ``fail_at_s`` or joins at ``join_at_s``."""

    instance: str
    fail_at_s: float = float("inf")
    join_at_s: float = 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    truth: GroundTruth
    duration_s: float = 180.0
    seed: int = 1
    instances: int = 4
    dp_ranks: int = 1
    rank: RankSpec = field(default_factory=RankSpec)
    overrides: tuple[tuple[str, RankSpec], ...] = ()  # unit id -> full spec, in file order
    health: tuple[Health, ...] = ()
    gateway: RoutingSpec = field(default_factory=RoutingSpec)
    dispatcher: RoutingSpec = field(default_factory=RoutingSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    model_name: str = "sim-llama-8b"
    source: str = "<code>"
    # Ranks present per instance when instances differ (a what-if replay of a mixed fleet: one
    # instance DP=2, the others DP=4); () = ``dp_ranks`` everywhere. The simulator keeps an
    # instances x dp_ranks grid; ranks at or past an instance's size never get a request.
    dp_sizes: tuple[int, ...] = ()
    pd: PdSpec | None = None  # prefill/decode disaggregated (sim/pd.py); None: aggregated

    def instance_name(self, i: int) -> str:
        return f"inst-{i}"

    def dp_choices(self) -> list[tuple[int, ...]]:
        """Per instance, the DP ranks its dispatcher may choose."""
        sizes = self.dp_sizes or (self.dp_ranks,) * self.instances
        return [tuple(range(min(n, self.dp_ranks))) for n in sizes]

    def unit_ids(self) -> set[str]:
        """Every unit id of the cluster: instances and their DP ranks."""
        ids = {self.instance_name(i) for i in range(self.instances)}
        ids |= {
            dp_unit_id(self.instance_name(i), d)
            for i in range(self.instances)
            for d in range(self.dp_ranks)
        }
        return ids

    def rank_spec(self, i: int, d: int) -> RankSpec:
        """The spec of rank ``d`` of instance ``i``: the last matching override wins."""
        spec = self.rank
        ids = (self.instance_name(i), dp_unit_id(self.instance_name(i), d))
        for unit, s in self.overrides:
            if unit in ids:
                spec = s
        return spec

    def availability_windows(self) -> list[tuple[float, float]]:
        """Per instance, the [from, until) interval in which it gets traffic."""
        win = [(0.0, float("inf"))] * self.instances
        for h in self.health:
            i = int(h.instance.removeprefix("inst-"))
            win[i] = (h.join_at_s, h.fail_at_s)
        return win
