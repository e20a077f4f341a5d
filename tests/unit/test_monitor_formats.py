"""The other shapes of the rules and dashboard: a prometheus-operator ``PrometheusRule``
(validated against the CRD's OpenAPI schema, vendored in tests/data), a Perses dashboard
(against a schema written from Perses' documented types: tests/data/perses-dashboard.schema.json
says so) and the Grafana dashboard read back through grafana-foundation-sdk's models."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from skewscope.cli import main
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.monitor.dashboard import build_dashboard, variable_labels
from skewscope.monitor.dashboard_options import DashboardOptions
from skewscope.monitor.rules import OPERATOR_API, RuleOptions, build_rules

DATA = Path(__file__).parents[1] / "data"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused where it lists properties: the API server would
    prune them silently (structural schema), so a misspelt field must fail here instead."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out:
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _run(tmp_path: Path, *argv: str) -> str:
    out = tmp_path / "out"
    if out.exists():
        out.unlink()
    assert main([*argv, "-o", str(out)]) == 0
    return out.read_text()


@pytest.mark.parametrize(
    "argv", [[], ["--dialect", "sglang", "--group-by", ""], ["--window", "1m", "--for", "10m"]]
)
def test_prometheus_rule_fits_the_crd(tmp_path: Path, argv: list[str]) -> None:
    schema = json.loads((DATA / "prometheusrule-crd-v1.schema.json").read_text())
    doc = yaml.safe_load(_run(tmp_path, "rules", "--format", "prometheus-operator", *argv))
    jsonschema.Draft7Validator(schema).validate(doc)
    jsonschema.Draft7Validator(_closed(schema)).validate({**doc, "metadata": {}})
    assert doc["apiVersion"] == OPERATOR_API == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert DNS_SUBDOMAIN.match(doc["metadata"]["name"])
    assert all(isinstance(v, str) for v in doc["metadata"]["labels"].values())
    # the spec is the rule file itself, which promtool accepts
    plain = yaml.safe_load(_run(tmp_path, "rules", *argv))
    assert doc["spec"] == plain
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: apt-get install prometheus"
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(doc["spec"], width=1_000_000))
    done = subprocess.run(
        [promtool, "check", "rules", str(spec)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_the_crd_schema_refuses_a_broken_rule() -> None:
    """The vendored schema (and the closed check) do refuse what the operator would."""
    schema = json.loads((DATA / "prometheusrule-crd-v1.schema.json").read_text())
    good: dict[str, Any] = {
        "apiVersion": OPERATOR_API,
        "kind": "PrometheusRule",
        "spec": build_rules(RuleOptions(dialects=("vllm",))),
    }
    jsonschema.Draft7Validator(schema).validate(good)
    for path, value in ((("for",), "15 minutes"), (("expr",), None), (("labels",), {"a": 1})):
        bad = copy.deepcopy(good)
        rule = next(r for r in bad["spec"]["groups"][0]["rules"] if "alert" in r)
        if value is None:
            del rule[path[0]]
        else:
            rule[path[0]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft7Validator(schema).validate(bad)
    typo = copy.deepcopy(good)
    typo["spec"]["groups"][0]["rules"][0]["exp"] = "1"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_closed(schema)).validate(typo)


@pytest.mark.parametrize("argv", [[], ["--dialect", "mindie"], ["--group-by", "namespace"]])
def test_perses_dashboard_has_the_grafana_panels(tmp_path: Path, argv: list[str]) -> None:
    schema = json.loads((DATA / "perses-dashboard.schema.json").read_text())
    perses = json.loads(_run(tmp_path, "dashboard", "--format", "perses", *argv))
    grafana = json.loads(_run(tmp_path, "dashboard", *argv))
    jsonschema.Draft202012Validator(schema).validate(perses)
    spec = perses["spec"]
    # every layout item points at a panel, every panel is placed once
    refs = [
        i["content"]["$ref"].removeprefix("#/spec/panels/")
        for lay in spec["layouts"]
        for i in lay["spec"]["items"]
    ]
    assert sorted(refs) == sorted(spec["panels"])
    # the same rows, panels, queries and legends, in the same order and places
    rows = [p["title"] for p in grafana["panels"] if p["type"] == "row"]
    assert [lay["spec"]["display"]["title"] for lay in spec["layouts"]] == rows
    placed = [spec["panels"][r]["spec"] for r in refs]
    shown = [p for p in grafana["panels"] if p["type"] != "row"]
    assert [p["display"]["name"] for p in placed] == [p["title"] for p in shown]
    assert [p["display"]["description"] for p in placed] == [p["description"] for p in shown]
    assert [
        [
            (q["spec"]["plugin"]["spec"]["query"], q["spec"]["plugin"]["spec"]["seriesNameFormat"])
            for q in p["queries"]
        ]
        for p in placed
    ] == [[(t["expr"], t["legendFormat"]) for t in p["targets"]] for p in shown]
    items = [i for lay in spec["layouts"] for i in lay["spec"]["items"]]
    assert [(i["x"], i["width"], i["height"]) for i in items] == [
        (p["gridPos"]["x"], p["gridPos"]["w"], p["gridPos"]["h"]) for p in shown
    ]
    names = [v["spec"]["name"] for v in spec["variables"]]
    assert names == [v["name"] for v in grafana["templating"]["list"] if v["type"] == "query"]


def test_perses_draws_the_hot_ratio(tmp_path: Path) -> None:
    from skewscope.monitor.perses import build_perses

    th = DEFAULT_THRESHOLDS.updated({"hot_ratio": 1.6}, "test")
    spec = build_perses(DashboardOptions(dialects=("vllm",), thresholds=th))["spec"]
    lines = [
        p["spec"]["plugin"]["spec"]["thresholds"]["steps"]
        for p in spec["panels"].values()
        if "thresholds" in p["spec"]["plugin"]["spec"]
    ]
    assert lines and all(s == [{"value": 1.6, "color": "red"}] for s in lines)
    assert [v["spec"]["name"] for v in spec["variables"]] == list(
        variable_labels(DashboardOptions())
    )


def test_perses_schema_refuses_a_misspelt_field(tmp_path: Path) -> None:
    from skewscope.monitor.perses import build_perses

    schema = json.loads((DATA / "perses-dashboard.schema.json").read_text())
    doc = build_perses(DashboardOptions(dialects=("vllm",)))
    key = next(iter(doc["spec"]["panels"]))
    doc["spec"]["panels"][key]["spec"]["plugin"]["spec"]["legend"]["positon"] = "bottom"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(doc)


@pytest.mark.parametrize(
    "opts",
    [DashboardOptions(), DashboardOptions(dialects=("sglang",)), DashboardOptions(group_by=())],
)
def test_grafana_dashboard_reads_back_through_the_sdk_models(opts: DashboardOptions) -> None:
    """Decoding through the SDK's typed models (which keep only the schema's fields and build
    its enums) and encoding again gives the same JSON: no field outside Grafana's schema."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    model = build_dashboard(opts)
    back = json.loads(json.dumps(Dashboard.from_json(model), cls=JSONEncoder))
    assert back == model
    # and the check has teeth: a field Grafana's dashboard schema does not have is dropped
    bad = copy.deepcopy(model)
    bad["panels"][1]["titel"] = "x"
    bad["templating"]["list"][1]["multii"] = True
    assert json.loads(json.dumps(Dashboard.from_json(bad), cls=JSONEncoder)) == model


def test_prometheus_rule_reads_through_the_operators_crd_models(tmp_path: Path) -> None:
    """A second, independent check: the PrometheusRule through the prometheus-operator CRD
    models of PyPI ``cloudcoil-models-prometheus-operator`` (generated from the operator's
    CRDs), round-tripped so that a field the CRD does not know would be dropped and fail."""
    from cloudcoil.models.prometheus_operator import v1 as promop

    doc = yaml.safe_load(_run(tmp_path, "rules", "--format", "prometheus-operator"))
    model = promop.PrometheusRule.model_validate(doc)
    assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc
    typo = copy.deepcopy(doc)
    typo["spec"]["groups"][0]["rule"] = typo["spec"]["groups"][0].pop("rules")
    dropped = promop.PrometheusRule.model_validate(typo)
    assert dropped.model_dump(by_alias=True, exclude_unset=True, mode="json") != typo
