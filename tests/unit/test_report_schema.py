"""The diagnosis report's JSON contract, tested: real reports validate against the schema the
package ships (src/skewscope/report/schema/report.schema.json), and the schema is strict enough
that a renamed or missing field fails. The built-in scenarios are validated where they are
diagnosed already (test_scenarios_offline.check_against_truth)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from helpers.frame_builder import Spec, make_frame
from helpers.report_schema import assert_valid, validator
from skewscope.analysis.diagnose import diagnose, diagnose_frame
from skewscope.catalogue import (
    HEAT_SIGNALS,
    METRICS,
    SERIES,
    Cause,
    GatewaySource,
    Kind,
    PolicyClass,
)
from skewscope.cli import main
from skewscope.frame import Evidence, GatewayEvidence, GatewayUnit, Level
from skewscope.report import jsonout
from skewscope.report.document import compare_document, report_document

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster-skew"
EVEN = {u: Spec() for u in "abcd"}


def _doc(report: Any) -> Any:
    return json.loads(jsonout.render(report))


@pytest.fixture(scope="module")
def example_auto() -> Any:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diagnose", str(EXAMPLE), "--level", "auto", "--format", "json"]) == 0
    return json.loads(out.getvalue())


def test_bundled_example_with_drilldown_is_valid(example_auto: Any) -> None:
    assert example_auto["verdict"] == "imbalanced" and example_auto["drilldown"]
    assert_valid(example_auto)


@pytest.mark.parametrize(
    "case",
    [
        "balanced",
        "insufficient",
        "stalled",
        "stalled_quiet",
        "inf_ratio",
        "starved",
        "weight",
        "gateway",
        "fleet",
    ],
)
def test_reports_of_every_shape_are_valid(case: str) -> None:
    report = {
        "balanced": lambda: diagnose_frame(make_frame(EVEN)),
        "insufficient": lambda: diagnose_frame(make_frame({"solo": Spec()})),
        "stalled": lambda: diagnose_frame(
            make_frame(EVEN | {"d": Spec(stalled_from=2)}, source="prometheus")
        ),
        "stalled_quiet": lambda: diagnose_frame(
            make_frame({u: Spec(rate=0.3) for u in "abc"} | {"d": Spec(rate=0.3, stalled_from=0)})
        ),
        "inf_ratio": lambda: diagnose_frame(
            make_frame({"v/dp0": Spec(rate=30.0), "v/dp1": Spec(until=0)}, level=Level.DP)
        ),
        "starved": lambda: diagnose_frame(make_frame(EVEN | {"d": Spec(until=4)})),
        "weight": lambda: diagnose_frame(make_frame(EVEN | {"c": Spec(prompt=3000.0)})),
        "gateway": _gateway_report,
        "fleet": lambda: diagnose_frame(
            make_frame({f"u{i:02d}": Spec(rate=44.0) if i == 3 else Spec() for i in range(24)})
        ),
    }[case]()
    doc = _doc(report)
    assert_valid(doc)
    expected = {"balanced": "balanced", "insufficient": "insufficient_data"}
    assert doc["verdict"] == expected.get(case, "imbalanced")
    kinds = {f["kind"] for f in doc["findings"]}
    want = {
        "stalled": "stalled",
        "stalled_quiet": "stalled",
        "weight": "weight",
        "inf_ratio": "count",
        "starved": "count",
        "gateway": "count",
        "fleet": "count",
    }.get(case)
    assert (doc["fleet"] is not None) == (case == "fleet")
    assert want is None or want in kinds, kinds
    if case == "inf_ratio":
        assert "inf" in json.dumps(doc["findings"])


def _gateway_report() -> Any:
    hosts = [f"10.0.0.{i}:8000" for i in range(1, 5)]
    frame = make_frame(
        {h: Spec(rate=44.0) if i == 2 else Spec() for i, h in enumerate(hosts)}, source="prometheus"
    )
    gw = GatewayEvidence(
        source="sglang-router",
        policy="round_robin",
        units=tuple(
            GatewayUnit(upstream=h, requests=300.0 if i == 2 else 100.0)
            for i, h in enumerate(hosts)
        ),
    )
    report = diagnose(Evidence(instance=frame, gateway=gw))
    assert report.gateway is not None
    return report


def test_bucket_bounded_percentiles_are_valid() -> None:
    import polars as pl

    from skewscope.frame import BOUND_LOWER, BOUND_UPPER, UnitFrame

    frame = make_frame(EVEN | {"c": Spec(rate=44.0)}, source="prometheus")
    hot = pl.col("unit") == "c"
    df = frame.df.with_columns(
        pl.when(hot).then(10_000.0).otherwise(300.0).alias("ttft_p99_ms"),
        pl.when(hot).then(BOUND_LOWER).otherwise(BOUND_UPPER).alias("ttft_p99_ms_bound"),
    )
    doc = _doc(
        diagnose_frame(UnitFrame(df=df, level=Level.INSTANCE, window_s=10.0, source="prometheus"))
    )
    assert doc["units"][2]["bounds"] == {"ttft_p99_ms": "lower"}
    assert_valid(doc)


def _fails(doc: Any) -> list[str]:
    return [e.json_path for e in validator().iter_errors(doc)]


@pytest.mark.parametrize(
    ("path", "old", "new"),
    [
        ((), "hot_units", "hot"),
        (("units", 0), "load_ratios", "load"),
        (("units", 0), "requests_per_s", "requests_per_window"),
        (("findings", 0), "side_by_side", "sidebyside"),
        (("findings", 0, "side_by_side", 0), "reference", "peers"),
        (("findings", 0, "timeline"), "onset_s", "onset_at"),
        (("series",), "window_starts", "windows"),
    ],
)
def test_a_renamed_field_fails(
    example_auto: Any, path: tuple[Any, ...], old: str, new: str
) -> None:
    doc = copy.deepcopy(example_auto)
    obj = doc
    for step in path:
        obj = obj[step]
    obj[new] = obj.pop(old)
    assert _fails(doc), f"renaming {old} -> {new} passed the schema"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("verdict"),
        lambda d: d.update(schema_version=1),
        lambda d: d.update(verdict="skewed"),
        lambda d: d["findings"][0].update(severity="critical"),
        lambda d: d["findings"][0]["evidence"].update(count_ratio="Infinity"),
        lambda d: d["units"][0].update(role="busy"),
    ],
)
def test_a_missing_field_or_wrong_value_fails(example_auto: Any, mutate: Any) -> None:
    doc = copy.deepcopy(example_auto)
    mutate(doc)
    assert _fails(doc)


def test_schema_lists_the_catalogue() -> None:
    # a metric, heat signal, series, kind or root cause added to the code must be added to the
    # schema (that is what keeps the contract documented and closed)
    defs = validator().schema["$defs"]
    assert set(defs["finding"]["properties"]["kind"]["enum"]) == {k.value for k in Kind}
    assert set(defs["root_cause"]["properties"]["key"]["enum"]) == {c.value for c in Cause}
    gateway = defs["gateway"]["properties"]
    assert set(gateway["source"]["enum"]) == {s.value for s in GatewaySource}
    assert set(gateway["policy_class"]["enum"]) - {None} == {p.value for p in PolicyClass}
    unit_props = set(defs["unit"]["properties"])
    assert {m.key for m in METRICS} <= unit_props
    # every non-metric field is required, but the pool (only in a prefill/decode fleet)
    assert unit_props - {m.key for m in METRICS} - {"pool"} == set(defs["unit"]["required"])
    assert set(defs["unit"]["properties"]["load_ratios"]["propertyNames"]["enum"]) == set(
        HEAT_SIGNALS
    )
    assert set(defs["series"]["properties"]["values"]["propertyNames"]["enum"]) == {
        s.key for s in SERIES
    }
    signal = validator("compare").schema["$defs"]["signal"]["properties"]["signal"]["enum"]
    assert set(signal) == {s.key for s in SERIES}


def _run(**over: Spec) -> dict[str, Any]:
    return report_document(diagnose_frame(make_frame({u: over.get(u, Spec()) for u in "abcd"})))


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [
        ({"d": Spec(rate=40.0)}, {}, "converged"),
        ({"d": Spec(rate=60.0)}, {"d": Spec(rate=32.0)}, "improved"),
        ({}, {"b": Spec(rate=45.0)}, "worse"),
        ({"d": Spec(rate=40.0)}, {"d": Spec(rate=40.0)}, "unchanged"),
        ({"d": Spec(until=2)}, {}, "converged"),
    ],
)
def test_compare_reports_are_valid(
    before: dict[str, Spec], after: dict[str, Spec], verdict: str
) -> None:
    from skewscope.analysis.compare import compare

    doc = json.loads(json.dumps(compare_document(compare(_run(**before), _run(**after)))))
    assert doc["verdict"] == verdict
    assert_valid(doc, "compare")
    doc["signals"][0]["before"]["hot_peer"] = doc["signals"][0]["before"].pop("hot_peer_ratio")
    assert list(validator("compare").iter_errors(doc))  # a renamed field fails


def test_compare_cli_report_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(EXAMPLE), str(EXAMPLE), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert_valid(doc, "compare")
    assert list(validator().iter_errors(doc))  # not a diagnose report
