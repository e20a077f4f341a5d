"""The offline CLI as a user meets it: outputs, formats, and one-line errors on bad input."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from helpers.profiler_fixtures import set_cell
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios, scenario_from_toml
from skewscope.sim.writers.profiler import write_profiler

EXAMPLE = Path(__file__).parents[1].parent / "examples" / "cluster-skew"


@pytest.fixture(scope="module")
def weights_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ww")
    write_profiler(simulate(builtin_scenarios()["wrong-weights"]), out)
    return out


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("skewscope: error: ")
    assert "\n" not in err and "Traceback" not in err
    return err


def test_bundled_example_matches_its_truth(capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((EXAMPLE / "truth.json").read_text())
    assert main(["diagnose", str(EXAMPLE), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == truth["verdict"]
    assert doc["hot_units"] == truth["hot_units"]
    assert doc["findings"][0]["kind"] == truth["kind"]
    # every dispatcher weights dp0 1.7 vs 1 (truth.meta): each instance's ranks are judged
    # alone (262-472 requests in 3 minutes), and dp0 hot in all three is the fleet-wide pattern
    assert truth["meta"]["dispatcher_policy"] == "weighted(1.7,1)"
    assert sorted(d["hot_units"][0] for d in doc["drilldown"]) == [
        "inst-0/dp0",
        "inst-1/dp0",
        "inst-2/dp0",
    ]
    assert all(len(d["hot_units"]) == 1 for d in doc["drilldown"])
    (fleet,) = [f for f in doc["findings"] if "fleet_dp_pattern" in f["evidence"]]
    assert fleet["evidence"]["fleet_dp_pattern"]["instances"] == ["inst-0", "inst-1", "inst-2"]
    assert fleet["units"] == ["inst-0/dp0", "inst-1/dp0", "inst-2/dp0"]
    assert [c["key"] for c in fleet["root_causes"]] == ["dp_dispatch"]


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's scenario over 60 s with the dispatchers at 2.5 vs 1: inst-0 and inst-2
    serve ~80 requests each (a couple more held at the end), under min_requests_total."""
    toml = (EXAMPLE.parent / "cluster-skew.toml").read_text()
    toml = toml.replace("duration_s = 180", "duration_s = 60").replace(
        "weights = [1.7, 1.0]", "weights = [2.5, 1.0]"
    )
    assert "duration_s = 60" in toml and "[2.5, 1.0]" in toml
    out = tmp_path_factory.mktemp("quiet")
    write_profiler(simulate(scenario_from_toml(tomllib.loads(toml), "quiet.toml")), out)
    return out


