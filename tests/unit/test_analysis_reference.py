"""The reference a hot unit is classified against (step 2) when its peers are nearly starved:
a router that sends everything to one unit leaves its peers a stray request or two, whose
tokens per request are noise. Seen live: sglang-router's cache_aware policy put 99.4 % of the
requests on one worker, one peer kept two warm-up requests of 48 output tokens, and the 10x
hot unit was called "heavier requests, consistent with chance" and the service `balanced`."""

from __future__ import annotations

import math

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.classify import Classification
from skewscope.analysis.diagnose import diagnose
from skewscope.analysis.judge import _without_weight
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.frame import Evidence
from skewscope.report.document import report_document


def _report(stray_rate: float) -> dict:  # type: ignore[type-arg]
    frame = make_frame(
        {
            "hot": Spec(rate=40, prompt=200, output=4),
            "stray": Spec(rate=stray_rate, prompt=1, output=48),
            "idle-1": Spec(rate=0.0),
            "idle-2": Spec(rate=0.0),
        },
        windows=12,
    )
    return report_document(diagnose(Evidence(instance=frame)))  # type: ignore[no-any-return]


def test_a_stray_request_on_a_peer_is_no_weight_to_compare_with() -> None:
    for stray in (0.0, 0.1, 0.5):  # no request at all, then a few over the whole range
        doc = _report(stray)
        assert doc["verdict"] == "imbalanced" and doc["hot_units"] == ["hot"], (stray, doc)
        (finding,) = [f for f in doc["findings"] if f["units"] == ["hot"]]
        assert finding["kind"] == "count", (stray, finding["summary"])


def test_a_peer_that_served_enough_requests_still_measures_weight() -> None:
    """The floor drops only the noise: a peer with real traffic is the reference as before."""
    frame = make_frame(
        {
            "hot": Spec(rate=20, prompt=4000, output=200),
            **{f"p{i}": Spec(rate=20, prompt=1000, output=200) for i in range(3)},
        },
        windows=12,
    )
    doc = report_document(diagnose(Evidence(instance=frame)))
    (finding,) = [f for f in doc["findings"] if f["units"] == ["hot"]]
    assert finding["kind"] == "weight"


def _cls(kind: str, secondary: str | None, count_ratio: float) -> Classification:
    return Classification(
        kind, secondary, "input", count_ratio, 3.0, 3.0, 1.0, math.nan, "", 0.2, 0.8
    )


def test_heavier_requests_by_chance_leave_the_count_part_standing() -> None:
    th = DEFAULT_THRESHOLDS
    assert _without_weight(_cls("weight", None, 10.0), th).kind == "count"
    assert _without_weight(_cls("weight", None, math.inf), th).kind == "count"
    assert _without_weight(_cls("weight", "count", 1.1), th).kind == "count"
    assert _without_weight(_cls("weight", None, 1.1), th).kind is None
    assert _without_weight(_cls("weight", None, math.nan), th).kind is None
    kept = _without_weight(_cls("count", "weight", 2.0), th)
    assert kept.kind == "count" and kept.secondary_kind is None
