"""Discrete-event core: N instances x M DP ranks with continuous batching and paged KV blocks.

Speed matters (an hour of a 32-rank cluster is ~3-4 M engine steps), so a rank never loops over
its sequences per step. Its state is aggregated:

* decoding sequences sit in a heap keyed by the rank-local step at which they finish, so a step
  costs O(1) plus O(log n) per sequence that starts or ends;
* KV growth is arithmetic: a sequence with effective prompt ``p`` that finished its prefill at
  step ``s0`` needs a new block at step ``s`` exactly when ``s = s0 + 1 - p (mod block_size)``,
  so ``phase[s % block_size]`` counts the blocks the whole decode batch needs this step;
* ranks advance in global time order through one heap of next-step times, interleaved with
  arrivals, because load-aware routing must see each rank's state at the arrival time; when the
  gateway reads no load, a rank is only brought up to an arrival's time when its instance's
  dispatcher looks at it or it receives the request (``_run_lazy``: no heap, each rank steps in
  a tight loop, decode-only steps take a short path) and the step rows are sorted back into
  the heap's (start, rank) order, so both loops give the same tables;
* step rows go into one flat ``array('d')`` (one ``extend`` per step) and become polars
  columns at the end.

Batch membership (``members``) is the only per-sequence work and is recorded only on request.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from skewscope.frame import dp_unit_id
from skewscope.sim.policies import Router, reads_load
from skewscope.sim.records import RankInfo, SimResult
from skewscope.sim.workload import Workload, generate

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import polars as pl
    from numpy.typing import NDArray

    from skewscope.sim.scenario import RankSpec, Scenario

# Fixed start so outputs are byte-for-byte reproducible: 2025-04-23 00:52:13 UTC.
START_S = 1_745_369_533.0

PROGRESS_EVERY = 2048  # arrivals between progress callbacks (cheap against the steps between)
_STEP_FIELDS = 12  # rank, start, end, pf_bs, dec_bs, pf_tok, running, waiting, used, alloc,
# freed, preempted
_MEMBER_FIELDS = 7  # step_id, request, iter, type, scheduled, prompt, computed


class _Requests:
    """Per-request mutable state, as parallel Python lists (fast scalar access in the loop)."""

    def __init__(self, wl: Workload) -> None:
        n = len(wl)
        self.p0: list[int] = wl.input_tokens.tolist()
        self.out: list[int] = wl.output_tokens.tolist()
        self.pe: list[int] = list(self.p0)  # effective prompt (prompt + tokens to recompute)
        self.gen: list[int] = [0] * n  # tokens generated before the current incarnation
        self.fsched: list[float] = [-1.0] * n
        self.ftok: list[float] = [-1.0] * n
        self.finish: list[float] = [-1.0] * n
        self.preempt: list[int] = [0] * n
        self.rank: list[int] = [-1] * n
        self.rejected: list[bool] = [False] * n


class _Rank:
    """One DP engine process: a waiting queue, a running set and a KV block pool."""

    __slots__ = (
        "B",
        "budget",
        "c_dec",
        "c_fixed",
        "c_pf",
        "chunked",
        "dec",
        "dstart",
        "fin_heap",
        "idx",
        "max_running",
        "members",
        "next_t",
        "phase",
        "prefilling",
        "rec",
        "reqs",
        "run_order",
        "s",
        "total",
        "used",
        "wait_tokens",
        "waiting",
    )

    def __init__(
        self, idx: int, spec: RankSpec, reqs: _Requests, rec: array[float],
        members: array[int] | None,
    ) -> None:
        self.idx = idx
        self.B = spec.block_size
        self.total = spec.total_blocks
        self.budget = spec.token_budget
        self.max_running = spec.max_running
        self.chunked = spec.chunked_prefill
        sp = spec.speed / 1000.0  # ms -> s, times the slowdown factor
        self.c_fixed = spec.fixed_ms * sp
        self.c_pf = spec.per_prefill_token_ms * sp
        self.c_dec = spec.per_decode_seq_ms * sp
        self.reqs = reqs
        self.rec = rec
        self.members = members
        self.s = 0  # rank-local step counter
        self.used = 0
        self.wait_tokens = 0
        self.waiting: deque[int] = deque()
        self.prefilling: list[list[int]] = []  # [request, prompt tokens computed] (chunked)
        self.dec: dict[int, int] = {}  # decoding request -> rank step at which it finishes
        self.dstart: dict[int, int] = {}  # decoding request -> step that completed its prefill
        self.run_order: dict[int, None] = {}  # running requests in admission order (preemption)
        self.fin_heap: list[tuple[int, int]] = []
        self.phase = [0] * self.B
        self.next_t = -1.0  # start of the next step; negative while idle (lazy mode)

    def enqueue(self, q: int) -> None:
        self.waiting.append(q)
        self.wait_tokens += self.reqs.pe[q]

    def outstanding_requests(self) -> int:
        return len(self.run_order) + len(self.waiting)

    def outstanding_tokens(self) -> int:
        return self.used * self.B + self.wait_tokens

    def advance(self, until: float, sid: int) -> int:
        """Execute this rank's steps that start before ``until`` (step ids from ``sid``);
        return the next free step id."""
        t = self.next_t
        if t < 0.0 or t >= until:
            return sid
        step = self.step
        fast = self.members is None
        while True:
            if fast and self.dec and not self.waiting and not self.prefilling:
                t, sid = self._decode_run(t, until, sid)
                if t >= until:
                    break
            t = step(t, sid)
            sid += 1
            if not 0.0 <= t < until:
                break
        self.next_t = t
        return sid

    def _decode_run(self, t: float, until: float, sid: int) -> tuple[float, int]:
        """Steps that only decode (nothing waiting or prefilling, no sequence finishing, the KV
        growth fits), as ``step`` would execute them, from ``t`` until ``until``; the most
        common step, so it skips everything else ``step`` checks. Returns (next start, sid)."""
        fh = self.fin_heap
        fs = fh[0][0]  # may be a stale entry: then the run only ends early
        s, used, total = self.s, self.used, self.total
        phase, B, idx = self.phase, self.B, self.idx
        n_dec = len(self.dec)
        c_fixed, cd = self.c_fixed, self.c_dec * n_dec
        extend = self.rec.extend
        while t < until and s < fs:
            need = phase[s % B]
            if used + need > total:
                break
            used += need
            end = t + c_fixed + cd  # the same float operations as step's
            extend((idx, t, end, 0, n_dec, 0, n_dec, 0, used, need, 0, 0))
            t = end
            s += 1
            sid += 1
        self.s, self.used = s, used
        return t, sid

    def step(self, t: float, sid: int) -> float:
        """Schedule and execute one step starting at ``t``; return the next step's start time,
        or -1.0 when the rank has nothing left to do (it then sleeps until an arrival)."""
        s = self.s
        B = self.B
        phase = self.phase
        dec = self.dec
        reqs = self.reqs
        pe = reqs.pe
        n_dec = len(dec)
        need = phase[s % B] if n_dec else 0
        freed = npre = 0
        if self.used + need > self.total:
            npre, freed = self._preempt(need, s)
            n_dec = len(dec)
            need = phase[s % B] if n_dec else 0
        used = self.used + need
        alloc = need
        budget = self.budget - n_dec
        pf_tok = pf_bs = 0
        done: list[int] = []
        mem = self.members
        pre = self.prefilling
        nrun = n_dec + len(pre)
        if pre and budget > 0:
            for item in list(pre):
                if budget <= 0:
                    break
                q, have = item
                c = min(pe[q] - have, budget)
                budget -= c
                pf_tok += c
                pf_bs += 1
                if mem is not None:
                    mem.extend((sid, q, 0, 0, c, reqs.p0[q], have))
                item[1] = have + c
                if have + c >= pe[q]:
                    pre.remove(item)
                    done.append(q)
        waiting = self.waiting
        if waiting and budget > 0 and nrun < self.max_running:
            total = self.total
            chunked = self.chunked
            maxr = self.max_running
            fsched = reqs.fsched
            run_order = self.run_order
            while waiting and budget > 0 and nrun < maxr:
                q = waiting[0]
                p = pe[q]
                nb = (p + B - 1) // B
                if used + nb > total or (p > budget and pf_bs and not chunked):
                    break  # KV or budget exhausted: the head of the queue waits (FIFO)
                waiting.popleft()
                self.wait_tokens -= p
                used += nb
                alloc += nb
                nrun += 1
                run_order[q] = None
                if fsched[q] < 0:
                    fsched[q] = t
                c = budget if (chunked and p > budget) else p
                budget -= c
                pf_tok += c
                pf_bs += 1
                if mem is not None:
                    mem.extend((sid, q, 0, 0, c, reqs.p0[q], 0))
                if c < p:
                    pre.append([q, c])
                else:
                    done.append(q)
        if mem is not None and n_dec:
            gen = reqs.gen
            dstart = self.dstart
            for q in dec:
                j = s - dstart[q]
                mem.extend((sid, q, gen[q] + j, 1, 1, reqs.p0[q], pe[q] + j - 1))
        end = t + self.c_fixed + self.c_pf * pf_tok + self.c_dec * n_dec
        fh = self.fin_heap
        fin_free = self._finish(s, end, done) if (done or (fh and fh[0][0] <= s)) else 0
        self.rec.extend(
            (self.idx, t, end, pf_bs, n_dec, pf_tok, nrun, len(waiting), used, alloc,
             freed + fin_free, npre)
        )
        self.used = used - fin_free
        self.s = s + 1
        return end if (self.run_order or waiting) else -1.0

    def _finish(self, s: int, end: float, done: list[int]) -> int:
        """End-of-step bookkeeping: completed prefills start decoding (or finish when they
        need a single token) and decodes whose last token was this step release their blocks."""
        B = self.B
        reqs = self.reqs
        pe = reqs.pe
        dec = self.dec
        dstart = self.dstart
        phase = self.phase
        run_order = self.run_order
        fh = self.fin_heap
        freed = 0
        while fh and fh[0][0] <= s:
            fs, q = heapq.heappop(fh)
            if dec.get(q) != fs:
                continue  # stale entry of a preempted incarnation
            st = dstart.pop(q)
            del dec[q]
            del run_order[q]
            freed += (pe[q] + fs - st + B - 1) // B
            phase[(st + 1 - pe[q]) % B] -= 1
            reqs.finish[q] = end
        for q in done:
            if reqs.ftok[q] < 0:
                reqs.ftok[q] = end
            rem = reqs.out[q] - reqs.gen[q] - 1
            if rem <= 0:
                freed += (pe[q] + B - 1) // B
                del run_order[q]
                reqs.finish[q] = end
            else:
                fs = s + rem
                dec[q] = fs
                dstart[q] = s
                phase[(s + 1 - pe[q]) % B] += 1
                heapq.heappush(fh, (fs, q))
        return freed

    def _preempt(self, need: int, s: int) -> tuple[int, int]:
        """Recompute-preempt the youngest running sequences until this step's KV growth fits.

        A victim keeps the tokens it generated: it re-queues at the front with an effective
        prompt of prompt + generated tokens, which its next prefill recomputes.
        """
        B = self.B
        reqs = self.reqs
        pe = reqs.pe
        dec = self.dec
        phase = self.phase
        npre = freed = 0
        while self.used + need > self.total and self.run_order:
            q = next(reversed(self.run_order))
            del self.run_order[q]
            if q in dec:
                st = self.dstart.pop(q)
                j = s - 1 - st  # decode steps done
                nb = (pe[q] + j + B - 1) // B
                phase[(st + 1 - pe[q]) % B] -= 1
                del dec[q]
                reqs.gen[q] += 1 + j
            else:  # a chunked prefill in progress
                self.prefilling[:] = [it for it in self.prefilling if it[0] != q]
                nb = (pe[q] + B - 1) // B
            self.used -= nb
            freed += nb
            npre += 1
            reqs.preempt[q] += 1
            pe[q] = reqs.p0[q] + reqs.gen[q]
            self.waiting.appendleft(q)
            self.wait_tokens += pe[q]
            need = phase[s % B] if dec else 0
        return npre, freed


class _GroupLoad:
    """LoadView over groups of ranks: one group per instance (gateway) or per rank (dispatcher)."""

    def __init__(self, groups: list[list[_Rank]]) -> None:
        self.groups = groups

    def outstanding_requests(self, unit: int) -> int:
        return sum(r.outstanding_requests() for r in self.groups[unit])

    def outstanding_tokens(self, unit: int) -> int:
        return sum(r.outstanding_tokens() for r in self.groups[unit])

    def waiting_requests(self, unit: int) -> int:
        return sum(len(r.waiting) for r in self.groups[unit])

    def running_requests(self, unit: int) -> int:
        return sum(len(r.run_order) for r in self.groups[unit])


class _Availability:
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


def simulate(
    scenario: Scenario,
    *,
    seed: int | None = None,
    record_members: bool = True,
    duration_s: float | None = None,
    workload: Workload | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Run a scenario and return its tables; the same (scenario, seed) gives identical tables.

    ``workload`` replays given requests instead of drawing the scenario's (what-if replays).
    ``progress`` is called with the simulated time every ``PROGRESS_EVERY`` arrivals.
    """
    seed = scenario.seed if seed is None else seed
    duration = scenario.duration_s if duration_s is None else duration_s
    rng_wl, rng_route, rng_id = (np.random.default_rng(s) for s in np.random.SeedSequence(seed)
                                 .spawn(3))
    wl = generate(scenario.workload, duration, rng_wl) if workload is None else workload
    reqs = _Requests(wl)
    rec: array[float] = array("d")
    members: array[int] | None = array("q") if record_members else None
    n_inst, n_dp = scenario.instances, scenario.dp_ranks
    specs = [scenario.rank_spec(i, d) for i in range(n_inst) for d in range(n_dp)]
    ranks = [_Rank(g, sp, reqs, rec, members) for g, sp in enumerate(specs)]
    n_steps = _run(scenario, wl, reqs, ranks, rng_route, duration, progress)
    step_rows, member_rows = _in_time_order(rec, members, not reads_load(scenario.gateway))
    infos = [
        RankInfo(
            instance=scenario.instance_name(g // n_dp), dp_rank=g % n_dp,
            hostname=f"node-{g // n_dp}", pid=31000 + 17 * g, speed=sp.speed,
            total_blocks=sp.total_blocks, block_size=sp.block_size,
            max_running=sp.max_running, token_budget=sp.token_budget,
        )
        for g, sp in enumerate(specs)
    ]
    pending = {q for rk in ranks for q in rk.waiting}
    rids = _rids(wl, rng_id)
    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": seed,
        "duration_s": duration,
        "arrival": scenario.workload.describe(),
        "arrival_rate": len(wl) / duration if duration > 0 else 0.0,
        "gateway_policy": scenario.gateway.describe(),
        "dispatcher_policy": scenario.dispatcher.describe(),
        "instances": n_inst,
        "dp_ranks": n_dp,
        "n_requests": len(wl),
        "n_steps": n_steps,
        "record_members": record_members,
    }
    return SimResult(
        start_s=START_S,
        end_s=START_S + duration,
        ranks=infos,
        requests=_requests_frame(wl, reqs, infos, pending, rids),
        steps=_steps_frame(step_rows, infos),
        members=_members_frame(member_rows, rids) if member_rows is not None else None,
        truth=scenario.truth,
        model_name=scenario.model_name,
        meta=meta,
    )


