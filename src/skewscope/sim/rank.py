"""One DP engine process: continuous batching over paged KV blocks, aggregated per rank.

A rank never loops over its sequences per step (an hour of 64 x 8 ranks is ~60 M steps):

* decoding sequences sit in a heap keyed by the rank-local step at which they finish, so a step
  costs O(1) plus O(log n) per sequence that starts or ends;
* KV growth is arithmetic: a sequence with effective prompt ``p`` that finished its prefill at
  step ``s0`` needs a new block at step ``s`` exactly when ``s = s0 + 1 - p (mod block_size)``,
  so ``phase[s % block_size]`` counts the blocks the whole decode batch needs this step;
* most steps only decode (nothing can be admitted, no sequence finishes, the KV growth fits):
  after each full step the rank works out how many such steps follow (a *segment*: until the
  next finish or the step whose growth would not fit) and executes them in O(1) as one
  record (anchor time, step time, first KV state, the block pattern of one period), expanded
  to rows with numpy by ``tables``. A segment's step ``j`` starts at ``t_a + j * dt`` from its
  anchor, wherever the loop pauses the rank, so the rows do not depend on the loop;
* full-step rows go into one flat ``array('d')`` (one ``extend`` per step).

Batch membership (``members``) is the only per-sequence work and is recorded only on request
(then every step is a full step: segments record no members).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from array import array

    from skewscope.sim.spec import RankSpec
    from skewscope.sim.workload import Workload

STEP_FIELDS = 12  # rank, start, end, pf_bs, dec_bs, pf_tok, running, waiting, used, alloc,
# freed, preempted
MEMBER_FIELDS = 7  # step_id, request, iter, type, scheduled, prompt, computed
# A segment piece: rank, anchor time, step time, decode sequences, waiting, KV used before the
# segment, first and end step (j0 <= j < j1), offset and length of its cumulative block pattern
# in the pattern record, blocks one period adds, period (block size).
PIECE_FIELDS = 11
INF = float("inf")


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
        "event_t",
        "fin_heap",
        "idx",
        "max_running",
        "members",
        "next_t",
        "pats",
        "phase",
        "pieces",
        "prefilling",
        "rec",
        "reqs",
        "run_order",
        "s",
        "seg",
        "total",
        "used",
        "wait_tokens",
        "waiting",
    )

    def __init__(
        self,
        idx: int,
        spec: RankSpec,
        reqs: RequestState,
        rec: array[float],
        members: array[int] | None,
        pieces: array[float],
        pats: array[int],
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
        self.pieces = pieces
        self.pats = pats
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
        self.next_t = -1.0  # start of the next step; negative while idle
        # when the next step that can change the rank's counts starts (inf while idle)
        self.event_t = INF
        self.seg: _Segment | None = None  # decode-only steps being executed

    def enqueue(self, q: int, t: float) -> None:
        """Queue a request arriving at ``t`` (the rank was advanced up to ``t``): a segment
        ends here, since the next step may admit it; an idle rank starts stepping at ``t``."""
        self.waiting.append(q)
        self.wait_tokens += self.reqs.pe[q]
        self.seg = None
        if self.next_t < 0.0:
            self.next_t = t
        self.event_t = self.next_t

    def outstanding_requests(self) -> int:
        return len(self.run_order) + len(self.waiting)

    def used_blocks(self, now: float) -> int:
        """KV blocks held at ``now``: the rank is up to date except inside a segment, whose KV
        growth up to ``now`` is worked out."""
        g = self.seg
        return self.used if g is None else g.used_after(g.started(now), self.B)

    def outstanding_tokens(self, now: float) -> int:
        """KV tokens held plus prompt tokens waiting at ``now``."""
        return self.used_blocks(now) * self.B + self.wait_tokens

    def advance(self, until: float) -> None:
        """Execute this rank's steps that start before ``until``."""
        t = self.next_t
        if t < 0.0 or t >= until:
            return
        step = self.step
        fast = self.members is None
        while True:
            if self.seg is None and fast and self.dec and not self.prefilling:
                self._open_segment(t)
            if self.seg is not None:
                t = self._run_segment(until)
                if t >= until:
                    break
            t = step(t)
            if not 0.0 <= t < until:
                break
        self.next_t = t
        if t < 0.0:
            self.event_t = INF
        elif self.seg is None:
            self.event_t = t

    def pattern_dropped(self) -> None:
        """The pattern record was flushed: an open segment stores its pattern again."""
        if self.seg is not None:
            self.seg.off = -1

    def _open_segment(self, t: float) -> None:
        """After a full step: if the next steps only decode, open a segment of them, up to the
        next finish or the step whose KV growth would not fit (nothing can be admitted in
        between: the queue is empty, or its head is blocked by the batch, the token budget or
        the KV pool, which only fills)."""
        fh, dec = self.fin_heap, self.dec
        while fh and dec.get(fh[0][1]) != fh[0][0]:
            heapq.heappop(fh)  # stale entries of preempted incarnations
        s, B, used = self.s, self.B, self.used
        m = fh[0][0] - s if fh else 0
        if m <= 0:
            return
        r = s % B
        ph = self.phase
        room = self.total - used
        waiting = self.waiting
        n_dec = len(dec)
        if (
            waiting
            and n_dec < self.max_running
            and self.budget > n_dec
            and ph[r] + (self.reqs.pe[waiting[0]] + B - 1) // B <= room
        ):
            return  # the head of the queue could be admitted: a full step
        cum = list(accumulate(ph[r:] + ph[:r]))
        P = cum[-1]
        if P:
            k = room // P
            m = min(m, k * B + bisect.bisect_right(cum, room - k * P))
        if m <= 0:
            return
        g = _Segment(t, self.c_fixed + self.c_dec * n_dec, s, used, m, n_dec, cum, P)
        self.seg = g
        self.event_t = t + m * g.dt

    def _run_segment(self, until: float) -> float:
        """Execute the segment's steps that start before ``until`` (one piece record); return
        the next step's start. The segment closes after its last step."""
        g = self.seg
        assert g is not None
        j0, m, B = g.j, g.m, self.B
        j1 = g.started(until)
        if j1 > j0:
            if g.off < 0:
                g.off = len(self.pats)
                self.pats.extend(g.cum[:m] if m < B else g.cum)
            self.pieces.extend(
                (
                    self.idx,
                    g.t_a,
                    g.dt,
                    g.n_dec,
                    len(self.waiting),
                    g.used_a,
                    j0,
                    j1,
                    g.off,
                    min(m, B),
                    g.P,
                )
            )
            g.j = j1
            self.s = g.s_a + j1
            self.used = g.used_after(j1, B)
        if j1 >= m:
            self.seg = None
        return g.t_a + j1 * g.dt

    def step(self, t: float) -> float:
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
        sid = len(self.rec) // STEP_FIELDS  # only read for members (then every step is a full row)
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
            (
                self.idx,
                t,
                end,
                pf_bs,
                n_dec,
                pf_tok,
                nrun,
                len(waiting),
                used,
                alloc,
                freed + fin_free,
                npre,
            )
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


