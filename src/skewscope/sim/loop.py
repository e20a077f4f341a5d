"""Event loops: arrivals routed in time order, ranks stepped up to each arrival.

Ranks interact only through routing, so a rank must be up to date exactly when a router reads
its load or sends it a request. With a load-reading gateway every rank advances through one heap
of next-step times, interleaved with arrivals (``run``); when the gateway reads no load, a rank
is only brought up to an arrival's time when its instance's dispatcher looks at it or it
receives the request (``run_lazy``: no heap, each rank steps in a tight loop, decode-only steps
take a short path). Both give the same steps; only their execution order differs, which
``tables.in_time_order`` undoes.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from skewscope.sim.policies import Router, reads_load

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from skewscope.sim.rank import Rank, RequestState
    from skewscope.sim.scenario import Scenario
    from skewscope.sim.workload import Workload

PROGRESS_EVERY = 2048  # arrivals between progress callbacks (cheap against the steps between)


class GroupLoad:
    """LoadView over groups of ranks: one group per instance (gateway) or per rank (dispatcher)."""

    def __init__(self, groups: list[list[Rank]]) -> None:
        self.groups = groups

    def outstanding_requests(self, unit: int) -> int:
        return sum(r.outstanding_requests() for r in self.groups[unit])

    def outstanding_tokens(self, unit: int) -> int:
        return sum(r.outstanding_tokens() for r in self.groups[unit])

    def waiting_requests(self, unit: int) -> int:
        return sum(len(r.waiting) for r in self.groups[unit])

    def running_requests(self, unit: int) -> int:
        return sum(len(r.run_order) for r in self.groups[unit])


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
    scenario: Scenario, wl: Workload, reqs: RequestState, ranks: list[Rank],
    rng: np.random.Generator, duration: float, progress: Callable[[float], None] | None = None,
) -> int:
    """The event loop: steps and arrivals in time order (a step starting at the same instant
    as an arrival sees it). Returns the number of steps executed."""
    n_dp = scenario.dp_ranks
    tags = wl.tags
    gateway = Router(scenario.gateway, scenario.instances, rng, tags)
    dispatchers = [Router(scenario.dispatcher, n_dp, rng, tags) for _ in range(scenario.instances)]
    inst_load = GroupLoad([ranks[i * n_dp:(i + 1) * n_dp] for i in range(scenario.instances)])
    rank_loads = [GroupLoad([[r] for r in g]) for g in inst_load.groups]
    all_dp = tuple(range(n_dp))
    avail = Availability(scenario)
    cap = [(r.total * r.B) for r in ranks]
    steps = [r.step for r in ranks]
    busy = [False] * len(ranks)
    heap: list[tuple[float, int]] = []
    push = heapq.heappush
    sid = 0
    arrivals = wl.arrival_s.tolist()
    tag = wl.tag.tolist()
    session = wl.session.tolist()
    no_hint = [-1] * len(arrivals)
    i_hint = no_hint if wl.instance_hint is None else wl.instance_hint.tolist()
    r_hint = no_hint if wl.rank_hint is None else wl.rank_hint.tolist()
    p0, out = reqs.p0, reqs.out
    if not reads_load(scenario.gateway):
        return run_lazy(scenario, arrivals, (tag, session, i_hint, r_hint), reqs, ranks,
                         (gateway, dispatchers, inst_load, rank_loads), duration, progress)
    for q, ta in enumerate(arrivals):
        sid = steps_before(ta, heap, steps, busy, sid)
        if progress is not None and not q % PROGRESS_EVERY:
            progress(ta)
        up = avail.at(ta)
        if not up:
            reqs.rejected[q] = True  # no healthy instance: the gateway refuses the request
            continue
        i = gateway.choose(tag[q], session[q], up, inst_load, i_hint[q])
        r = i * n_dp + dispatchers[i].choose(tag[q], session[q], all_dp, rank_loads[i], r_hint[q])
        reqs.rank[q] = r
        if p0[q] + out[q] - 1 > cap[r]:
            reqs.rejected[q] = True  # can never fit the rank's KV pool
            continue
        ranks[r].enqueue(q)
        if not busy[r]:
            busy[r] = True
            push(heap, (ta, r))
    return steps_before(duration, heap, steps, busy, sid)


def run_lazy(
    scenario: Scenario, arrivals: list[float], hints: tuple[list[int], ...], reqs: RequestState,
    ranks: list[Rank], routers: tuple[Router, list[Router], GroupLoad, list[GroupLoad]],
    duration: float, progress: Callable[[float], None] | None,
) -> int:
    """The event loop when the gateway never reads load: instances only interact through it,
    so a rank is brought up to an arrival's time only when its instance's dispatcher looks at
    it or it receives the request (each rank steps in a tight loop, no global heap). The
    routing decisions and every rank's steps are those of ``run``; only the order in which
    steps of different ranks are executed differs (``tables.in_time_order`` restores it)."""
    n_dp = scenario.dp_ranks
    tag, session, i_hint, r_hint = hints
    gateway, dispatchers, inst_load, rank_loads = routers
    disp_load = reads_load(scenario.dispatcher)
    groups = [ranks[i * n_dp:(i + 1) * n_dp] for i in range(scenario.instances)]
    all_dp = tuple(range(n_dp))
    avail = Availability(scenario)
    cap = [(r.total * r.B) for r in ranks]
    p0, out = reqs.p0, reqs.out
    sid = 0
    for q, ta in enumerate(arrivals):
        if progress is not None and not q % PROGRESS_EVERY:
            progress(ta)
        up = avail.at(ta)
        if not up:
            reqs.rejected[q] = True
            continue
        i = gateway.choose(tag[q], session[q], up, inst_load, i_hint[q])  # reads no load
        if disp_load:
            for rk in groups[i]:
                sid = rk.advance(ta, sid)
        r = i * n_dp + dispatchers[i].choose(tag[q], session[q], all_dp, rank_loads[i], r_hint[q])
        rk = ranks[r]
        reqs.rank[q] = r
        if p0[q] + out[q] - 1 > cap[r]:
            reqs.rejected[q] = True
            continue
        sid = rk.advance(ta, sid)
        rk.enqueue(q)
        if rk.next_t < 0.0:
            rk.next_t = ta
    for rk in ranks:
        sid = rk.advance(duration, sid)
    return sid



def steps_before(
    until: float, heap: list[tuple[float, int]], steps: Sequence[Callable[[float, int], float]],
    busy: list[bool], sid: int,
) -> int:
    """Execute, in time order, every step of the ``heap`` (start time, rank) that starts before
    ``until``; a rank whose step returns a negative next start goes idle. Returns the next step
    id (``sid`` plus the steps executed)."""
    pop, replace = heapq.heappop, heapq.heapreplace
    while heap and heap[0][0] < until:
        t, r = heap[0]
        nxt = steps[r](t, sid)
        sid += 1
        if nxt >= 0.0:
            replace(heap, (nxt, r))
        else:
            pop(heap)
            busy[r] = False
    return sid

