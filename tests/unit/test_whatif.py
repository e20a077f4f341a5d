"""``skewscope whatif`` against simulator truth: every built-in skew scenario is simulated,
written as msServiceProfiler folders and replayed from those files only. The replay of the
current routing must reproduce the observed metrics, and the candidate that removes the
scenario's known cause must be predicted to cut the load ratio and TTFT P99."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from helpers.report_schema import assert_valid
from skewscope.cli import main
from skewscope.config import WHATIF
from skewscope.sim.engine import simulate
from skewscope.sim.policies import RoutingSpec
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.spec import Scenario
from skewscope.sim.writers.profiler import write_profiler

# scenario -> the candidate that removes its cause (by construction of the scenario)
FIX: dict[str, str] = {
    "wrong-weights": "fix_weights",
    "sticky-sessions": "round_robin",
    "health-check": "restore_pool",
    "late-join": "restore_pool",
    "long-input": "least_tokens",
    "long-output": "least_tokens",
    "slow-device": "fix_weights",
    "kv-exhaustion": "fix_weights",
    "dp-count": "dp:fix_weights",
    "dp-weight": "dp:minimum_tokens",
}
STARVED = {"health-check", "late-join"}  # the cause is an idle unit: min/median load is cut


def whatif_json(folder: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    jobs = [] if "--jobs" in extra else ["--jobs", "1"]
    assert main(["whatif", str(folder), "--format", "json", *jobs, *extra]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert_valid(doc, "whatif")  # the JSON contract (report/schema/whatif.schema.json)
    return doc


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in [*FIX, "balanced"]:
        folder = tmp_path_factory.mktemp(name)
        write_profiler(simulate(builtin_scenarios()[name]), folder)
        out[name] = folder
    return out


@pytest.mark.parametrize("name", sorted(FIX))
def test_replay_reproduces_evidence_and_the_fix_is_predicted_to_help(
    name: str, folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = whatif_json(folders[name], capsys)
    names = [p["name"] for p in doc["policies"]]
    assert doc["current_policy"] in names and doc["recommended"] in names
    for metric in ("ttft_p99_ms", "queue_wait_p95_ms", "max_over_median_load"):
        c = doc["calibration"][metric]
        close = abs(c["replayed"] - c["observed"]) <= max(
            WHATIF.calibration_max_error * abs(c["observed"]),
            WHATIF.calibration_floor_steps * doc["service_model"]["step"]["fixed_ms"]
            if metric.endswith("_ms")
            else WHATIF.calibration_floor_ratio,
        )
        assert close and c["ok"], (metric, c)
    assert doc["trusted"] is True
    by = {p["name"]: p["predicted"] for p in doc["policies"]}
    cur, fix = by[doc["current_policy"]], by[FIX[name]]
    assert fix["ttft_p99_ms"] < 0.7 * cur["ttft_p99_ms"]
    if name in STARVED:
        assert fix["min_over_median_load"] > 2 * cur["min_over_median_load"]
    else:
        assert fix["max_over_median_load"] < cur["max_over_median_load"] - 0.1
    assert doc["recommended"] != doc["current_policy"]
    rec = by[doc["recommended"]]
    assert rec["ttft_p99_ms"] <= fix["ttft_p99_ms"]  # the pick is the best predicted


def test_balanced_service_keeps_its_routing(
    folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = whatif_json(folders["balanced"], capsys)
    assert doc["trusted"] is True
    assert doc["recommended"] == doc["current_policy"] == "current"
    assert doc["inferred"]["instance"].startswith("round_robin")


def test_inferred_routing_and_pool_changes(
    folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = whatif_json(folders["wrong-weights"], capsys)
    assert doc["inferred"]["instance"].startswith("weighted")
    share = doc["policies"][0]["unit_load"]
    assert max(share, key=share.get) == "inst-1"
    doc = whatif_json(folders["health-check"], capsys)
    left = [n for n in doc["note_facts"] if n["code"] == "whatif_left_early"]
    assert [n["instance"] for n in left] == ["inst-3"]
    assert any("inst-3 left the pool" in n for n in doc["notes"])  # and worded
    doc = whatif_json(folders["slow-device"], capsys)
    speeds = {u["unit"]: u["speed"] for u in doc["service_model"]["units"]}
    assert speeds["inst-1"] == pytest.approx(1.8, rel=0.05)
    assert all(speeds[u] == pytest.approx(1.0, rel=0.05) for u in ("inst-0", "inst-2", "inst-3"))
    assert "remove_slow_unit" in [p["name"] for p in doc["policies"]]


def test_policy_lists_and_formats(
    folders: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = whatif_json(folders["dp-count"], capsys, "--dp-policies", "vllm_dp")
    assert [p["name"] for p in doc["policies"]] == ["current", "dp:vllm_dp", "dp:fix_weights"]
    pooled = whatif_json(folders["dp-count"], capsys, "--dp-policies", "vllm_dp", "--jobs", "2")
    assert pooled == doc  # worker processes give the same replays
    assert (
        main(
            [
                "whatif",
                str(folders["dp-count"]),
                "--format",
                "markdown",
                "--jobs",
                "1",
                "--dp-policies",
                "vllm_dp",
            ]
        )
        == 0
    )
    md = capsys.readouterr().out
    assert "| dp:vllm_dp * | dp |" in md and "TTFT P99 observed" in md
    out = tmp_path / "w.txt"
    assert (
        main(
            [
                "whatif",
                str(folders["dp-count"]),
                "-o",
                str(out),
                "--jobs",
                "1",
                "--dp-policies",
                "vllm_dp",
            ]
        )
        == 0
    )
    assert "Recommended: dp:vllm_dp" in out.read_text()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--policies", "nope"], "--policies: unknown policy 'nope'"),
        (["--prometheus", "http://127.0.0.1:1"], "not both"),
        (["--access-log", "nginx.log"], "--access-log needs --prometheus or --scrape"),
        (["--jobs", "0"], "--jobs: expected a positive number"),
        ([], "give profiler PATHs"),
    ],
)
def test_usage_errors_are_one_line(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str], folders: dict[str, Path]
) -> None:
    with_folder = args[:1] in (["--policies"], ["--jobs"], ["--prometheus"], ["--access-log"])
    argv = ["whatif", str(folders["balanced"]), *args] if with_folder else ["whatif", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_folder_without_requests_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], folders: dict[str, Path]
) -> None:
    inst = tmp_path / "inst-0"
    inst.mkdir()
    (inst / "batch.csv").write_text((folders["balanced"] / "inst-0" / "batch.csv").read_text())
    assert main(["whatif", str(inst), "--jobs", "1"]) == 3
    assert "no request.csv" in capsys.readouterr().err


def mixed_dp_scenario() -> Scenario:
    """inst-0 runs DP=2, inst-1 and inst-2 DP=4, behind a round-robin gateway: inst-0 gets a
    third of the requests on half the ranks, so its ranks run hot (truth by construction)."""
    base = builtin_scenarios()["dp-count"]
    return dataclasses.replace(
        base,
        name="mixed-dp",
        instances=3,
        dp_ranks=4,
        dp_sizes=(2, 4, 4),
        gateway=RoutingSpec("round_robin"),
        dispatcher=RoutingSpec("round_robin"),
        workload=dataclasses.replace(base.workload, rate=16.0),
    )


def test_mixed_dp_sizes_are_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(mixed_dp_scenario())
    placed = set(result.requests.select("instance", "dp_rank").unique().iter_rows())
    assert ("inst-0", 2) not in placed and ("inst-0", 3) not in placed  # DP=2: ranks 0, 1 only
    write_profiler(result, tmp_path)
    doc = whatif_json(tmp_path, capsys, "--dp-policies", "round_robin,vllm_dp")
    assert doc["dp_sizes"] == {"inst-0": 2, "inst-1": 4, "inst-2": 4}
    units = [u["unit"] for u in doc["service_model"]["units"]]
    assert units == ["inst-0/dp0", "inst-0/dp1"] + [
        f"inst-{i}/dp{d}" for i in (1, 2) for d in range(4)
    ]
    assert all(set(p["unit_load"]) == set(units) for p in doc["policies"])
    assert doc["inferred"]["dp"].startswith("round_robin")  # equal within each instance
    assert doc["trusted"] is True
    for metric in ("ttft_p99_ms", "queue_wait_p95_ms", "max_over_median_load"):
        assert doc["calibration"][metric]["ok"], (metric, doc["calibration"][metric])
    by = {p["name"]: p for p in doc["policies"]}
    cur = by["current"]["predicted"]
    hot = max(by["current"]["unit_load"], key=by["current"]["unit_load"].get)
    assert hot.startswith("inst-0/")
    fix = by["fix_weights"]  # weights by capacity: inst-0 gets half of a DP=4 instance's share
    assert "0.20, 0.40, 0.40" in fix["description"]
    assert fix["predicted"]["ttft_p99_ms"] < 0.5 * cur["ttft_p99_ms"]
    assert fix["predicted"]["max_over_median_load"] < cur["max_over_median_load"] - 1.0
    assert doc["recommended"] != "current"


def test_without_step_times_the_replay_is_untrusted_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], folders: dict[str, Path]
) -> None:
    for inst in ("inst-0", "inst-1", "inst-2", "inst-3"):  # request.csv only: no batch.csv
        (tmp_path / inst).mkdir()
        (tmp_path / inst / "request.csv").write_text(
            (folders["wrong-weights"] / inst / "request.csv").read_text()
        )
    doc = whatif_json(tmp_path, capsys)
    assert doc["trusted"] is False
    codes = [n["code"] for n in doc["note_facts"]]
    assert codes[0] == "whatif_not_reproduced" and "whatif_few_timed_steps" in codes
    assert "do not trust the ranking" in doc["notes"][0]  # each fact worded, in order
    assert len(doc["notes"]) == len(codes)
    assert main(["whatif", str(tmp_path), "--jobs", "1", "--format", "markdown"]) == 0
    assert "UNTRUSTED" in capsys.readouterr().out


@pytest.mark.parametrize("width", [80, 100])
def test_terminal_report_fits_the_width_and_keeps_every_number(
    width: int, folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope.report.whatif import render_terminal, value
    from skewscope.report.whatif_model import METRIC_KEYS
    from skewscope.sources.workload import load_request_log
    from skewscope.whatif import plans
    from skewscope.whatif.predict import whatif

    log = load_request_log([str(folders["dp-count"])])
    report = whatif(log, "dp-count", plans.DEFAULT_POLICIES, plans.DEFAULT_DP_POLICIES)
    text = render_terminal(report, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    for p in report.policies:
        row_lines = [line for line in text.splitlines() if f"│ {p.name}" in line]
        assert row_lines, p.name  # the policy heads a row of every part of the table
        cells = " ".join(row_lines)
        for key in METRIC_KEYS:
            assert value(key, p.predicted.get(key)) in cells, (p.name, key)
