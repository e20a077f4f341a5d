"""`skewscope simulate` as a user runs it: list, profiler folders with truth, OpenMetrics history,
and one-line errors for bad scenarios and unsafe output folders."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from skewscope.cli import main
from skewscope.sim.scenario import builtin_scenarios


def test_list_shows_every_builtin_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == sorted(builtin_scenarios())
    assert all(len(ln.split(maxsplit=1)) == 2 for ln in lines)


def test_out_writes_instance_folders_and_truth(tmp_path: Path) -> None:
    out = tmp_path / "ww"
    assert main(["simulate", "wrong-weights", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "inst-0",
        "inst-1",
        "inst-2",
        "inst-3",
        "truth.json",
    ]
    assert (out / "inst-1" / "batch.csv").read_text().startswith("name,res_list,")
    truth = json.loads((out / "truth.json").read_text())
    assert truth["hot_units"] == ["inst-1"] and truth["kind"] == "count"
    assert main(["simulate", "wrong-weights", "--out", str(out)]) == 2  # not empty: --force


def test_openmetrics_history_uses_the_requested_interval(tmp_path: Path) -> None:
    om = tmp_path / "h.om"
    argv = ["simulate", "balanced", "--openmetrics", str(om), "--metrics-interval", "10s"]
    assert main(argv) == 0
    text = om.read_text()
    assert text.rstrip().endswith("# EOF")
    stamps = sorted(
        {
            float(m)
            for m in re.findall(
                r'^vllm:num_requests_running\{[^}]*instance="[^"]*inst-0"[^}]*\} \S+ (\S+)$',
                text,
                re.M,
            )
        }
    )
    assert len(stamps) > 5
    assert {round(b - a, 6) for a, b in itertools.pairwise(stamps)} == {10.0}


def test_bad_scenario_file_is_one_line_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nduration_s = "long"\n')
    assert main(["simulate", str(bad), "--out", str(tmp_path / "o")]) == 5
    err = capsys.readouterr().err.strip()
    assert "bad.toml" in err and "\n" not in err


def test_unknown_scenario_name_lists_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "no-such", "--out", "/tmp/never"]) == 5
    assert "balanced" in capsys.readouterr().err
