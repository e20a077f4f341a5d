"""``skewscope mixin``: the real jsonnet renders the same rules and dashboard as ``rules`` and
``dashboard``, an override in jsonnet changes the rules as ``--config`` does, and promtool
accepts what it renders."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.binaries import need
from skewscope.cli import main
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.monitor.dashboard import build_dashboard
from skewscope.monitor.dashboard_options import DashboardOptions
from skewscope.monitor.mixin import DASHBOARD_FILE
from skewscope.monitor.rules import RuleOptions, build_rules
from skewscope.monitor.template import RULE_THRESHOLDS, used


def jsonnet(code: str, cwd: Path) -> Any:
    done = subprocess.run(
        [need("jsonnet", "jsonnet"), "-e", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


RENDER = (
    "local m = (import 'mixin.libsonnet'){extra}; "
    "{{alerts: m.prometheusAlerts, rules: m.prometheusRules, dash: m.grafanaDashboards}}"
)


def render(folder: Path, extra: str = "") -> Any:
    return jsonnet(RENDER.format(extra=extra), folder)


def write(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "mixin"
    assert main(["mixin", "-o", str(out), *args]) == 0
    return out


def as_rule_file(rendered: Any) -> dict[str, Any]:
    """The mixin's record and alert groups merged back per dialect, as ``rules`` groups them."""
    alerts = {g["name"].removesuffix("-alerts"): g["rules"] for g in rendered["alerts"]["groups"]}
    return {
        "groups": [
            {"name": g["name"], "rules": g["rules"] + alerts.pop(g["name"])}
            for g in rendered["rules"]["groups"]
        ]
    }


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = write(tmp_path_factory.mktemp("default"))
    return folder, render(folder)


def test_layout_is_a_mixin(default: tuple[Path, Any]) -> None:
    folder, _ = default
    for name in (
        "mixin.libsonnet",
        "config.libsonnet",
        "alerts/alerts.libsonnet",
        "rules/rules.libsonnet",
        "dashboards/dashboards.libsonnet",
        f"dashboards/{DASHBOARD_FILE}",
    ):
        assert (folder / name).is_file(), name
    fields = jsonnet("std.objectFieldsAll(import 'mixin.libsonnet')", folder)
    assert {"_config", "prometheusAlerts", "prometheusRules", "grafanaDashboards"} <= set(fields)
    config = jsonnet("(import 'mixin.libsonnet')._config", folder)
    assert set(config["thresholds"]) == set(RULE_THRESHOLDS)
    assert {"dialects", "groupBy", "selector", "windowSeconds", "forSeconds"} <= set(config)


def test_renders_the_same_rules_and_dashboard(default: tuple[Path, Any]) -> None:
    _, rendered = default
    assert as_rule_file(rendered) == build_rules(RuleOptions())
    assert all(
        g["name"].endswith("-alerts") and all("alert" in r for r in g["rules"])
        for g in rendered["alerts"]["groups"]
    )
    assert all("record" in r for g in rendered["rules"]["groups"] for r in g["rules"])
    assert rendered["dash"] == {DASHBOARD_FILE: build_dashboard(DashboardOptions())}


def test_every_threshold_is_a_parameter() -> None:
    """Each threshold the config lists changes the rules (directly, or through the durations
    it makes), and the templates use no parameter the mixin does not compute."""
    from skewscope.monitor.rules import build_template

    opts = RuleOptions(dialects=("vllm",))
    default = build_rules(opts)
    for name in RULE_THRESHOLDS:
        value = getattr(DEFAULT_THRESHOLDS, name)
        bumped = value + 1 if isinstance(value, int) else value * (0.9 if value <= 1 else 1.1)
        th = DEFAULT_THRESHOLDS.updated({name: bumped}, "test")
        assert build_rules(dataclasses.replace(opts, thresholds=th)) != default, name
    assert used(build_template(opts)) <= set(opts.params)


