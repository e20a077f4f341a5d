"""The metric families each simulated exporter exposes: names, types, labels, buckets, roles.

The names of every dialect the simulator writes live in these tables and nowhere else (the
simulator's side; the online reader keeps its own alias table, sources/dialects.py, for
reading), so a change of a name is one edit: ``specs_vllm`` (vLLM, ms-service-metric),
``specs_sglang``, ``specs_mindie``, ``specs_routers`` (Dynamo, llm-d) and ``specs_devices``
(dcgm, npu-exporter), each a list of ``metric_spec.MetricSpec``. ``exposition`` evaluates the
families at simulated times.
"""

from __future__ import annotations

from skewscope.catalogue import SIMULATED_DIALECTS
from skewscope.sim.writers.metric_spec import MetricSpec
from skewscope.sim.writers.specs_mindie import mindie_specs
from skewscope.sim.writers.specs_routers import dynamo_specs, llmd_specs
from skewscope.sim.writers.specs_sglang import sglang_specs
from skewscope.sim.writers.specs_vllm import ms_service_specs, vllm_specs

DIALECTS: tuple[str, ...] = tuple(SIMULATED_DIALECTS)

# The label a dialect's stack names an instance's prefill/decode pool with (a PD scenario,
# sim/pd.py), written on every series of the instance as a scrape-time label: ms-service-metric
# ``role``, Dynamo ``worker_type``, and llm-d's pod label ``llm-d.ai/role`` as a Prometheus that
# maps pod labels writes it (``llm_d_ai_role``) for the engines llm-d runs; MindIE: none (a
# ``--role-label`` case). The reader's table is sources/pools.py.
ROLE_LABELS: dict[str, str] = {
    "vllm": "llm_d_ai_role",
    "ms-service-metric": "role",
    "sglang": "llm_d_ai_role",
    "dynamo": "worker_type",
    "llm-d": "llm_d_ai_role",
}


def dialect_specs(dialect: str, max_model_len: int = 32768) -> list[MetricSpec]:
    """The families a dialect exposes, in exposition order."""
    if dialect == "vllm":
        return vllm_specs(max_model_len)
    if dialect == "sglang":
        return sglang_specs()
    if dialect == "mindie":
        return mindie_specs()
    if dialect == "ms-service-metric":
        return ms_service_specs(max_model_len)
    if dialect == "dynamo":
        return dynamo_specs()
    if dialect == "llm-d":
        return llmd_specs()
    raise ValueError(f"unknown metrics dialect {dialect!r}; expected one of {DIALECTS}")
