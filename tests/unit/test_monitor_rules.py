"""``rules`` and ``dashboard`` take every number from ``Thresholds`` and every metric name from
the dialect tables (checked here without Prometheus; the online tests run them for real)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from skewscope.cli import main
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.errors import UsageError
from skewscope.monitor.rules import HOT_ALERT, RuleOptions, build_rules
from skewscope.sources.dialects import DIALECTS, ROLES, normalise_name, required_samples


def _alert(rules: dict, name: str, level: str = "instance") -> dict:  # type: ignore[type-arg]
    return next(
        r
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == name and r["labels"]["level"] == level
    )


def test_thresholds_are_read_not_copied() -> None:
    """Changing a threshold changes the rules: no number of the method is written twice."""
    th = dataclasses.replace(
        DEFAULT_THRESHOLDS,
        hot_ratio=1.7,
        persist_share=0.6,
        alert_windows=4,
        alert_for_windows=2,
        count_ratio=1.45,
        floor_waiting=3.5,
    )
    rules = build_rules(RuleOptions(dialects=("vllm",), window_s=60.0, thresholds=th))
    hot = _alert(rules, HOT_ALERT)
    assert ">= 1.7)" in str(rules) and ">= 0.6)" in hot["expr"]
    assert "[4m]) >= 0.6)" in hot["expr"]  # hot in persist_share of alert_windows windows
    assert hot["for"] == "2m"  # alert_for_windows windows
    text = str(rules)
    assert ">= 1.45" in text and "3.5" in text
    default = str(build_rules(RuleOptions(dialects=("vllm",), window_s=60.0)))
    assert ">= 1.3)" in default and ">= 1.45" not in default


def test_metric_names_come_from_the_dialect_table() -> None:
    """Every metric name the rules read is a sample of some alias of the dialect tables."""
    known = {
        normalise_name(sample)
        for d in DIALECTS.values()
        for role, aliases in d.roles.items()
        for a in aliases
        for sample in (*required_samples(a, ROLES[role].kind), a.name + "_bucket")
    }
    for name in DIALECTS:
        if "running" not in DIALECTS[name].roles:  # a router's queue only (llm-d): refused
            with pytest.raises(UsageError):
                build_rules(RuleOptions(dialects=(name,)))
            continue
        rules = build_rules(RuleOptions(dialects=(name,)))
        exprs = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
        used = {p for regex in re.findall(r'__name__=~"([^"]+)"', exprs) for p in regex.split("|")}
        assert used, name
        for part in used:
            assert normalise_name(part.replace("[:_]", ":")) in known, (name, part)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["rules", "--group-by", "job,instance"], "names a unit"),
        (["rules", "--group-by", "job,job"], "repeated"),
        (["rules", "--group-by", "9x"], "invalid label name"),
        (["rules", "--window", "soon"], "--window"),
        (["rules", "--for", "0s"], "--for"),
        (["rules", "--selector", '{a="b"} or up'], "selector"),
        (["dashboard", "--group-by", "instance"], "names a unit"),
    ],
)
def test_bad_options_give_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_rules_and_dashboard_take_the_config_file(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``--config FILE`` (as for diagnose and watch) sets the thresholds of both files."""
    import json

    cfg = tmp_path / "th.toml"
    cfg.write_text("[thresholds]\nhot_ratio = 1.6\nstarved_ratio = 0.2\n")
    assert main(["rules", "--dialect", "vllm", "--config", str(cfg)]) == 0
    rules = capsys.readouterr().out
    assert 'heat:ratio{level="instance", dialect="vllm"} >= bool 1.6)' in rules
    assert 'heat:ratio{level="instance", dialect="vllm"} >= bool 1.3' not in rules
    import yaml

    starved = [
        r["expr"]
        for g in yaml.safe_load(rules)["groups"]
        for r in g["rules"]
        if r.get("record") == "skewscope:starved" and r["labels"]["level"] == "instance"
    ]
    assert len(starved) == 1 and " < bool 0.2)" in starved[0] and "0.15" not in starved[0]
    assert main(["dashboard", "--dialect", "vllm", "--config", str(cfg)]) == 0
    panels = json.loads(capsys.readouterr().out)["panels"]
    (ratio, _) = [p for p in panels if p["title"] == "Max / median across peers"]
    steps = ratio["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 1.6]
    assert ratio["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"] == {"mode": "dashed"}
    cfg.write_text("[thresholds]\nhot_ratoi = 1.6\n")
    assert main(["rules", "--config", str(cfg)]) == 2
    assert "hot_ratoi: unknown threshold" in capsys.readouterr().err


def test_every_alert_links_a_runbook_that_exists(tmp_path: Path) -> None:
    """Each alert's runbook_url is <base>/<alert>.md, and docs/runbooks/<alert>.md exists with
    the four parts a runbook has; --runbook-url-base moves the links."""
    from skewscope.monitor.rules import ALERTS, DEFAULT_RUNBOOK_URL_BASE

    docs = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
    seen = set()
    for g in build_rules(RuleOptions())["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                url = r["annotations"]["runbook_url"]
                assert url == f"{DEFAULT_RUNBOOK_URL_BASE}/{r['alert']}.md"
                seen.add(r["alert"])
    assert seen == set(ALERTS)
    for alert in ALERTS:
        text = (docs / f"{alert}.md").read_text(encoding="utf-8")
        for part in (
            "What it means",
            "Panels to open",
            "Commands",
            "Fixes, in order",
            "skewscope diagnose",
        ):
            assert part in text, (alert, part)
    out = tmp_path / "rules.yml"
    assert (
        main(
            ["rules", "--dialect", "vllm", "--runbook-url-base", "https://wiki/rb/", "-o", str(out)]
        )
        == 0
    )
    urls = {
        r["annotations"]["runbook_url"]
        for g in yaml.safe_load(out.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert urls == {f"https://wiki/rb/{a}.md" for a in ALERTS}