def test_override_in_jsonnet_is_the_config_override(tmp_path: Path) -> None:
    """hot_ratio, the window and for set in jsonnet render what --config and the options
    give ``rules``; the same settings written by ``mixin --config`` render the same too."""
    options = ["--dialect", "vllm", "--group-by", "job"]
    base = write(tmp_path / "a", *options)
    extra = (
        " + {_config+:: {thresholds+: {hot_ratio: 1.7, min_requests_per_window: 3},"
        " windowSeconds: 60, forSeconds: 600}}"
    )
    th = DEFAULT_THRESHOLDS.updated({"hot_ratio": 1.7, "min_requests_per_window": 3}, "test")
    want = build_rules(
        RuleOptions(
            dialects=("vllm",), group_by=("job",), window_s=60.0, for_s=600.0, thresholds=th
        )
    )
    assert want != build_rules(RuleOptions(dialects=("vllm",), group_by=("job",)))
    rendered = render(base, extra)
    assert as_rule_file(rendered) == want
    # the dashboard's hot line moves with hot_ratio, as dashboard --config moves it
    dash = DashboardOptions(dialects=("vllm",), group_by=("job",), thresholds=th)
    assert rendered["dash"] == {DASHBOARD_FILE: build_dashboard(dash)}
    toml = tmp_path / "skewscope.toml"
    toml.write_text("[thresholds]\nhot_ratio = 1.7\nmin_requests_per_window = 3\n")
    configured = write(
        tmp_path / "b", *options, "--config", str(toml), "--window", "1m", "--for", "10m"
    )
    assert as_rule_file(render(configured)) == want
    out = tmp_path / "rules.yml"  # and rules --config writes that file too
    assert (
        main(
            [
                "rules",
                *options,
                "--config",
                str(toml),
                "--window",
                "1m",
                "--for",
                "10m",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert yaml.safe_load(out.read_text()) == want


def test_a_shape_change_in_jsonnet_is_refused(default: tuple[Path, Any]) -> None:
    folder, _ = default
    done = subprocess.run(
        [
            need("jsonnet", "jsonnet"),
            "-e",
            "((import 'mixin.libsonnet') + {_config+:: {groupBy: ['job']}}).prometheusRules",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    assert "_config.groupBy shapes the rule groups" in done.stderr


def test_promtool_accepts_the_rendered_rules(default: tuple[Path, Any], tmp_path: Path) -> None:
    _, rendered = default
    for part in ("alerts", "rules"):
        path = tmp_path / f"{part}.yml"
        path.write_text(yaml.safe_dump(rendered[part], width=1_000_000))
        done = subprocess.run(
            [need("promtool", "prometheus"), "check", "rules", str(path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_jsonnet_formats_numbers_as_python(default: tuple[Path, Any]) -> None:
    """``lib.g`` is Python's ``format(x, 'g')`` and ``lib.duration`` the rules' duration, on
    a broad seeded sample (thresholds, their quotients by windows, large and tiny values)."""
    from skewscope.monitor.template import duration

    folder, _ = default
    rnd = random.Random(20250423)
    values = [0.0, 1.0, 1.3, 0.15, 0.02, 2 / 300, 100.0, 7200.0, 999999.7, 1e-5, 123456789.0]
    values += [round(rnd.uniform(0, 10), rnd.randint(0, 4)) for _ in range(150)]
    values += [rnd.uniform(0.1, 5) / rnd.choice([1, 7, 60, 300, 3600]) for _ in range(150)]
    values += [10 ** rnd.uniform(-6, 9) for _ in range(100)]
    seconds = [0.5, 1, 2.5, 7.5, 60, 90, 300, 3600, 5400, 86400, 129600]
    seconds += [rnd.randint(1, 10**6) / rnd.choice([1, 10, 1000]) for _ in range(100)]
    got = jsonnet(
        f"local l = import 'lib/params.libsonnet'; {{g: [l.g(x) for x in {json.dumps(values)}],"
        f" d: [l.duration(x) for x in {json.dumps(seconds)}]}}",
        folder,
    )
    assert got["g"] == [f"{x:g}" for x in values]
    assert got["d"] == [duration(s) for s in seconds]


def test_output_folder_is_not_overwritten_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mixin").mkdir()
    (tmp_path / "mixin" / "keep.txt").write_text("x")
    assert main(["mixin", "-o", str(tmp_path / "mixin")]) == 2
    assert "folder is not empty" in capsys.readouterr().err
    assert main(["mixin", "-o", str(tmp_path / "mixin"), "--force"]) == 0
    assert (tmp_path / "mixin" / "keep.txt").exists()
    assert (tmp_path / "mixin" / "mixin.libsonnet").exists()
