"""The docs' counts of the rule file (groups, recording rules, alert rules, alert names) are
checked against what ``skewscope rules`` writes: a new dialect or rule cannot leave them stale."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from skewscope.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _rule_file(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    out = tmp_path / "rules.yml"
    assert main(["rules", "-o", str(out)]) == 0
    return yaml.safe_load(out.read_text())  # type: ignore[no-any-return]


def test_monitoring_doc_counts_match_the_rule_file(tmp_path: Path) -> None:
    groups = _rule_file(tmp_path)["groups"]
    records = [sum("record" in r for r in g["rules"]) for g in groups]
    alerts = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    text = " ".join((ROOT / "docs" / "monitoring.md").read_text().split())

    listed = re.search(r"the file has one group per dialect \(([^;]*);", text)
    assert listed, "docs/monitoring.md no longer lists the groups"
    assert re.findall(r"`([\w-]+)`", listed.group(1)) == [g["name"] for g in groups]

    counts = re.search(
        r"the file holds (\d+) recording rules \((\d+) to (\d+) per dialect group\)"
        r" and (\d+) alert rules \(the (\d+) alert names",
        text,
    )
    assert counts, "docs/monitoring.md no longer states the rule counts"
    assert tuple(map(int, counts.groups())) == (
        sum(records),
        min(records),
        max(records),
        len(alerts),
        len(set(alerts)),
    )

    named = re.search(r"and three alerts|the alerts (`\w+`(?:, `\w+`)* and `\w+`)", text)
    assert named and named.group(1)
    assert set(re.findall(r"`(\w+)`", named.group(1))) == set(alerts)


def test_readme_names_the_alerts_it_counts(tmp_path: Path) -> None:
    groups = _rule_file(tmp_path)["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    text = (ROOT / "README.md").read_text()
    (n,) = re.findall(r"# recording rules \+ the (\d+) alerts", text)
    assert int(n) == len(alerts)
    contract = re.search(r"- Alerts \(a contract\):(.*?)\n- ", text, re.S)
    assert contract and set(re.findall(r"`(Skewscope\w+)`", contract.group(1))) == alerts
