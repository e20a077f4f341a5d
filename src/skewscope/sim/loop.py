"""Event loops: arrivals routed in time order, ranks stepped up to each arrival.

Ranks interact only through routing, so a rank need be up to date only when a router reads its
load or sends it a request; in between it steps in a tight loop on its own. The steps do not
depend on when a rank is advanced (a decode segment's step times come from its anchor), only
their execution order does, which ``tables.in_time_order`` undoes.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from skewscope.sim.policies import REQUESTS, TOKENS, Router, reads_load
from skewscope.sim.rank import INF

if TYPE_CHECKING:
    from collections.abc import Callable

    from skewscope.sim.rank import Rank, RequestState
    from skewscope.sim.spec import Scenario
    from skewscope.sim.workload import Workload

PROGRESS_EVERY = 2048  # arrivals between progress callbacks (cheap against the steps between)


class GroupLoad:
    """LoadView over groups of ranks: one group per instance (gateway) or per rank (dispatcher).

    Counts are read as they are (ranks are brought up to ``now`` before a router reads them,
    and a rank's counts do not change inside a segment); KV tokens are worked out at ``now``.

    ``vector`` reads a whole pool at once for a large gateway: the loads are kept per unit and
    worked out again only for the units ``touch``-ed since (a rank advanced or queued a
    request) and, for KV tokens, the units with a decode segment open (their KV grows with
    ``now``); every other unit's load cannot have changed.
    """

    def __init__(self, groups: list[list[Rank]]) -> None:
        self.groups = groups
        self.now = 0.0
        n = len(groups)
        self.kept = {REQUESTS: np.zeros(n, dtype=np.int64), TOKENS: np.zeros(n, dtype=np.int64)}
        self.stale: dict[str, set[int]] = {REQUESTS: set(range(n)), TOKENS: set(range(n))}
        self.growing: set[int] = set()  # units with a segment open when last worked out
        self.pools: dict[tuple[int, ...], np.ndarray] = {}

    def touch(self, unit: int) -> None:
        """A rank of ``unit`` was advanced or queued a request."""
        for stale in self.stale.values():
            stale.add(unit)

    def touch_all(self) -> None:
        for stale in self.stale.values():
            stale.update(range(len(self.groups)))

    def vector(self, kind: str, avail: tuple[int, ...]) -> np.ndarray:
        """The ``kind`` (REQUESTS or TOKENS) load of every unit of ``avail``, in its order."""
        kept, stale = self.kept[kind], self.stale[kind]
        if kind == TOKENS:
            for u in stale:
                if any(r.seg is not None for r in self.groups[u]):
                    self.growing.add(u)
                else:
                    self.growing.discard(u)
            for u in stale | self.growing:
                kept[u] = self.outstanding_tokens(u)
        else:
            for u in stale:
                kept[u] = self.outstanding_requests(u)
        stale.clear()
        at = self.pools.get(avail)
        if at is None:
            at = self.pools[avail] = np.fromiter(avail, dtype=np.int64, count=len(avail))
        out: np.ndarray = kept[at]
        return out

    def outstanding_requests(self, unit: int) -> int:
        return sum([len(r.run_order) + len(r.waiting) for r in self.groups[unit]])

    def outstanding_tokens(self, unit: int) -> int:
        now = self.now
        return sum([r.outstanding_tokens(now) for r in self.groups[unit]])

    def waiting_requests(self, unit: int) -> int:
        return sum(len(r.waiting) for r in self.groups[unit])

    def running_requests(self, unit: int) -> int:
        return sum(len(r.run_order) for r in self.groups[unit])

    def kv_usage(self, unit: int) -> float:
        ranks = self.groups[unit]
        total = sum(r.total for r in ranks)
        return sum(r.used_blocks(self.now) for r in ranks) / total if total else 0.0


class RankLoad:
    """LoadView of one instance's ranks, one unit each (its dispatcher's view)."""

    def __init__(self, ranks: list[Rank]) -> None:
        self.ranks = ranks
        self.now = 0.0

    def outstanding_requests(self, unit: int) -> int:
        r = self.ranks[unit]
        return len(r.run_order) + len(r.waiting)

    def outstanding_tokens(self, unit: int) -> int:
        return self.ranks[unit].outstanding_tokens(self.now)

    def waiting_requests(self, unit: int) -> int:
        return len(self.ranks[unit].waiting)

    def running_requests(self, unit: int) -> int:
        return len(self.ranks[unit].run_order)

    def kv_usage(self, unit: int) -> float:
        r = self.ranks[unit]
        return r.used_blocks(self.now) / r.total if r.total else 0.0


class Availability:
    """Which instances pass their health check at time t (failures and late joins)."""

    def __init__(self, scenario: Scenario) -> None:
        self.n = scenario.instances
        self.windows = scenario.availability_windows()
        cuts = sorted({c for lo, hi in self.windows for c in (lo, hi) if 0.0 < c < float("inf")})
        self.cuts = cuts
        self.ptr = 0
        self.current = self._at(0.0)

    def _at(self, t: float) -> tuple[int, ...]:
        return tuple(i for i, (lo, hi) in enumerate(self.windows) if lo <= t < hi)

    def at(self, t: float) -> tuple[int, ...]:
        """Available instances; the same tuple object until the set changes (routers rely on it)."""
        if self.ptr < len(self.cuts) and t >= self.cuts[self.ptr]:
            while self.ptr < len(self.cuts) and t >= self.cuts[self.ptr]:
                self.ptr += 1
            self.current = self._at(t)
        return self.current


def run(
    scenario: Scenario,
    wl: Workload,
    reqs: RequestState,
    ranks: list[Rank],
    rngs: tuple[np.random.Generator, list[np.random.Generator]],
    duration: float,
    progress: Callable[[float], None] | None,
    cuts: tuple[float, Callable[[float], None]],
    routed: list[int] | None = None,
    first: int = 0,
) -> None:
    """Route every arrival in time order and step the ranks up to the end of the run.

    Before a router reads load, the ranks it reads whose counts may have changed since (their
    ``event_t``: next full step, or the end of their decode segment, before the arrival) are
    advanced: every rank through a heap of event times when the gateway reads load, the
    instance's ranks when only its dispatcher does; the receiving rank is always advanced to
    the arrival before it queues the request. A step starting at an arrival's instant sees it.

    ``cuts`` = (every, flush): every ``every`` simulated seconds all ranks are advanced to the
    cut and ``flush(cut)`` takes the record of the steps that start before it. ``rngs``: the
    gateway's random stream and one per instance's dispatcher.

    ``routed`` (a load-free gateway's choices, ``route``) runs only the instances from
    ``first`` whose ranks are ``ranks``: the other arrivals are someone else's.
    """
    n_dp = scenario.dp_ranks
    tags = wl.tags
    n_here = len(ranks) // n_dp
    last = first + n_here
    gateway = Router(scenario.gateway, scenario.instances, rngs[0], tags)
    dispatchers = [
        Router(scenario.dispatcher, n_dp, rngs[1][first + k], tags) for k in range(n_here)
    ]
    inst_load = GroupLoad([ranks[k * n_dp : (k + 1) * n_dp] for k in range(n_here)])
    groups = inst_load.groups
    rank_loads = [RankLoad(g) for g in groups]
    gw_load, disp_load = reads_load(scenario.gateway), reads_load(scenario.dispatcher)
    dp_up = scenario.dp_choices()[first:last]  # ranks each dispatcher may choose
    avail = Availability(scenario)
    cap = [(r.total * r.B) for r in ranks]
    heap: list[tuple[float, int]] = []
    pop, push = heapq.heappop, heapq.heappush
    arrivals = wl.arrival_s.tolist()
    tag = wl.tag.tolist()
    session = wl.session.tolist()
    no_hint = [-1] * len(arrivals)
    i_hint = no_hint if wl.instance_hint is None else wl.instance_hint.tolist()
    r_hint = no_hint if wl.rank_hint is None else wl.rank_hint.tolist()
    p0, out = reqs.p0, reqs.out
    every, flush = cuts
    cut = every
    for q, ta in enumerate(arrivals):
        if progress is not None and not q % PROGRESS_EVERY:
            progress(ta)
        while ta >= cut and cut < duration:
            for rk in ranks:
                rk.advance(cut)
            inst_load.touch_all()
            flush(cut)
            heap = [(rk.event_t, r) for r, rk in enumerate(ranks) if rk.event_t < INF]
            heapq.heapify(heap)
            cut += every
        if routed is not None:
            i = routed[q]
            if not first <= i < last:
                continue
        elif not (up := avail.at(ta)):
            reqs.rejected[q] = True  # no healthy instance: the gateway refuses the request
            continue
        elif gw_load:
            while heap and heap[0][0] < ta:
                t, r = pop(heap)
                rk = ranks[r]
                if rk.event_t == t:  # else a stale entry
                    rk.advance(ta)
                    inst_load.touch(r // n_dp)
                    if rk.event_t < INF:
                        push(heap, (rk.event_t, r))
            inst_load.now = ta
            i = gateway.choose(tag[q], session[q], up, inst_load, i_hint[q])
        else:
            i = gateway.choose(tag[q], session[q], up, inst_load, i_hint[q])  # reads no load
        k = i - first
        if disp_load:
            if not gw_load:
                for rk in groups[k]:
                    if rk.event_t < ta:
                        rk.advance(ta)
                inst_load.touch(k)
            rank_loads[k].now = ta
        d = dispatchers[k].choose(tag[q], session[q], dp_up[k], rank_loads[k], r_hint[q])
        reqs.rank[q] = i * n_dp + d
        r = k * n_dp + d
        if p0[q] + out[q] - 1 > cap[r]:
            reqs.rejected[q] = True  # can never fit the rank's KV pool
            continue
        rk = ranks[r]
        rk.advance(ta)
        rk.enqueue(q, ta)
        inst_load.touch(k)
        if gw_load:
            push(heap, (rk.event_t, r))
    for end in [*np.arange(cut, duration, every).tolist(), duration]:
        for rk in ranks:
            rk.advance(end)
        flush(end)


def route(scenario: Scenario, wl: Workload, rng: np.random.Generator) -> list[int]:
    """A load-free gateway's choice per arrival (-1: refused, no healthy instance), made before
    any rank runs: the instances can then run apart (``run(routed=...)``)."""
    assert not reads_load(scenario.gateway)
    gateway = Router(scenario.gateway, scenario.instances, rng, wl.tags)
    avail = Availability(scenario)
    no_load = GroupLoad([])  # never read by a load-free policy
    tag, session = wl.tag.tolist(), wl.session.tolist()
    hint = [-1] * len(wl) if wl.instance_hint is None else wl.instance_hint.tolist()
    out = []
    for q, ta in enumerate(wl.arrival_s.tolist()):
        up = avail.at(ta)
        if up:
            out.append(gateway.choose(tag[q], session[q], up, no_load, hint[q]))
        else:
            out.append(-1)
    return out
