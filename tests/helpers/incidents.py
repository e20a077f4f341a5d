"""Per-unit metric histories reconstructed from public incident threads (tests/data/incidents/).

Each fixture names its thread (``source``), what the thread reports (``reported``) and, per
phase, each unit's gauges and rates as the engine would export them; figures the thread does
not give are marked as assumptions in the fixture. This module turns a fixture into OpenMetrics
samples in the engine's own metric names (vLLM: one ``engine`` label per DP rank; SGLang:
``dp_rank``), for ``promtool tsdb create-blocks-from openmetrics``; the test diagnoses them with
``diagnose --prometheus`` and checks the fixture's ``[expect]``.

A unit may be ``absent`` in a phase (no samples: restarted, lost or not yet joined) or ``reset``
at a phase's start (its counters start from 0 again: a restart).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.online_history import Sample

DIR = Path(__file__).parents[1] / "data" / "incidents"
# Operations that are no skew (a restart, a scale-out) and one that is (a unit lost while hot),
# written the same way (tests/integration/test_operations.py)
OPERATIONS = Path(__file__).parents[1] / "data" / "operations"
T0 = 1_700_020_800  # a multiple of 3600
GAUGES = ("running", "waiting", "kv")
RATES = ("requests_per_s", "preemptions_per_s")


@dataclass(frozen=True)
class Incident:
    name: str
    data: dict[str, Any]

    @property
    def expect(self) -> dict[str, Any]:
        return dict(self.data["expect"])

    @property
    def span_s(self) -> int:
        return int(sum(p["minutes"] * 60 for p in self.data["phase"]))

    @property
    def step_s(self) -> int:
        return int(self.data.get("step_s", 15))


def incidents(folder: Path = DIR) -> list[Incident]:
    return [Incident(p.stem, tomllib.loads(p.read_text())) for p in sorted(folder.glob("*.toml"))]


def _wobble(key: str, k: int, amp: float) -> float:
    """A deterministic ±amp relative wobble per series and step (no flat lines, no RNG)."""
    h = math.sin(k * 12.9898 + sum(map(ord, key)) * 78.233) * 43758.5453
    return 1.0 + amp * (2.0 * (h - math.floor(h)) - 1.0)


def samples(inc: Incident) -> Iterator[Sample]:
    """The fixture's history, one sample per series every ``step_s``."""
    d = inc.data
    dialect, step = d.get("dialect", "vllm"), inc.step_s
    amp = float(d.get("noise", 0.05))
    units: list[str] = sorted({u for p in d["phase"] for u in p["units"]})
    totals = {
        u: dict.fromkeys(
            ("requests", "prompt", "output", "preemptions", "ttft", "e2e", "queue"), 0.0
        )
        for u in units
    }
    t, k = 0, 0
    for phase in d["phase"]:
        end = t + int(phase["minutes"] * 60)
        rot = phase.get("rotate")  # stale-load bursts: {"every_s", "share"} over the units
        first = t
        while t < end:
            for j, u in enumerate(units):
                spec = phase["units"].get(u)
                if spec is None or spec.get("absent", False):
                    continue
                if t == first and spec.get("reset", False):
                    totals[u] = dict.fromkeys(totals[u], 0.0)
                factor = 1.0
                if rot is not None:
                    turn = (t // int(rot["every_s"])) % len(units)
                    n, own = len(units), float(rot["share"])
                    share = own if turn == j else (1 - own) / (n - 1)
                    factor = share * n
                w = _wobble(f"{inc.name}{u}", k, amp)
                rate = float(spec.get("requests_per_s", 0.0)) * factor * w
                if t > 0:
                    n_req = rate * step
                    tot = totals[u]
                    tot["requests"] += n_req
                    tot["prompt"] += n_req * float(spec.get("prompt", 0.0))
                    tot["output"] += n_req * float(spec.get("output", 0.0))
                    tot["preemptions"] += float(spec.get("preemptions_per_s", 0.0)) * step
                    tot["ttft"] += n_req * float(spec.get("ttft_s", 0.0))
                    tot["e2e"] += n_req * float(spec.get("e2e_s", 0.0))
                    tot["queue"] += n_req * float(spec.get("queue_s", 0.0))
                gauges = {
                    g: float(spec.get(g, 0.0))
                    * (factor if rot is not None and g != "kv" else 1.0)
                    * w
                    for g in GAUGES
                }
                gauges["kv"] = min(1.0, gauges["kv"])
                yield from _series(dialect, d, u, T0 + t, gauges, totals[u])
            t += step
            k += 1


def _series(
    dialect: str, d: dict[str, Any], unit: str, at: int, g: dict[str, float], tot: dict[str, float]
) -> Iterator[Sample]:
    inst, _, rank = unit.partition("/")
    job = d.get("job", "incident")
    if dialect == "vllm":
        lab = {"job": job, "instance": inst, "engine": rank or "0", "model_name": d["model"]}

        def s(name: str, value: float, **extra: str) -> Sample:
            return Sample("vllm:" + name, tuple(sorted({**lab, **extra}.items())), at, value)

        yield s("request_success_total", tot["requests"], finished_reason="stop")
        yield s("prompt_tokens_total", tot["prompt"])
        yield s("generation_tokens_total", tot["output"])
        yield s("num_requests_running", g["running"])
        yield s("num_requests_waiting", g["waiting"])
        yield s("kv_cache_usage_perc", g["kv"])
        yield s("num_preemptions_total", tot["preemptions"])
        for name, key in (
            ("time_to_first_token_seconds", "ttft"),
            ("e2e_request_latency_seconds", "e2e"),
            ("request_queue_time_seconds", "queue"),
        ):
            yield s(name + "_sum", tot[key])
            yield s(name + "_count", tot["requests"])
    elif dialect == "sglang":
        lab = {
            "job": job,
            "instance": inst,
            "dp_rank": rank or "0",
            "tp_rank": rank or "0",
            "model_name": d["model"],
        }

        def s(name: str, value: float, **extra: str) -> Sample:
            return Sample("sglang:" + name, tuple(sorted({**lab, **extra}.items())), at, value)

        yield s("queue_time_seconds_count", tot["requests"])
        yield s("queue_time_seconds_sum", tot["queue"])
        yield s("realtime_tokens_total", tot["prompt"], mode="prefill_compute")
        yield s("realtime_tokens_total", tot["output"], mode="decode")
        yield s("num_running_reqs", g["running"])
        yield s("num_queue_reqs", g["waiting"])
        yield s("token_usage", g["kv"])
        yield s("num_retracted_requests_total", tot["preemptions"])
    else:
        raise ValueError(f"{d['name']}: dialect {dialect!r} not reconstructed")


def mismatches(doc: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """What a report gets wrong against a fixture's ``[expect]`` (empty: diagnosed right):
    the verdict and level, the hot and starved units, the kind of the hot unit's finding (or
    the group's, for stale load), the first root cause among the plausible ones, a KV shortage
    finding when expected, and no capability label the thread does not support."""
    out = []
    for key in ("verdict", "level"):
        if key in expect and doc[key] != expect[key]:
            out.append(f"{key} {doc[key]} (expected {expect[key]})")
    for key in ("hot_units", "starved_units"):
        if key in expect and sorted(doc[key]) != sorted(expect[key]):
            out.append(f"{key} {doc[key]} (expected {expect[key]})")
    findings = doc["findings"]
    kinds = expect.get("kind", [])
    target = set(expect.get("hot_units", [])) | set(expect.get("starved_units", []))
    main = [f for f in findings if set(f["units"]) & target] or [
        f for f in findings if f["kind"] in kinds
    ]
    if kinds and (not main or main[0]["kind"] not in kinds):
        out.append(f"kind {[f['kind'] for f in main]} (expected one of {kinds})")
    if "capability" not in kinds and any(f["kind"] == "capability" for f in findings):
        out.append(
            "a capability finding the thread does not support: "
            f"{[f['units'] for f in findings if f['kind'] == 'capability']}"
        )
    causes = expect.get("root_cause", [])
    if causes and (
        not main or not main[0]["root_causes"] or main[0]["root_causes"][0]["key"] not in causes
    ):
        got = [c["key"] for c in main[0]["root_causes"]] if main else []
        out.append(f"root causes {got} (expected first one of {causes})")
    if expect.get("kv_shortage") and not any(f["kind"] == "kv_shortage" for f in findings):
        out.append("no kv_shortage finding")
    for text in expect.get("notes_contain", []):
        if not any(text in n for n in doc["notes"]):
            out.append(f"no note with {text!r}")
    if "lockstep" in expect:  # the price of DP skew in the reading that holds for the model
        said = "step in lockstep (MoE" if expect["lockstep"] else "do not step in lockstep"
        prices = [
            t
            for t, n in zip(doc["notes"], doc["note_facts"], strict=True)
            if n["code"] == "skew_price"
        ]
        if any(said not in t for t in prices) or any(
            p["lockstep"] is not expect["lockstep"] for p in doc["skew_price"]
        ):
            out.append(f"price note {prices} (expected lockstep={expect['lockstep']})")
    return out