class _Segment:
    """Decode-only steps ``j`` in [0, m) from an anchor: step ``j`` starts at ``t_a + j * dt``
    and ends where step ``j + 1`` starts; its KV growth is the block pattern ``cum``
    (cumulative over one period of ``block_size`` steps, ``P`` blocks a period)."""

    __slots__ = ("P", "cum", "dt", "j", "m", "n_dec", "off", "s_a", "t_a", "used_a")

    def __init__(
        self,
        t_a: float,
        dt: float,
        s_a: int,
        used_a: int,
        m: int,
        n_dec: int,
        cum: list[int],
        P: int,
    ) -> None:
        self.t_a, self.dt, self.s_a, self.used_a = t_a, dt, s_a, used_a
        self.m, self.n_dec, self.cum, self.P = m, n_dec, cum, P
        self.j = 0  # steps executed so far
        self.off = -1  # offset of ``cum`` in the pattern record once a piece needs it

    def started(self, until: float) -> int:
        """How many of the ``m`` steps start before ``until``."""
        t_a, dt, m = self.t_a, self.dt, self.m
        if t_a + (m - 1) * dt < until:
            return m  # the usual case when a rank catches up: the whole segment
        j = int((until - t_a) / dt) + 1
        if j > m:
            j = m
        elif j < 0:
            j = 0
        while j > 0 and t_a + (j - 1) * dt >= until:
            j -= 1
        while j < m and t_a + j * dt < until:
            j += 1
        return j

    def used_after(self, j: int, B: int) -> int:
        """KV blocks in use after the first ``j`` steps."""
        if j <= 0:
            return self.used_a
        q, r = divmod(j - 1, B)
        return self.used_a + q * self.P + self.cum[r]