def _run(
    scenario: Scenario, wl: Workload, reqs: _Requests, ranks: list[_Rank],
    rng: np.random.Generator, duration: float, progress: Callable[[float], None] | None = None,
) -> int:
    """The event loop: steps and arrivals in time order (a step starting at the same instant
    as an arrival sees it). Returns the number of steps executed."""
    n_dp = scenario.dp_ranks
    tags = wl.tags
    gateway = Router(scenario.gateway, scenario.instances, rng, tags)
    dispatchers = [Router(scenario.dispatcher, n_dp, rng, tags) for _ in range(scenario.instances)]
    inst_load = _GroupLoad([ranks[i * n_dp:(i + 1) * n_dp] for i in range(scenario.instances)])
    rank_loads = [_GroupLoad([[r] for r in g]) for g in inst_load.groups]
    all_dp = tuple(range(n_dp))
    avail = _Availability(scenario)
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
        return _run_lazy(scenario, arrivals, (tag, session, i_hint, r_hint), reqs, ranks,
                         (gateway, dispatchers, inst_load, rank_loads), duration, progress)
    for q, ta in enumerate(arrivals):
        sid = _steps_before(ta, heap, steps, busy, sid)
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
    return _steps_before(duration, heap, steps, busy, sid)


def _run_lazy(
    scenario: Scenario, arrivals: list[float], hints: tuple[list[int], ...], reqs: _Requests,
    ranks: list[_Rank], routers: tuple[Router, list[Router], _GroupLoad, list[_GroupLoad]],
    duration: float, progress: Callable[[float], None] | None,
) -> int:
    """The event loop when the gateway never reads load: instances only interact through it,
    so a rank is brought up to an arrival's time only when its instance's dispatcher looks at
    it or it receives the request (each rank steps in a tight loop, no global heap). The
    routing decisions and every rank's steps are those of ``_run``; only the order in which
    steps of different ranks are executed differs (``_in_time_order`` restores it)."""
    n_dp = scenario.dp_ranks
    tag, session, i_hint, r_hint = hints
    gateway, dispatchers, inst_load, rank_loads = routers
    disp_load = reads_load(scenario.dispatcher)
    groups = [ranks[i * n_dp:(i + 1) * n_dp] for i in range(scenario.instances)]
    all_dp = tuple(range(n_dp))
    avail = _Availability(scenario)
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


