"""``skewscope rules`` checked by the real promtool: ``check rules`` on every option mix, and
``test rules`` unit tests on synthetic fleets with known truth (promtool_cases.py).

Every case asserts all three alerts at the evaluation time, so a missing alert and a false one
both fail.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.binaries import need
from helpers.promtool_cases import Unit, burst, const, dp_fleet, fleet, input_series
from skewscope.cli import main
from skewscope.monitor.rules import (
    ALERTS,
    DEFAULT_RUNBOOK_URL_BASE,
    GAP_ALERT,
    HOT_ALERT,
    STARVED_ALERT,
    RuleOptions,
    build_rules,
    render_rules,
)
from skewscope.sources.dialects import DIALECTS

WINDOW_S = 60.0  # horizon = 4 windows = 4m, for = 1 window = 1m, look-back = 24 windows = 24m


def promtool() -> str:
    return need("promtool", "prometheus")


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--dialect", "vllm"],
        ["--dialect", "sglang", "--window", "30s", "--for", "2m"],
        ["--dialect", "mindie", "--group-by", "job"],
        ["--dialect", "ms-service-metric", "--selector", '{namespace="llm", job!="x"}'],
        ["--group-by", "", "--window", "1h30m"],
        ["--group-by", "cluster,job,model_name", "--window", "15s"],
    ],
)
def test_promtool_check_rules(tmp_path: Path, argv: list[str]) -> None:
    out = tmp_path / "rules.yml"
    assert main(["rules", *argv, "-o", str(out)]) == 0
    done = run_promtool("check", "rules", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@dataclass
class Case:
    dialect: str
    units: list[Unit]
    alerts: list[dict[str, str]]  # expected firing alerts (labels besides severity)
    eval_min: tuple[int, ...] = (30,)
    group_by: tuple[str, ...] = ("job", "model_name")
    escape_colons: bool = False
    tag: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def hot(
    instance: str, kind: str, dialect: str, rank: str | None = None, alert: str = HOT_ALERT
) -> dict[str, str]:
    labels = {
        "alertname": alert,
        "job": "j",
        "model_name": "m",
        "instance": instance,
        "dialect": dialect,
        "level": "instance" if rank is None else "dp",
    }
    if rank is not None:
        rank_label = DIALECTS[dialect].rank_label
        assert rank_label is not None
        labels[rank_label] = rank
    if alert == HOT_ALERT:
        labels["kind"] = kind
    return labels


def two_jobs() -> list[Unit]:
    return [Unit(f"a{k}", job="a") for k in range(4)] + [
        Unit(f"b{k}", job="b", req=const(8.0), running=const(8.0)) for k in range(4)
    ]


CASES = {
    "count": Case("vllm", fleet(req=const(8.0)), [hot("i0", "count", "vllm")]),
    "weight": Case("vllm", fleet(prompt=const(1500.0)), [hot("i0", "weight", "vllm")]),
    "capability": Case(
        "vllm", fleet(running=const(12.0), e2e_s=const(5.0)), [hot("i0", "capability", "vllm")]
    ),
    "starved": Case(
        "vllm",
        fleet(req=const(0.01), running=const(0.0)),
        [hot("i0", "", "vllm", alert=STARVED_ALERT)],
    ),
    "idle": Case(
        "vllm",
        [Unit(f"i{k}", req=const(0.01)) for k in range(4)]
        + [Unit("i4", req=const(0.03), running=const(3.0))],
        [],
    ),
    # Persistence is counted in windows: a burst of half a window (a 150 s burst at the 5 min
    # window, 30 s here) never fires ...
    "burst": Case(
        "vllm",
        fleet(req=burst(4.0, 2.0, 22, 22.5), running=burst(4.0, 2.0, 22, 22.5)),
        [],
        eval_min=(23, 24, 25, 26, 27, 30),
    ),
    # ... and a skew fires within the horizon (4 windows) plus two windows of its onset, not
    # before the smoothing and the horizon's share are reached
    "fresh-skew-early": Case("vllm", fleet(req=burst(4.0, 2.0, 20, 40)), [], eval_min=(22,)),
    "fresh-skew-in-time": Case(
        "vllm", fleet(req=burst(4.0, 2.0, 20, 40)), [hot("i0", "count", "vllm")], eval_min=(26, 30)
    ),
    "balanced-two-jobs": Case("vllm", two_jobs(), []),
    "one-group-across-jobs": Case(
        "vllm",
        two_jobs(),
        [{k: v for k, v in hot(f"b{n}", "count", "vllm").items() if k != "job"} for n in range(4)],
        group_by=("model_name",),
    ),
    "escaped-names": Case(
        "vllm", fleet(req=const(8.0)), [hot("i0", "count", "vllm")], escape_colons=True
    ),
    "dp-count": Case("vllm", dp_fleet(req=const(8.0)), [hot("i0", "count", "vllm", "0")]),
    "dp-weight-ms": Case(
        "ms-service-metric",
        dp_fleet(gen=const(300.0)),
        [hot("i0", "weight", "ms-service-metric", "0")],
    ),
    "dp-sglang-running": Case(
        "sglang", dp_fleet(running=const(12.0)), [hot("i0", "unknown", "sglang", "0")]
    ),
    # rank 0's scheduler series come from two TP ranks (copies of one series): read once, the
    # ranks are even and nothing fires
    "dp-sglang-tp-copies": Case(
        "sglang", [Unit("i0", rank=str(k), copies=2 if k == 0 else 1) for k in range(4)], []
    ),
    "mindie-count": Case("mindie", fleet(req=const(8.0)), [hot("i0", "count", "mindie")]),
    "dp-gap-widening": Case(
        "vllm",
        [
            Unit(
                "i0",
                rank=str(k),
                running=(lambda t: 4.0 + 0.5 * t) if k == 0 else const(4.0),
                e2e_s=lambda t: 1.0 + 0.2 * t,
            )
            for k in range(4)
        ],
        [hot("i0", "unknown", "vllm", "0"), hot("i0", "", "vllm", "0", alert=GAP_ALERT)],
    ),
}


# The rules of the case's dialect, and of the dialect sharing its names (vLLM's names are a
# subset of ms-service-metric's): a deployment must alert under its own dialect only.
VLLM_NAMES = ("vllm", "ms-service-metric")
SIBLINGS = {"vllm": VLLM_NAMES, "ms-service-metric": VLLM_NAMES}


def _rules_without_annotations(case: Case) -> dict[str, Any]:
    dialects = SIBLINGS.get(case.dialect, (case.dialect,))
    rules = build_rules(RuleOptions(dialects=dialects, group_by=case.group_by, window_s=WINDOW_S))
    for g in rules["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    return rules


@pytest.mark.parametrize("name", sorted(CASES))
def test_promtool_unit(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(_rules_without_annotations(case)))
    series = input_series(case.dialect, case.units)
    if case.escape_colons:
        for s in series:
            s["series"] = s["series"].replace(":", "_", 1)
    tests = []
    for minute in case.eval_min:
        for alert in ALERTS:
            exp = [
                {
                    "exp_labels": {
                        **{k: v for k, v in a.items() if k != "alertname"},
                        "severity": "warning",
                    }
                }
                for a in case.alerts
                if a["alertname"] == alert
            ]
            tests.append({"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": exp})
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "30s",
        "tests": [{"interval": "15s", "input_series": series, "alert_rule_test": tests}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, width=1_000_000))
    done = run_promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_promtool_annotations(tmp_path: Path) -> None:
    """The annotations state the ratios in words and the diagnose command (rendered by the
    real template engine, ``query`` included)."""
    (tmp_path / "rules.yml").write_text(
        render_rules(RuleOptions(dialects=("vllm",), window_s=WINDOW_S))
    )
    units = fleet(req=const(8.0), prompt=const(400.0))  # requests, not tokens, lead the heat
    labels = {**hot("i0", "count", "vllm"), "severity": "warning"}
    del labels["alertname"]
    description = (
        "instance i0 has been hot (>= 1.3x the peer median on a load or queue signal) in at "
        "least 0.5 of the last 4m, for 1m: requests 2.00x, tokens per request 1.00x, "
        "latency 1.00x its peers'. Full evidence: skewscope diagnose --prometheus  --last 24m "
        '--level instance --selector \'{job="j",model_name="m"}\''
    )
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": input_series("vllm", units),
                "alert_rule_test": [
                    {
                        "eval_time": "30m",
                        "alertname": HOT_ALERT,
                        "exp_alerts": [
                            {
                                "exp_labels": labels,
                                "exp_annotations": {
                                    "summary": "instance i0 runs hot: up to 2.00x the peer median"
                                    " on requests (count skew)",
                                    "description": description,
                                    "runbook_url": f"{DEFAULT_RUNBOOK_URL_BASE}/{HOT_ALERT}.md",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, width=1_000_000))
    done = run_promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


@pytest.mark.parametrize("hot_ratio, fires", [(None, True), (1.6, False), (1.4, True)])
def test_promtool_rules_follow_config_thresholds(
    tmp_path: Path, hot_ratio: float | None, fires: bool
) -> None:
    """``rules --config FILE`` writes the file's thresholds into the PromQL: i0 at 1.5x its
    peers' requests is hot at the default hot_ratio (1.3) and at 1.4, not at 1.6 — as
    ``diagnose --config`` with the same file would judge it."""
    argv = ["rules", "--dialect", "vllm", "--window", "1m", "-o", str(tmp_path / "full.yml")]
    if hot_ratio is not None:
        (tmp_path / "th.toml").write_text(f"[thresholds]\nhot_ratio = {hot_ratio}\n")
        argv[1:1] = ["--config", str(tmp_path / "th.toml")]
    assert main(argv) == 0
    text = (tmp_path / "full.yml").read_text()
    if hot_ratio is not None:
        assert f"(--config: hot_ratio = {hot_ratio:g})" in text.splitlines()[1]
    rules = yaml.safe_load(text)
    for g in rules["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    units = fleet(req=const(6.0), running=const(6.0))  # 1.5x the peers' 4 req/s and running
    exp = (
        [
            {
                "exp_labels": {
                    **{k: v for k, v in hot("i0", "count", "vllm").items() if k != "alertname"},
                    "severity": "warning",
                }
            }
        ]
        if fires
        else []
    )
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "15s",
                "input_series": input_series("vllm", units),
                "alert_rule_test": [
                    {"eval_time": "30m", "alertname": HOT_ALERT, "exp_alerts": exp}
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, width=1_000_000))
    done = run_promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert main(["rules", "--config", str(tmp_path / "nope.toml")]) == 3  # a missing file
