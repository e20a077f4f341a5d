"""Every unit's load over the day as [unit, time] arrays, from the plan: routing, queueing,
latency, and the counters, gauges and histograms an engine exports for them.

Units are instance-major (``ranks`` to an instance, in rank order), one column per scrape:
column k holds what happened in (t[k-1], t[k]]. The router spreads the fleet's traffic over
the present instances (a restarted or joining one gets a reduced share while it warms up);
each instance's DP balancer spreads its share over its ranks. A unit serves at most its
capacity (requests/s for its token mix, slower on a slow unit): above it the backlog grows;
below it the waiting queue follows a stationary approximation that rises steeply near
saturation. Latencies follow from the queue, the mix and the load (TTFT = queue + prefill,
E2E = TTFT + decode); running requests from Little's law. ``DayLoad`` answers as the
``families.RankSource`` the exposition's families are evaluated from, so the metric names,
labels and buckets are the simulator's own (metric_specs).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from skewscope.sim.day.plan import Plan

if TYPE_CHECKING:
    from numpy.typing import NDArray

    F64 = NDArray[np.float64]

# the fleet's nominal request: tokens in / out, and how long a unit takes for them
IN_TOKENS, OUT_TOKENS = 800.0, 220.0
PEAK_UTILISATION = 0.55  # a fair-share unit at the day's peak
PREFILL_SHARE = 0.3  # of a nominal request's cost
ITL_S = 0.018  # inter-token latency of an unloaded unit
PREFILL_S_PER_TOKEN = 1.5e-4  # an unloaded unit's prefill, batched with others' decodes
KV_TOKENS = 65536
NIGHT_LEVEL = 0.04  # of the peak rate
TROUGH = 1 / 3  # the diurnal trough (after the night), of the peak
PEAK_AT = 0.72  # of the span
QUEUE_S = 0.4  # stationary queue wait scale
# what the skews do
COUNT_FACTOR = 1.7  # the count-hot instance's routing weight; DP: the hot rank's, vs siblings'
STARVED_FACTOR = 0.03
LONG_PROMPTS = 2.4  # the weight-hot instance's prompt length factor (its peers' shrink a bit)
DP_WEIGHT = (1.6, 0.4)  # the weight-hot rank's prompt factor, its siblings'
SLOW = 1.7  # the slow instance's service time factor
STALE_SHARE = 0.85  # of the instance's requests going to the rank the stale counts favour
BURST = 3.0
DEPLOY_MIX = (1.5, 0.6)  # prompts longer, outputs shorter for everyone during the deploy


class DayLoad:
    """The day's per-unit load; see the module docstring."""

    def __init__(self, plan: Plan) -> None:
        self.plan, self.spec = plan, plan.spec
        spec = plan.spec
        rng = np.random.default_rng((spec.seed, 23))
        self.t = t = (spec.times - spec.times[0]).astype(np.float64)
        nr = spec.ranks
        self.n = spec.n_instances * nr
        self._hists: dict[tuple[str, tuple[float, ...]], tuple[F64, F64, F64]] = {}
        self.present = _presence(plan, t)  # [instance, time]
        weight = _router_weight(plan, t, self.present)
        share = weight / np.maximum(weight.sum(axis=0, keepdims=True), 1e-12)
        dp = _dp_split(plan, t)  # [unit, time]
        fleet = spec.peak_rps * spec.instances * nr * _diurnal(plan, t)
        noise = _unit_noise(rng, self.n, len(t))
        lam = fleet * np.repeat(share, nr, axis=0) / nr * dp * noise * _bursts(plan, t)
        self.inp, self.out = _mix(plan, t)
        speed = np.ones((self.n, len(t)))
        for e in plan.episodes:
            if e.kind == "capability":
                on = (t > e.start) & (t <= e.end)
                speed[e.instance * nr : (e.instance + 1) * nr, on] = SLOW
        self.speed = speed
        cost_in = PREFILL_SHARE / (IN_TOKENS * _mu_nominal(spec.peak_rps))
        cost_out = (1 - PREFILL_SHARE) / (OUT_TOKENS * _mu_nominal(spec.peak_rps))
        mu = 1.0 / ((self.inp * cost_in + self.out * cost_out) * speed)  # requests/s
        self.lam, self.mu = lam, mu
        self._queue(rng, step=float(spec.step_s))

    def _queue(self, rng: np.random.Generator, step: float) -> None:
        """Arrivals, completions and the backlog above capacity, step by step."""
        nr = self.spec.ranks
        up = np.repeat(self.present, nr, axis=0)
        arrivals = rng.poisson(self.lam * step).astype(np.float64)
        arrivals[:, 0] = 0.0
        arrivals[~up] = 0.0
        cap = np.floor(self.mu * step)
        done = np.zeros_like(arrivals)
        backlog = np.zeros_like(arrivals)
        b = np.zeros(self.n)
        for k in range(arrivals.shape[1]):
            b = np.where(up[:, k], b, 0.0)  # a restart drops what the engine held
            have = b + arrivals[:, k]
            done[:, k] = np.minimum(have, cap[:, k])
            b = have - done[:, k]
            backlog[:, k] = b
        self.arrivals, self.done, self.backlog, self.up = arrivals, done, backlog, up
        rho = np.clip(self.lam / self.mu, 0.0, 0.95)
        self.rho = rho
        wq_stat = QUEUE_S * rho**4 / (1 - rho)
        self.queue_s = wq_stat + backlog / self.mu
        self.itl = ITL_S * self.speed * (1 + 0.8 * rho)
        prefill = self.inp * PREFILL_S_PER_TOKEN * self.speed * (1 + rho)
        self.ttft = self.queue_s + prefill + self.itl
        self.e2e = self.ttft + self.out * self.itl
        serve = self.e2e - self.queue_s
        self.running_mean = done / step * serve
        self.waiting_mean = self.lam * wq_stat + backlog

    # ------------------------------------------------------------------ RankSource
    def is_counter(self, role: str) -> bool:
        return role in _COUNTERS

    def counter(self, role: str, t: F64) -> F64:
        return self._counters[role]

    def hist(self, role: str, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        key = (role, bounds)
        if key not in self._hists:
            self._hists[key] = self._histogram(role, bounds)
        return self._hists[key]

    def gauge(self, role: str, t: F64) -> F64:
        g = self._gauges
        if role not in g:
            raise KeyError(f"the day writes no gauge {role!r}")
        return g[role]

    # ------------------------------------------------------------------ values
    @cached_property
    def tokens(self) -> tuple[F64, F64]:
        """Prompt and generation tokens finished in each step (the counters' increments)."""
        rng = np.random.default_rng((self.spec.seed, 31))
        c = self.done
        spread = 1.0 / np.sqrt(np.maximum(c, 1.0))
        pin = np.rint(
            c * self.inp * np.clip(1 + 0.8 * spread * rng.standard_normal(c.shape), 0.2, None)
        )
        pout = np.rint(
            c * self.out * np.clip(1 + 0.7 * spread * rng.standard_normal(c.shape), 0.2, None)
        )
        return pin, pout

    @cached_property
    def _counters(self) -> dict[str, F64]:
        pin, pout = self.tokens
        rng = np.random.default_rng((self.spec.seed, 37))
        pre = rng.poisson(self.done * np.clip(self.kv - 0.9, 0.0, None) * 3.0).astype(float)
        incs = {
            "finished": self.done,
            "prompt_tokens": pin,
            "generation_tokens": pout,
            "preemptions": pre,
        }
        n0 = self.before
        per_request = {
            "finished": 1.0,
            "prompt_tokens": IN_TOKENS,
            "generation_tokens": OUT_TOKENS,
            "preemptions": 0.001,
        }
        return {
            role: reset_cumsum(x, self.up, np.rint(n0 * per_request[role]))
            for role, x in incs.items()
        }

    @cached_property
    def before(self) -> F64:
        """Requests each unit served before the day (its counters' values at t0: the engines
        run since yesterday); 0 for a unit not up at t0."""
        rng = np.random.default_rng((self.spec.seed, 47))
        n0 = rng.uniform(0.5, 1.5, self.n) * self.spec.peak_rps * 0.5 * 86_400
        out: F64 = np.rint(n0) * self.up[:, 0]
        return out

    @cached_property
    def kv(self) -> F64:
        used: F64 = np.clip(self.running_mean * (self.inp + self.out / 2) / KV_TOKENS, 0.0, 0.99)
        return used

    @cached_property
    def _gauges(self) -> dict[str, F64]:
        rng = np.random.default_rng((self.spec.seed, 41))
        running = rng.poisson(np.maximum(self.running_mean, 0)).astype(float)
        waiting = rng.poisson(np.maximum(self.waiting_mean, 0)).astype(float)
        kv = np.clip(self.kv * (1 + 0.03 * rng.standard_normal(self.kv.shape)), 0.0, 0.99)
        kv = np.where(running > 0, kv, 0.0)
        ones = np.ones_like(kv)
        return {
            "running": running,
            "waiting": waiting,
            "kv_usage": np.round(kv, 4),
            "cache_config": ones,
            "kv_capacity_tokens": ones * KV_TOKENS,
            "total_blocks": ones * (KV_TOKENS // 16),
        }

    def _observations(self, role: str) -> tuple[F64, F64, float]:
        """(observations per step, their mean, log-sd) of a histogram role."""
        pin, pout = self.tokens
        c = self.done
        if role == "ttft":
            return c, self.ttft, 0.5
        if role == "e2e":
            return c, self.e2e, 0.45
        if role in ("queue", "queue_at_schedule"):
            return c, np.maximum(self.queue_s, 1e-4), 1.0
        if role == "tpot":
            return c, self.itl, 0.25
        if role == "itl":
            return pout, self.itl, 0.35
        if role == "request_prompt_tokens":
            return c, pin / np.maximum(c, 1), 0.8
        if role == "request_generation_tokens":
            return c, pout / np.maximum(c, 1), 0.7
        if role == "iteration_tokens":
            busy = 1 - np.exp(-self.running_mean)
            steps = np.rint(self.spec.step_s * busy / self.itl) * (c > 0)
            return steps, (pin + pout) / np.maximum(steps, 1), 0.7
        raise KeyError(f"the day writes no histogram {role!r}")

    def _histogram(self, role: str, bounds: tuple[float, ...]) -> tuple[F64, F64, F64]:
        n, mean, sd = self._observations(role)
        rng = np.random.default_rng((self.spec.seed, 43, len(bounds), _ROLE_KEY[role]))
        median = np.log(np.maximum(mean, 1e-9)) - sd * sd / 2
        cdf = np.stack(
            [_phi((math.log(b) - median) / sd) if b > 0 else np.zeros_like(n) for b in bounds],
            axis=-1,
        )  # [unit, time, bound]
        left = n.astype(np.int64)
        counts = np.zeros((*n.shape, len(bounds)))
        prev = np.zeros_like(n)
        for k in range(len(bounds)):
            p = np.clip((cdf[..., k] - prev) / np.maximum(1 - prev, 1e-12), 0.0, 1.0)
            x = rng.binomial(left, p)
            counts[..., k] = x
            left = left - x
            prev = cdf[..., k]
        sums = {
            "request_prompt_tokens": self.tokens[0],
            "request_generation_tokens": self.tokens[1],
        }.get(role, n * mean)
        # before the day: as many observations per request as over the day, spread alike
        total = np.maximum(n.sum(axis=1), 1.0)
        n0 = np.rint(self.before * total / np.maximum(self.done.sum(axis=1), 1.0))
        cum = np.cumsum(counts, axis=-1)
        les0 = np.rint(n0[:, None] * cum.sum(axis=1) / total[:, None])
        les = reset_cumsum(cum.transpose(0, 2, 1), self.up[:, None, :], les0).transpose(0, 2, 1)
        count = reset_cumsum(n.astype(np.float64), self.up, n0)
        return les, count, reset_cumsum(sums, self.up, np.rint(n0 * sums.sum(axis=1) / total))


_COUNTERS = ("finished", "prompt_tokens", "generation_tokens", "preemptions")
_ROLE_KEY = {
    r: k
    for k, r in enumerate(
        (
            "ttft",
            "e2e",
            "queue",
            "queue_at_schedule",
            "tpot",
            "itl",
            "request_prompt_tokens",
            "request_generation_tokens",
            "iteration_tokens",
        )
    )
}


def reset_cumsum(inc: F64, up: NDArray[np.bool_], before: F64 | None = None) -> F64:
    """Counters from their increments (time on the last axis), starting again from the
    increment of the first step back after every absence (``up`` False): a restart.
    ``before`` (the shape without time) is added to a series up from the first step."""
    up = np.broadcast_to(up, inc.shape)
    x = np.where(up, inc, 0.0)
    csum = np.cumsum(x, axis=-1)
    prev_up = np.concatenate([np.zeros((*up.shape[:-1], 1), bool), up[..., :-1]], axis=-1)
    start = up & ~prev_up
    base = np.where(start, csum - x, 0.0)
    idx = np.where(start, np.arange(inc.shape[-1]), 0)
    idx = np.maximum.accumulate(idx, axis=-1)
    out: F64 = csum - np.take_along_axis(base, idx, axis=-1)
    if before is not None:
        first = up[..., :1] & (np.cumsum(start, axis=-1) == 1)  # the run the day starts in
        out = out + first * before[..., None]
    return out


def _phi(z: F64) -> F64:
    """The standard normal CDF (Abramowitz-Stegun 7.1.26, error < 1.5e-7)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-x * x)
    out: F64 = 0.5 * (1.0 + np.sign(z) * erf)
    return out


def _mu_nominal(peak_rps: float) -> float:
    return peak_rps / PEAK_UTILISATION


def _presence(plan: Plan, t: F64) -> NDArray[np.bool_]:
    """[instance, time]: scraped (not in its restart gap, joined)."""
    s = plan.spec
    up = np.ones((s.n_instances, len(t)), dtype=bool)
    for i, (down, back) in plan.restart.items():
        up[i, (t >= down) & (t < back)] = False
    for i, at in plan.joins.items():
        up[i, t < at] = False
    return up


def _router_weight(plan: Plan, t: F64, up: NDArray[np.bool_]) -> F64:
    s = plan.spec
    w = up.astype(np.float64)
    warm = float(s.warm_s)
    for i, (_down, back) in plan.restart.items():
        w[i] *= np.where(t >= back, 0.25 + 0.75 * np.clip((t - back) / warm, 0, 1), 1.0)
    for i, at in plan.joins.items():
        w[i] *= 0.25 + 0.75 * np.clip((t - at) / warm, 0, 1)
    for e in plan.episodes:
        on = (t > e.start) & (t <= e.end)
        if e.level == "instance" and e.kind == "count":
            w[e.instance, on] *= COUNT_FACTOR
        elif e.kind == "starved":
            w[e.instance, on] *= STARVED_FACTOR
    return w


def _dp_split(plan: Plan, t: F64) -> F64:
    """[unit, time]: each rank's share of its instance's requests (x ranks: 1 = fair)."""
    s = plan.spec
    nr = s.ranks
    split = np.ones((s.n_instances * nr, len(t)))
    for e in plan.episodes:
        on = (t > e.start) & (t <= e.end)
        rows = slice(e.instance * nr, (e.instance + 1) * nr)
        if e.level == "dp" and e.kind == "count" and e.dp_rank is not None:
            w = np.ones(nr)
            w[e.dp_rank] = COUNT_FACTOR
            split[rows, on] = (nr * w / w.sum())[:, None]
        elif e.kind == "stale_load":
            # the balancer sends new requests to the rank that looked least loaded at the last
            # publish: one rank takes most of them until the next publish, then the next rank
            sub = (np.arange(8) + 0.5) / 8
            times = t[on][:, None] - s.step_s * (1 - sub)[None, :]  # inside each step
            phase = np.floor((times - e.start) / s.stale_publish_s).astype(np.int64) % nr
            other = (1 - STALE_SHARE) / (nr - 1)
            shares = np.stack(
                [np.where(phase == r, STALE_SHARE, other).mean(axis=1) for r in range(nr)]
            )
            split[rows, on] = nr * shares
    return split


def _diurnal(plan: Plan, t: F64) -> F64:
    """The fleet's traffic, of its peak: near-idle night, then trough -> peak -> a bit down."""
    span = float(plan.spec.span_s)
    ne, peak = plan.night_end, PEAK_AT * span
    x = np.clip((t - ne) / (peak - ne), 0, 1)
    day = TROUGH + (1 - TROUGH) * (1 - np.cos(np.pi * x)) / 2
    after = t > peak
    day = np.where(after, 1 - 0.15 * ((t - peak) / (span - peak)) ** 2, day)
    ramp = 2.0 * plan.spec.window_s
    night = NIGHT_LEVEL + (TROUGH - NIGHT_LEVEL) * np.clip((t - (ne - ramp)) / ramp, 0, 1)
    out: F64 = np.where(t < ne, night, day)
    return out


def _unit_noise(rng: np.random.Generator, n: int, steps: int) -> F64:
    """Per-unit noise: a fixed bias of a few percent and AR(1) jitter step to step."""
    bias = 1 + 0.03 * rng.standard_normal(n)
    eps = np.zeros((n, steps))
    shocks = 0.08 * rng.standard_normal((n, steps))
    for k in range(1, steps):
        eps[:, k] = 0.6 * eps[:, k - 1] + shocks[:, k]
    out: F64 = bias[:, None] * np.exp(eps)
    return out


def _bursts(plan: Plan, t: F64) -> F64:
    s = plan.spec
    f = np.ones((s.n_instances * s.ranks, len(t)))
    for b in plan.noise:
        if b.what == "burst" and b.instance is not None and b.dp_rank is not None:
            f[b.instance * s.ranks + b.dp_rank, (t > b.start) & (t <= b.end)] *= BURST
    return f


def _mix(plan: Plan, t: F64) -> tuple[F64, F64]:
    """Mean prompt and output tokens per request, [unit, time]."""
    s = plan.spec
    nr, n = s.ranks, s.n_instances * s.ranks
    inp = np.full((n, len(t)), IN_TOKENS)
    out = np.full((n, len(t)), OUT_TOKENS)
    d0, d1 = plan.deploy
    on = (t > d0) & (t <= d1)
    inp[:, on] *= DEPLOY_MIX[0]
    out[:, on] *= DEPLOY_MIX[1]
    for e in plan.episodes:
        on = (t > e.start) & (t <= e.end)
        rows = slice(e.instance * nr, (e.instance + 1) * nr)
        if e.level == "instance" and e.kind == "weight":
            peers = (s.n_instances - LONG_PROMPTS) / (s.n_instances - 1)
            inp[:, on] *= peers
            inp[rows, on] *= LONG_PROMPTS / peers
        elif e.level == "dp" and e.kind == "weight" and e.dp_rank is not None:
            f = np.full(nr, DP_WEIGHT[1])
            f[e.dp_rank] = DP_WEIGHT[0]
            f *= nr / f.sum()
            inp[rows, on] *= f[:, None]
    return inp, out
