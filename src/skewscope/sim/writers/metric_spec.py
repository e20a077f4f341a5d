"""``MetricSpec``: one metric family a simulated exporter exposes (name, type, labels, buckets,
the simulated quantity it carries); the per-dialect tables (``specs_*``) are lists of them."""

from __future__ import annotations

from dataclasses import dataclass

from skewscope.catalogue import MetricType

# The tables spell the types short.
COUNTER, GAUGE, HISTOGRAM = MetricType.COUNTER, MetricType.GAUGE, MetricType.HISTOGRAM


@dataclass(frozen=True)
class MetricSpec:
    """One metric family of a dialect.

    ``name`` is the family name as OpenMetrics sees it (counters without ``_total``).
    ``rank_label`` names the label that carries the DP rank; ``None`` means the family is one
    series per instance, summed over its ranks (MindIE, SGLang's tokenizer-side metrics).
    ``split`` = (label, values, value carrying the data): the other values are exposed as 0,
    like vLLM's ``finished_reason``.
    """

    name: str
    kind: MetricType
    role: str
    help: str
    rank_label: str | None = None
    rank_label_single: bool = True  # keep the rank label on an instance with one rank
    labels: tuple[tuple[str, str], ...] = ()
    model_label: bool = True
    buckets: tuple[float, ...] = ()
    scale: float = 1.0
    split: tuple[str, tuple[str, ...], str] | None = None
    # (label, ((value, role), ...)): one series per value, each carrying its own counter role
    # ("" = always 0), like SGLang's realtime_tokens_total{mode}
    parts: tuple[str, tuple[tuple[str, str], ...]] | None = None
    # a label naming the unit itself (a router or frontend exporting one series per backend:
    # Dynamo ``worker_id``, llm-d ``model_server_endpoint``); its value is the instance name
    unit_label: str | None = None
    # one series per rank, the unit label's value ``<instance>-rank-<n>`` (llm-d endpoints of a
    # DP pod; a single-rank pod is just ``<instance>``)
    rank_in_unit: bool = False
    host_label: str | None = None  # a label carrying the rank's host name (DCGM ``Hostname``)

    @property
    def per_rank(self) -> bool:
        return self.rank_label is not None or self.rank_in_unit
