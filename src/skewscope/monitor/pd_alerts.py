"""The prefill/decode imbalance rules (``skewscope rules``; docs/runbooks/SkewscopePDImbalance.md).

In a disaggregated fleet the pool of each instance comes from the label its stack exports
(``sources.pools.ROLE_LABELS``: ms-service-metric ``role``, Dynamo ``worker_type``, llm-d's
pod label as ``llm_d_ai_role``), often on other series than the engine's load gauges, so the
per-unit running and waiting records are joined to a pool map read from any series carrying
the label. Two records per dialect (mean running / waiting per instance of each pool and peer
group) and one alert, as analysis/pools.py judges it: the prefill pool queues while the decode
pool idles or runs ``pd_running_ratio`` times fewer requests per instance (llm-d's
LLMDPrefillDecodeImbalance: prefill/decode running > 3 for 10 m), or decode queues while
prefill idles. A dialect whose stack names no pool (MindIE) has none of these rules.
"""

from __future__ import annotations

from typing import Any

from skewscope.catalogue import DECODE, PREFILL
from skewscope.frame import Level
from skewscope.monitor.records import LevelRules, lst
from skewscope.monitor.signals import UNIT_LABEL
from skewscope.monitor.template import param
from skewscope.sources.pools import ROLE_LABELS, RoleLabel
from skewscope.sources.promql import normalise_selector

PD_ALERT = "SkewscopePDImbalance"
POOL_LABEL = "pool"  # the records' label naming the pool, whatever the stack calls it


def join_labels(group_by: tuple[str, ...]) -> tuple[str, ...]:
    """The labels a unit's series and its pool are matched on: the instance, and the job when
    it is a peer-group label (one address may serve in two jobs, each with its own pool)."""
    return (UNIT_LABEL, *(("job",) if "job" in group_by else ()))


def pool_map(role: RoleLabel, selector: str, group_by: tuple[str, ...]) -> str:
    """``instance`` -> ``pool`` (value 1) from every series carrying ``role``'s label."""
    parts = [f'{role.label}=~"{PREFILL}|{DECODE}"']
    extra = normalise_selector(selector)
    if extra:
        parts.append(extra)
    unit = role.unit_label or UNIT_LABEL
    keep = join_labels(group_by)[1:]
    text = f"group by ({lst((unit, *keep, role.label))}) ({{{', '.join(parts)}}})"
    if unit != UNIT_LABEL:  # units named by another label (Dynamo's worker_id): as instance
        text = f'label_replace({text}, "{UNIT_LABEL}", "$1", "{unit}", "(.+)")'
    text = f'label_replace({text}, "{POOL_LABEL}", "$1", "{role.label}", "(.+)")'
    return f"max by ({lst((*join_labels(group_by), POOL_LABEL))}) ({text})"


def pd_rules(lv: LevelRules) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records, alerts) of the P/D imbalance for one dialect at instance level (none at DP
    level, for a dialect whose stack names no pool, or without running and waiting records)."""
    roles = ROLE_LABELS.get(lv.d, ())
    if (
        lv.s.level is not Level.INSTANCE
        or not roles
        or not {"running:avg", "waiting:avg"} <= (lv.have)
    ):
        return [], []
    pools = " or ".join(f"({pool_map(r, lv.s.selector, lv.s.group_by)})" for r in roles)
    on = lst(join_labels(lv.s.group_by))
    by = lst((*lv.s.group_by, POOL_LABEL, "level", "dialect"))
    static = {"level": lv.lv, "dialect": lv.d}
    records = []
    for name in ("running", "waiting"):
        expr = (
            f"avg by ({by}) ({lv.r(f'{name}:avg')} * on ({on}) group_left ({POOL_LABEL}) ({pools}))"
        )
        records.append(
            {"record": f"skewscope:pool_{name}:avg", "expr": expr, "labels": dict(static)}
        )
    th = lv.th

    def pool(name: str, p: str) -> str:
        return f'skewscope:pool_{name}:avg{{level="{lv.lv}", dialect="{lv.d}", pool="{p}"}}'

    on = f"ignoring ({POOL_LABEL})"  # the two pools of one peer group
    ratio = (
        f"({pool('running', PREFILL)} / {on} clamp_min({pool('running', DECODE)}, "
        f"{th.floor_running}))"
    )
    prefill_bound = (
        f"({pool('waiting', PREFILL)} >= {th.pd_min_waiting}) and {on} "
        f"(({pool('waiting', DECODE)} < {th.pd_idle_waiting}) or {on} "
        f"({ratio} > {th.pd_running_ratio}))"
    )
    decode_bound = (
        f"({pool('waiting', DECODE)} >= {th.pd_min_waiting}) and {on} "
        f"({pool('waiting', PREFILL)} < {th.pd_idle_waiting})"
    )
    for_ = param("for")
    sel = ",".join(f'{lab}="{{{{ $labels.{lab} }}}}"' for lab in lv.s.group_by)
    cmd = (
        "skewscope diagnose --prometheus {{ $externalURL }} --last "
        + param("lookback")
        + (f" --selector '{{{sel}}}'" if sel else "")
    )
    alert = {
        "alert": PD_ALERT,
        "expr": f"({prefill_bound}) or ({decode_bound})",
        "for": for_,
        "labels": {"severity": "warning", **static},
        "annotations": {
            "summary": "The {{ $labels.pool }} pool is saturated while the other pool idles: "
            '{{ $value | printf "%.1f" }} requests waiting per {{ $labels.pool }} '
            "instance",
            "description": (
                "For "
                + for_
                + " the {{ $labels.pool }} pool has queued at least "
                + th.pd_min_waiting
                + " requests per instance while the other pool waits under "
                + th.pd_idle_waiting
                + " (or, for prefill, runs "
                + th.pd_running_ratio
                + "x the decode pool's requests per instance): the P:D ratio does not fit "
                "the traffic. Re-balance the pools or adjust the router's P/D selection. "
                "Full evidence: " + cmd
            ),
            "runbook_url": f"{param('runbook_url_base')}/{PD_ALERT}.md",
        },
    }
    return records, [alert]
