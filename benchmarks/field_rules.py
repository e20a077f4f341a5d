"""Three load-imbalance rules from the field, written as PromQL from their public definitions,
for the fleet-day benchmark (bench_alerts.py) to evaluate beside skewscope's own alerts.

None of them names a unit: each compares the units of a group (the fleet at the instance level,
the ranks of one instance at the DP level) and fires for the group. The benchmark credits such
an alert to every truth episode of a unit inside the group (``FieldRule.group``), which is
generous to them: an operator still has to find the unit.

Sources (read 2026-12-02):
  * SGLang Model Gateway (SMG, the former sglang-router / sgl-model-gateway), "Cache-Aware
    Routing" docs, lightseekorg/smg docs/concepts/routing/cache-aware.md, section Monitoring:
    "Load Distribution: stddev(smg_worker_requests_active) / avg(smg_worker_requests_active)",
    alert thresholds "Load imbalance: Warning >30%, Critical >50%". No ``for:`` is given there;
    the same project's example alerting rules (sgl-project/sglang
    docs/advanced_features/sgl_model_gateway.md, "Alerting Rules Example") use ``for: 5m`` for
    their warnings, so 5m is used. ``smg_worker_requests_active`` is the gateway's count of
    requests in flight to a worker; the engines' running + waiting is the same number seen from
    the worker (the benchmark's history has the engines' metrics, not the gateway's).
  * vllm-doctor, rule ``replica_imbalance`` (aminalaee/vllm-doctor docs/rules/replica-imbalance.md
    and rust/vllm-doctor/src/rules/replica_imbalance.rs): per model group, any one of
    "running spread: busiest >= imbalance_factor (2.0) x the least busy, gated by
    num_requests_running summing to >= min_total_running (5)", "cache gap: kv_cache_usage_perc
    max - min >= cache_gap (0.30)", "waiting skew: one replica has queued requests while another
    has none" (one signal = low confidence: it is reported). vllm-doctor diagnoses the current
    values, so the rule has no ``for:``.
  * Huawei mstt (Ascend/mstt, the MindStudio training tools; its cluster analysis flags a slow
    or imbalanced rank when the spread across ranks exceeds 5 % of the mean): ``(max - min) /
    mean > 5 %``, as issue 21 quotes it; applied here to the running requests per unit, no
    ``for:``. (The exact mstt source file was not found in the stored copies: the definition is
    the issue's.)
"""

from __future__ import annotations

from dataclasses import dataclass

from skewscope.sources.dialects import DIALECTS

# The rules' own constants, from the sources above (not skewscope thresholds).
SMG_CV_WARNING = 0.3
SMG_FOR_S = 300.0
DOCTOR_IMBALANCE_FACTOR = 2.0
DOCTOR_MIN_TOTAL_RUNNING = 5.0
DOCTOR_CACHE_GAP = 0.30
MSTT_SPREAD = 0.05


@dataclass(frozen=True)
class FieldRule:
    name: str
    level: str  # "instance" | "dp"
    expr: str
    for_s: float
    group: tuple[str, ...]  # the labels of a firing series: the group it judges


def _unit_series(dialect: str, role: str, level: str, group_by: tuple[str, ...]) -> str:
    """One series per unit of ``role``: DP ranks read once (SGLang's TP copies: max), summed
    per instance at the instance level (the KV usage: averaged)."""
    d = DIALECTS[dialect]
    alias = d.roles[role][0]
    matchers = ",".join(f'{m.label}{m.op}"{m.value}"' for m in alias.matchers)
    sel = f"{alias.name}{{{matchers}}}"
    rank = alias.dp_label or d.rank_label
    by_rank = ", ".join((*group_by, "instance", *((rank,) if rank else ())))
    per_rank = f"max by ({by_rank}) ({sel})"
    if level == "dp":
        return per_rank
    combine = "avg" if role == "kv_usage" else "sum"
    return f"{combine} by ({', '.join((*group_by, 'instance'))}) ({per_rank})"


def field_rules(dialect: str, group_by: tuple[str, ...] = ("job", "model_name")) -> list[FieldRule]:
    """The three rules at both levels for ``dialect``'s metric names."""
    out: list[FieldRule] = []
    for level in ("instance", "dp"):
        g = (*group_by, "instance") if level == "dp" else group_by
        by = ", ".join(g)
        run = _unit_series(dialect, "running", level, group_by)
        wait = _unit_series(dialect, "waiting", level, group_by)
        kv = _unit_series(dialect, "kv_usage", level, group_by)
        active = f"({run} + {wait})"
        out.append(
            FieldRule(
                "smg_load_distribution",
                level,
                f"stddev by ({by}) ({active}) / avg by ({by}) ({active}) > {SMG_CV_WARNING}",
                SMG_FOR_S,
                g,
            )
        )
        spread = (
            f"(max by ({by}) ({run}) >= {DOCTOR_IMBALANCE_FACTOR} * min by ({by}) ({run})"
            f" and sum by ({by}) ({run}) >= {DOCTOR_MIN_TOTAL_RUNNING})"
        )
        gap = f"(max by ({by}) ({kv}) - min by ({by}) ({kv}) >= {DOCTOR_CACHE_GAP})"
        waiting = f"(max by ({by}) ({wait}) > 0 and min by ({by}) ({wait}) == 0)"
        out.append(
            FieldRule(
                "vllm_doctor_replica_imbalance",
                level,
                f"count by ({by}) ({spread} or {gap} or {waiting})",
                0.0,
                g,
            )
        )
        out.append(
            FieldRule(
                "mstt_spread",
                level,
                f"(max by ({by}) ({run}) - min by ({by}) ({run})) / avg by ({by}) ({run})"
                f" > {MSTT_SPREAD}",
                0.0,
                g,
            )
        )
    return out
