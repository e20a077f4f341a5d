"""Which pool (prefill or decode) each unit serves in, from the labels the stacks export.

In a prefill/decode disaggregated fleet a prefill instance and a decode instance do different
work and are never each other's peers; the analysis judges each pool on its own (UnitFrame
``pool``). The stacks say which instance is which in a label, on some of their series (not
always on the engine's own load series), so the pool of a unit is read once, from any series
carrying the label, and joined to every row of that unit.

The labels, verified in each stack's source (docs/online.md, "Prefill/decode pools"):

- ms-service-metric: ``role`` (``prefill`` / ``decode`` / ``mixed``) on its ``vllm_profiling_*``
  series (seen on a real 26.0.0 capture: ``role="mixed"``, tests/data/samples).
- NVIDIA Dynamo: ``worker_type`` (``prefill`` / ``decode`` / ``aggregated``, ...) on the
  frontend's per-worker gauges (``dynamo_frontend_worker_*{worker_id, dp_rank, worker_type}``,
  lib/llm/src/kv_router/metrics.rs; the label constant in lib/runtime prometheus_names.rs).
- llm-d and the Gateway API Inference Extension: the pod label ``llm-d.ai/role`` (``prefill`` /
  ``decode`` / ``both``) the endpoint picker's prefill and decode filters select on
  (``RoleLabel`` in llm-d-inference-scheduler / GIE ``pkg/epp/.../filter``). It is a Kubernetes
  label, not a metric label: a Prometheus that maps pod labels (``labelmap`` of
  ``__meta_kubernetes_pod_label_(.+)``) writes it as ``llm_d_ai_role`` on the engine's series.
- Any other stack (MindIE PD, SGLang's ``--disaggregation-mode``, a relabelled ``pool``):
  ``--role-label NAME`` or ``[sources] role_label`` in --config.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skewscope.catalogue import DECODE, PREFILL
from skewscope.errors import SourceError, UsageError
from skewscope.frame import Evidence, UnitFrame

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class RoleLabel:
    """A label naming a unit's pool; ``unit_label`` names the unit on those series (None:
    Prometheus ``instance`` / the scraped target)."""

    label: str
    unit_label: str | None = None


# The llm-d / Inference Extension pod label as a Prometheus label (see the module docstring).
_LLMD_POD = RoleLabel("llm_d_ai_role")

# Per dialect, the labels tried in order (the first carried by any series wins).
ROLE_LABELS: dict[str, tuple[RoleLabel, ...]] = {
    "vllm": (_LLMD_POD,),
    "ms-service-metric": (RoleLabel("role"), _LLMD_POD),
    "sglang": (_LLMD_POD,),
    "mindie": (),
    "dynamo": (RoleLabel("worker_type", "worker_id"),),
    "llm-d": (_LLMD_POD,),
}

# Label values -> pool; a value meaning "both phases on one unit" is no pool (None). A value not
# listed is a pool of its own name (a --role-label of another stack), judged on its own.
POOL_OF_VALUE: dict[str, str | None] = {
    PREFILL: PREFILL,
    DECODE: DECODE,
    "mixed": None,  # ms-service-metric
    "both": None,  # llm-d.ai/role
    "aggregated": None,  # Dynamo
    "unified": None,  # SGLang engine_type
}

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_role_label(name: str, where: str = "--role-label") -> str:
    """``name`` if it is a Prometheus label name, else a one-line UsageError."""
    if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
        raise UsageError(
            f"{where}: {name!r} is not a label name (letters, digits, _; "
            "e.g. role, worker_type, llm_d_ai_role)"
        )
    return name


def candidates(dialect: str, role_label: str = "") -> tuple[RoleLabel, ...]:
    """The labels to try: the user's only, when given; else the dialect's own."""
    if role_label:
        return (RoleLabel(check_role_label(role_label)),)
    return ROLE_LABELS.get(dialect, ())


def pool_of(value: str) -> str | None:
    v = value.strip().lower()
    return POOL_OF_VALUE[v] if v in POOL_OF_VALUE else (value.strip() or None)


def pools_from_labels(
    label_sets: Iterable[tuple[Mapping[str, str], str]], role: RoleLabel
) -> dict[str, str]:
    """Unit -> pool from (labels, target) pairs (the target names the unit when the labels do
    not). A unit whose series name two different pools is a one-line SourceError: a unit
    serves one role, so the labelling (or relabelling) is wrong, and judging it would mix the
    pools again."""
    seen: dict[str, set[str | None]] = {}
    for labels, target in label_sets:
        value = labels.get(role.label)
        if value is None or value == "":
            continue
        unit = labels.get(role.unit_label or "instance", "") or target
        if unit:
            seen.setdefault(unit, set()).add(pool_of(value))
    out: dict[str, str] = {}
    for unit, pools in sorted(seen.items()):
        named = sorted(p for p in pools if p)
        if len(named) > 1:  # (a "mixed" series beside a named one does not contradict it)
            shown = " and ".join(named)
            raise SourceError(
                f"unit {unit} carries {role.label} = {shown} on different series; "
                "a unit serves one pool: fix the label (or --role-label)"
            )
        if named:
            out[unit] = named[0]
    return out


def resolve_pools(
    dialect: str,
    role_label: str,
    label_sets_of: Callable[[RoleLabel], list[tuple[Mapping[str, str], str]]],
) -> tuple[dict[str, str], list[str]]:
    """(unit -> pool, notes) from the first candidate label any series carries. A label the
    user named that no series carries is a one-line SourceError; a fleet with a single pool
    and units of no pool beside it is judged as one pool more, with a note."""
    for role in candidates(dialect, role_label):
        found = label_sets_of(role)
        if not found:
            continue
        pools = pools_from_labels(found, role)
        if not pools:
            return {}, [f"pool label {role.label}: every unit serves both phases; one pool"]
        counts = {p: sum(1 for v in pools.values() if v == p) for p in sorted(set(pools.values()))}
        shown = ", ".join(f"{p} {n}" for p, n in counts.items())
        return pools, [f"pools from label {role.label}: {shown}; each pool judged on its own"]
    if role_label:
        raise SourceError(
            f"--role-label {role_label}: no series carries this label in the "
            "range; check the name (or leave it out)"
        )
    return {}, []


# A prefill worker of a disaggregated fleet generates one token per request (vLLM's and
# llm-d's P/D proxies and Dynamo's prefill router send it with max_tokens = 1; the decode
# worker generates the rest): the one sign of its role that profiler folders carry.
PREFILL_OUTPUT_TOKENS = 1.0


def pools_by_output(df: pl.DataFrame) -> dict[str, str]:
    """Instance -> pool from what each generated (profiler folders carry no pool label): the
    instances that generated at most ``PREFILL_OUTPUT_TOKENS`` per request are prefill, the
    others decode — only when both kinds are there (a fleet where every instance generates one
    token, an embedding or scoring service, is one pool)."""
    import polars as pl

    per = df.group_by("instance").agg(pl.col("requests").sum(), pl.col("generation_tokens").sum())
    per = per.filter(pl.col("requests") > 0)
    kinds = {
        i: PREFILL if g <= PREFILL_OUTPUT_TOKENS * n else DECODE
        for i, n, g in per.select("instance", "requests", "generation_tokens").iter_rows()
        if g == g
    }  # NaN: not measured
    return kinds if len(set(kinds.values())) == 2 else {}


def with_pools(ev: Evidence, pools: Mapping[str, str], note: str) -> Evidence:
    """``ev`` with each frame's rows carrying their instance's pool, and ``note``."""
    import polars as pl

    def put(frame: UnitFrame | None) -> UnitFrame | None:
        if frame is None:
            return None
        col = (
            pl.col("instance")
            .replace_strict(dict(pools), default=None, return_dtype=pl.Utf8)
            .alias("pool")
        )
        return dataclasses.replace(frame, df=frame.df.with_columns(col))

    inst = put(ev.instance)
    assert inst is not None
    return dataclasses.replace(ev, instance=inst, dp=put(ev.dp), notes=(*ev.notes, note))


def infer_pools(ev: Evidence) -> Evidence:
    """Profiler evidence with pools inferred from the output tokens (``pools_by_output``),
    noted; unchanged when the fleet shows one kind of instance."""
    pools = pools_by_output(ev.instance.df)
    if not pools:
        return ev
    counts = {p: sum(1 for v in pools.values() if v == p) for p in (PREFILL, DECODE)}
    return with_pools(
        ev,
        pools,
        (
            f"pools inferred from output tokens: prefill {counts[PREFILL]} (at most "
            f"{PREFILL_OUTPUT_TOKENS:g} generated per request: a disaggregated prefill worker), "
            f"decode {counts[DECODE]}; each pool judged on its own"
        ),
    )