def _in_time_order(
    rec: array[float], members: array[int] | None, lazy: bool
) -> tuple[NDArray[np.float64], NDArray[np.int64] | None]:
    """Step rows sorted by (start, rank) — the order the global heap executes them in — with
    step ids renumbered to match, and member rows following their steps. ``_run`` (not lazy)
    already executes them in that order."""
    a = np.frombuffer(rec, dtype=np.float64).reshape(-1, _STEP_FIELDS)
    if not lazy:
        m0 = None if members is None else np.frombuffer(members, dtype=np.int64)
        return a, None if m0 is None else m0.reshape(-1, _MEMBER_FIELDS)
    order = np.lexsort((a[:, 0], a[:, 1]))
    rows = a[order]
    del a
    del rec[:]  # the sorted copy replaces the record: do not hold both while frames are built
    if members is None:
        return rows, None
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    m = np.frombuffer(members, dtype=np.int64).reshape(-1, _MEMBER_FIELDS).copy()
    del members[:]
    m[:, 0] = new_id[m[:, 0]]
    return rows, m[np.argsort(m[:, 0], kind="stable")]


def _steps_before(
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


def _rids(wl: Workload, rng: np.random.Generator) -> list[str]:
    """vLLM-style request ids from their own random stream (so they never shift the workload)."""
    vals = rng.integers(0, 2**63, size=len(wl), dtype=np.int64).tolist()
    return [f"chatcmpl-{v:016x}" for v in vals]


def _requests_frame(
    wl: Workload, reqs: _Requests, infos: list[RankInfo], pending: set[int], rids: list[str]
) -> pl.DataFrame:
    import polars as pl

    def opt(vals: list[float]) -> pl.Series:
        a = np.asarray(vals, dtype=np.float64)
        return pl.Series(np.where(a < 0, np.nan, a + START_S)).fill_nan(None)

    status = [
        "rejected" if reqs.rejected[q]
        else "finished" if reqs.finish[q] >= 0
        else "waiting" if q in pending
        else "running"
        for q in range(len(wl))
    ]
    inst = [infos[r].instance if r >= 0 else None for r in reqs.rank]
    dp = [infos[r].dp_rank if r >= 0 else None for r in reqs.rank]
    return pl.DataFrame(
        {
            "rid": rids,
            "instance": pl.Series(inst, dtype=pl.Utf8),
            "dp_rank": pl.Series(dp, dtype=pl.Int64),
            "arrival_s": wl.arrival_s + START_S,
            "input_tokens": wl.input_tokens,
            "output_tokens": wl.output_tokens,
            "first_scheduled_s": opt(reqs.fsched),
            "first_token_s": opt(reqs.ftok),
            "finish_s": opt(reqs.finish),
            "preemptions": pl.Series(reqs.preempt, dtype=pl.Int64),
            "status": status,
        }
    )


def _steps_frame(a: NDArray[np.float64], infos: list[RankInfo]) -> pl.DataFrame:
    import polars as pl

    g = a[:, 0].astype(np.int64)
    ints = a[:, 3:].astype(np.int64)
    total = np.array([r.total_blocks for r in infos], dtype=np.int64)[g]
    names = pl.Series([r.instance for r in infos], dtype=pl.Utf8)
    pf_bs, dec_bs, used = ints[:, 0], ints[:, 1], ints[:, 5]
    return pl.DataFrame(
        {
            "step_id": np.arange(a.shape[0], dtype=np.int64),
            "instance": names.gather(g),
            "dp_rank": np.array([r.dp_rank for r in infos], dtype=np.int64)[g],
            "start_s": a[:, 1] + START_S,
            "end_s": a[:, 2] + START_S,
            "batch_size": pf_bs + dec_bs,
            "prefill_batch_size": pf_bs,
            "decode_batch_size": dec_bs,
            "prefill_tokens": ints[:, 2],
            "decode_tokens": dec_bs,
            "running": ints[:, 3],
            "waiting": ints[:, 4],
            "total_blocks": total,
            "used_blocks": used,
            "free_blocks": total - used,
            "blocks_allocated": ints[:, 6],
            "blocks_freed": ints[:, 7],
            "preempted": ints[:, 8],
        }
    )


def _members_frame(a: NDArray[np.int64], rids: list[str]) -> pl.DataFrame:
    import polars as pl

    names = pl.Series(rids, dtype=pl.Utf8)
    return pl.DataFrame(
        {
            "step_id": a[:, 0],
            "rid": names.gather(a[:, 1]),
            "iter": a[:, 2],
            "type": a[:, 3],
            "num_scheduled_tokens": a[:, 4],
            "num_prompt_tokens": a[:, 5],
            "num_computed_tokens": a[:, 6],
        }
    )


def unit_ids(result: SimResult) -> list[str]:
    """Every unit id the run has: instance names, and ``<instance>/dp<rank>`` per rank."""
    return sorted({r.instance for r in result.ranks}) + [
        dp_unit_id(r.instance, r.dp_rank) for r in result.ranks
    ]
