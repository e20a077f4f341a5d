"""Routing policies of the gateway (request -> instance) and the DP dispatcher (-> rank).

Each level has one ``Router``. Count-based policies (round robin, weighted) pick the unit whose
*virtual time* ``assigned / weight`` is lowest: this is smooth weighted round robin without a
pointer, it yields exact weight proportions, and it compensates for requests a pin rule sent
elsewhere — which is exactly a balancer that "counts requests, not tokens": equal request counts
even when the long requests all land on one unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from skewscope.errors import SimulationError

POLICIES: tuple[str, ...] = (
    "round_robin",
    "weighted",
    "sticky",
    "least_requests",
    "least_tokens",
    "power_of_two",
)


@dataclass(frozen=True)
class RoutingSpec:
    """One level's routing: a policy, its weights, and an optional pin rule.

    ``pin_tag``/``pin_units``: requests of that workload class go to one of ``pin_units``
    (unit indices at this level) with probability ``pin_share``; the rest use the policy.
    This is how a scenario concentrates long (or burst) requests on some units. With
    ``pin_counted`` the count-based policies see pinned requests and even out request counts
    (long requests: equal counts, unequal tokens); without it pinned traffic comes on top
    (a burst the balancer never hears about).
    """

    policy: str = "round_robin"
    weights: tuple[float, ...] | None = None
    pin_tag: str | None = None
    pin_units: tuple[int, ...] = ()
    pin_share: float = 1.0
    pin_counted: bool = True

    def describe(self) -> str:
        s = self.policy
        if self.weights is not None:
            s += "(" + ",".join(f"{w:g}" for w in self.weights) + ")"
        if self.pin_tag:
            s += f" pin {self.pin_tag}->{list(self.pin_units)}"
        return s


class LoadView(Protocol):
    """What load-aware policies may read about a unit (the engine provides it)."""

    def outstanding_requests(self, unit: int) -> int:
        """Running + waiting requests on the unit."""
        ...

    def outstanding_tokens(self, unit: int) -> int:
        """KV tokens held plus prompt tokens waiting on the unit."""
        ...


class Router:
    """Stateful router for one level (the gateway, or the dispatcher of one instance)."""

    def __init__(
        self, spec: RoutingSpec, n_units: int, rng: np.random.Generator, tags: tuple[str, ...]
    ) -> None:
        if spec.policy not in POLICIES:
            raise SimulationError(f"unknown routing policy {spec.policy!r}")
        self.spec = spec
        self.n = n_units
        # Weights only mean something to the weighted policy; the others count requests evenly.
        use_w = spec.policy == "weighted" and spec.weights
        self.weights = [float(w) for w in spec.weights or ()] if use_w else [1.0] * n_units
        self.assigned = [0] * n_units
        self.rng = rng
        self.pin_code = tags.index(spec.pin_tag) if spec.pin_tag in tags else -1
        self.pins = [u for u in spec.pin_units if 0 <= u < n_units]
        self.sessions: dict[int, int] = {}
        self.prev_avail: tuple[int, ...] = ()
        self.rot = 0  # rotating tie-break start for load-aware policies

    def choose(self, tag: int, session: int, avail: tuple[int, ...], load: LoadView) -> int:
        """Pick a unit among ``avail`` (non-empty) for one request and count it as assigned."""
        if avail is not self.prev_avail:
            self._rebase(avail)
        if tag == self.pin_code and self.pins:
            pins = [u for u in self.pins if u in avail]
            if pins and (self.spec.pin_share >= 1.0 or self.rng.random() < self.spec.pin_share):
                unit = self._by_count(tuple(pins))
                if self.spec.pin_counted:
                    self.assigned[unit] += 1
                return unit
        unit = self._by_policy(session, avail, load)
        self.assigned[unit] += 1
        return unit

    def _by_policy(self, session: int, avail: tuple[int, ...], load: LoadView) -> int:
        policy = self.spec.policy
        if policy in ("round_robin", "weighted"):
            return self._by_count(avail)
        if policy == "sticky":
            if session < 0:
                return self._by_count(avail)
            unit = self.sessions.get(session, -1)
            if unit not in avail:
                unit = avail[session % len(avail)]  # hash-pin a new or orphaned session
                self.sessions[session] = unit
            return unit
        if policy == "power_of_two":
            if len(avail) == 1:
                return avail[0]
            i, j = self.rng.choice(len(avail), size=2, replace=False)
            a, b = avail[int(i)], avail[int(j)]
            return a if load.outstanding_requests(a) <= load.outstanding_requests(b) else b
        metric = load.outstanding_tokens if policy == "least_tokens" else load.outstanding_requests
        k = len(avail)
        self.rot = (self.rot + 1) % k
        best, best_v = -1, 0
        for off in range(k):
            u = avail[(self.rot + off) % k]
            v = metric(u)
            if best < 0 or v < best_v:
                best, best_v = u, v
        return best

    def _by_count(self, avail: tuple[int, ...]) -> int:
        """Lowest virtual time ``(assigned + 1) / weight``; ties go to the lowest index."""
        w = self.weights
        a = self.assigned
        best, best_v = avail[0], (a[avail[0]] + 1) / w[avail[0]]
        for u in avail[1:]:
            v = (a[u] + 1) / w[u]
            if v < best_v:
                best, best_v = u, v
        return best

    def _rebase(self, avail: tuple[int, ...]) -> None:
        """A unit entering the pool starts at its peers' virtual time, so a late joiner (or a
        recovered unit) gets its fair share from now on instead of a flood to catch up."""
        entered = [u for u in avail if u not in self.prev_avail]
        stay = [u for u in avail if u in self.prev_avail]
        if stay:
            vt = min(self.assigned[u] / self.weights[u] for u in stay)
            for u in entered:
                self.assigned[u] = max(self.assigned[u], int(vt * self.weights[u]))
        self.prev_avail = avail