def test_quiet_instances_have_their_ranks_judged_together(
    quiet_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """inst-0's and inst-2's ranks, too quiet alone, are judged in one pooled drill-down (each
    against its own sibling)."""
    assert main(["diagnose", str(quiet_run), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pooled = [
        d for d in doc["drilldown"] if d["note_facts"] and d["note_facts"][0]["code"] == "dp_pooled"
    ]
    assert len(pooled) == 1
    assert pooled[0]["hot_units"] == ["inst-0/dp0", "inst-2/dp0"]
    assert sorted(pooled[0]["note_facts"][0]["instances"]) == ["inst-0", "inst-2"]
    assert ["inst-1/dp0"] in [d["hot_units"] for d in doc["drilldown"]]


def test_output_format_follows_the_extension_and_refuses_to_overwrite(
    weights_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    assert main(["diagnose", str(weights_run), "-o", str(md)]) == 0
    assert md.read_text().startswith("# skewscope report")
    assert main(["diagnose", str(weights_run), "-o", str(js)]) == 0
    assert json.loads(js.read_text())["hot_units"] == ["inst-1"]
    assert main(["diagnose", str(weights_run), "-o", str(js)]) == 2
    assert "--force" in one_line_error(capsys)
    assert main(["diagnose", str(weights_run), "-o", str(js), "--force"]) == 0


def test_named_instances_and_level_choice(
    weights_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [f"n{i}={weights_run / f'inst-{i}'}" for i in range(4)]
    assert main(["diagnose", *specs, "--level", "instance", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["hot_units"] == ["n1"]
    assert main(["diagnose", str(weights_run), "--level", "dp"]) == 2
    assert "no DP ranks" in one_line_error(capsys)


def test_missing_folder_is_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(tmp_path / "nope")]) == 3
    assert "nope" in one_line_error(capsys)


def test_folder_without_csvs_is_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["diagnose", str(tmp_path)]) == 3
    one_line_error(capsys)


def test_bad_cell_names_file_line_and_column(
    weights_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(weights_run, bad)
    set_cell(bad / "inst-0" / "request.csv", 6, "recv_token_size", "lots")
    assert main(["diagnose", str(bad)]) == 3
    err = one_line_error(capsys)
    assert "request.csv" in err and "line 6" in err and "recv_token_size" in err
    assert "lots" in err


def test_only_request_csv_still_analyses_and_says_what_is_missing(
    weights_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path / "part"
    for i in range(4):
        (part / f"inst-{i}").mkdir(parents=True)
        shutil.copy(weights_run / f"inst-{i}" / "request.csv", part / f"inst-{i}")
    assert main(["diagnose", str(part), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hot_units"] == ["inst-1"]
    assert any("batch.csv" in n for n in doc["notes"])


def test_truncated_request_csv_of_the_hot_unit_keeps_it_hot_not_starved(
    weights_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The profiler stopped writing inst-1's request.csv early: later windows are unmeasured,
    not windows without requests, so the hot unit must not turn into a 'starved' one."""
    cut = tmp_path / "cut"
    shutil.copytree(weights_run, cut)
    req = cut / "inst-1" / "request.csv"
    req.write_bytes(req.read_bytes()[:30_000])  # mid-line: a truncated last row
    assert main(["diagnose", str(cut), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hot_units"] == ["inst-1"]
    assert doc["starved_units"] == []
    assert any("truncated" in n for n in doc["notes"])


def test_empty_request_log_of_a_busy_unit_is_not_called_starved(
    weights_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """inst-2's request.csv has only its header, but its batch.csv shows a normal batch: the
    log is incomplete, the unit is not out of the pool."""
    part = tmp_path / "part"
    shutil.copytree(weights_run, part)
    req = part / "inst-2" / "request.csv"
    req.write_text(req.read_text().splitlines()[0] + "\n")
    assert main(["diagnose", str(part), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["starved_units"] == []
    assert doc["hot_units"] == ["inst-1"]


def test_glob_characters_in_folder_names_are_plain_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """polars reads '[...]', '*' and '?' in a path as a glob unless told not to."""
    import shutil

    truth = json.loads((EXAMPLE / "truth.json").read_text())
    root = tmp_path / "prof[2025]*?"
    for inst in ("inst-0", "inst-1", "inst-2"):
        shutil.copytree(EXAMPLE / inst, root / f"{inst}[x]")
    assert main(["diagnose", str(root), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hot_units"] == [f"{u}[x]" for u in truth["hot_units"]]


def test_auto_says_why_a_drill_was_not_judged(
    quiet_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A drill-down the gates refuse is never dropped silently: with 5 requests per rank and
    window required, inst-0's and inst-2's ranks (``quiet_run``: under 100 requests seen) are
    too quiet to judge alone, and together they carry
    too few windows at 5 requests per rank: each is named with the reason."""
    cfg = tmp_path / "th.toml"
    cfg.write_text("[thresholds]\nmin_requests_per_window = 5.0\n")
    assert main(["diagnose", str(quiet_run), "--config", str(cfg), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["hot_units"] for d in doc["drilldown"]] == [["inst-1/dp0"]]
    notes = [n for n in doc["note_facts"] if n["code"] == "dp_not_judged"]
    assert [n["instance"] for n in notes] == ["inst-0", "inst-2"]
    for n in notes:
        assert n["reason"]["code"] == "near_idle" and 82 <= n["reason"]["requests"] < 100
    said = "DP ranks inside inst-0 not judged: near-idle service: 84 requests"
    assert any(n.startswith(said) for n in doc["notes"])
