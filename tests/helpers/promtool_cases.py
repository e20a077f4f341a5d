"""Synthetic fleets with known truth, written as ``promtool test rules`` input series.

A unit is described by its load (requests/s, tokens per request), pressure (running, waiting)
and latency as functions of time; the series names and labels come from the dialect alias
tables (the first alias of each role), so the same fleet can be exposed in any dialect.
Samples every ``STEP_S``; counters are integrated from the rates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from skewscope.sources.dialects import DIALECTS, Alias

STEP_S = 15
MINUTES = 31
N = MINUTES * 60 // STEP_S
# e2e latency buckets (seconds): fine enough that a latency rising by 0.2 s a minute moves the
# p99 into the next bucket more often than every ``for`` (3m)
E2E_BOUNDS = tuple(0.5 * k for k in range(1, 25))

Fn = Callable[[float], float]  # minute -> value


def const(v: float) -> Fn:
    return lambda _t: v


def burst(base: float, factor: float, start_min: float, end_min: float) -> Fn:
    return lambda t: base * factor if start_min <= t < end_min else base


@dataclass
class Unit:
    instance: str
    rank: str | None = None
    job: str = "j"
    req: Fn = field(default_factory=lambda: const(4.0))  # requests per second
    prompt: Fn = field(default_factory=lambda: const(500.0))  # tokens per request
    gen: Fn = field(default_factory=lambda: const(60.0))
    running: Fn = field(default_factory=lambda: const(4.0))
    waiting: Fn = field(default_factory=lambda: const(0.0))
    e2e_s: Fn = field(default_factory=lambda: const(2.0))  # latency of every request
    queue_s: Fn = field(default_factory=lambda: const(0.05))
    copies: int = 1  # exported this many times, told apart only by the alias' copy labels


def _minutes(minutes: int = MINUTES) -> list[float]:
    return [k * STEP_S / 60 for k in range(minutes * 60 // STEP_S + 1)]


def _cumulative(rate: Fn, minutes: int = MINUTES) -> list[float]:
    out, total = [], 0.0
    for t in _minutes(minutes):
        out.append(total)
        total += rate(t) * STEP_S
    return out


def _unit_series(u: Unit, minutes: int = MINUTES) -> dict[str, tuple[str, list[float]]]:
    """role/sample key -> (sample suffix, values)."""

    def cum(rate: Fn) -> list[float]:
        return _cumulative(rate, minutes)

    req = cum(u.req)
    series = {
        "finished_requests": ("", req),
        "prompt_tokens": ("", cum(lambda t: u.req(t) * u.prompt(t))),
        "generation_tokens": ("", cum(lambda t: u.req(t) * u.gen(t))),
        "running": ("", [u.running(t) for t in _minutes(minutes)]),
        "waiting": ("", [u.waiting(t) for t in _minutes(minutes)]),
        "e2e:count": ("_count", req),
        "e2e:sum": ("_sum", cum(lambda t: u.req(t) * u.e2e_s(t))),
        "queue_time:count": ("_count", req),
        "queue_time:sum": ("_sum", cum(lambda t: u.req(t) * u.queue_s(t))),
    }
    for b in (*E2E_BOUNDS, float("inf")):
        series[f"e2e:bucket:{b}"] = (
            "_bucket",
            cum(lambda t, b=b: u.req(t) if u.e2e_s(t) <= b else 0.0),
        )
    return series


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def input_series(
    dialect: str, units: list[Unit], model: str = "m", minutes: int = MINUTES
) -> list[dict[str, str]]:
    """promtool ``input_series`` of ``units`` as ``dialect`` exposes them, one sample every
    ``STEP_S`` over ``minutes``.

    Series without a rank label (e.g. SGLang's tokenizer-side counters) sum their ranks.
    ms-service-metric also gets its own free-blocks gauge, which marks the instance as such.
    """
    roles = DIALECTS[dialect].roles
    acc: dict[str, list[float]] = {}
    for u in units:
        for key, (suffix, values) in _unit_series(u, minutes).items():
            role = key.split(":")[0]
            if role not in roles:
                continue
            alias: Alias = roles[role][0]
            labels = {"job": u.job, "instance": u.instance, "model_name": model}
            if u.rank is not None and alias.dp_label is not None:
                labels[alias.dp_label] = u.rank
            if key.startswith("e2e:bucket:"):
                bound = key.rsplit(":", 1)[1]
                labels["le"] = "+Inf" if bound == "inf" else bound
            for copy in range(u.copies if alias.copies else 1):
                own = {**labels, **{c: str(copy) for c in alias.copies}}
                body = ",".join(f'{k}="{v}"' for k, v in sorted(own.items()))
                name = f"{alias.name}{suffix}{{{body}}}"
                if name in acc:
                    acc[name] = [a + b for a, b in zip(acc[name], values, strict=True)]
                else:
                    acc[name] = list(values)
        if "free_blocks" in roles:
            alias = roles["free_blocks"][0]
            labels = {"job": u.job, "instance": u.instance}
            if u.rank is not None and alias.dp_label is not None:
                labels[alias.dp_label] = u.rank
            body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            acc[f"{alias.name}{{{body}}}"] = [500.0] * (minutes * 60 // STEP_S + 1)
    return [{"series": k, "values": " ".join(_fmt(v) for v in vals)} for k, vals in acc.items()]


def to_openmetrics(series: list[dict[str, str]], t0: int) -> str:
    """The same series as OpenMetrics text from ``t0`` (epoch s), for ``promtool tsdb
    create-blocks-from openmetrics`` (one family per metric name, ``# EOF``)."""
    lines = []
    for s in sorted(series, key=lambda s: s["series"].split("{", 1)[0]):
        lines += [f"{s['series']} {v} {t0 + k * STEP_S}" for k, v in enumerate(s["values"].split())]
    return "\n".join(lines) + "\n# EOF\n"


def fleet(n: int = 4, **hot: Fn) -> list[Unit]:
    """``n`` equal instances; the first gets the ``hot`` overrides."""
    return [Unit(f"i{k}", **(hot if k == 0 else {})) for k in range(n)]


def dp_fleet(n: int = 4, **hot: Fn) -> list[Unit]:
    """One instance with ``n`` equal DP ranks; rank 0 gets the ``hot`` overrides."""
    return [Unit("i0", rank=str(k), **(hot if k == 0 else {})) for k in range(n)]
