"""One DP engine process: continuous batching over paged KV blocks, aggregated per rank.

A rank never loops over its sequences per step (an hour of a 32-rank cluster is ~3-4 M steps):

* decoding sequences sit in a heap keyed by the rank-local step at which they finish, so a step
  costs O(1) plus O(log n) per sequence that starts or ends;
* KV growth is arithmetic: a sequence with effective prompt ``p`` that finished its prefill at
  step ``s0`` needs a new block at step ``s`` exactly when ``s = s0 + 1 - p (mod block_size)``,
  so ``phase[s % block_size]`` counts the blocks the whole decode batch needs this step;
* step rows go into one flat ``array('d')`` (one ``extend`` per step).

Batch membership (``members``) is the only per-sequence work and is recorded only on request.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from array import array

    from skewscope.sim.scenario import RankSpec
    from skewscope.sim.workload import Workload

STEP_FIELDS = 12  # rank, start, end, pf_bs, dec_bs, pf_tok, running, waiting, used, alloc,
# freed, preempted
MEMBER_FIELDS = 7  # step_id, request, iter, type, scheduled, prompt, computed


class RequestState:
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


class Rank:
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
        self, idx: int, spec: RankSpec, reqs: RequestState, rec: array[float],
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

