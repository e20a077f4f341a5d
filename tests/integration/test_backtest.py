"""``skewscope backtest`` against a REAL Prometheus on backfilled history with known truth.

Two peer groups over 60 minutes (promtool_cases fleets, 15 s samples, backfilled with
promtool): job ``j``, where i0 gets twice its peers' requests from minute 20 to 45, and job
``b``, balanced throughout. The generated rules with the 1 min window (horizon 4m, for 1m) are
evaluated every 30 s at explicit instants; the answers are checked against that truth and
against ``promtool test rules`` (Prometheus' own rule manager) at the same instants.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.promtool_cases import Unit, burst, const, fleet, input_series, to_openmetrics
from skewscope.cli import main
from skewscope.monitor.rules import ALERTS, RuleOptions, build_rules

T0 = 1_699_999_200  # a multiple of 3600
MINUTES = 60
ONSET, END = 20, 45
ARGS = ["--window", "1m", "--step", "30s", "--dialect", "vllm"]


def units() -> list[Unit]:
    return fleet(req=burst(4.0, 2.0, ONSET, END)) + [
        Unit(f"b{k}", job="b", req=const(6.0), running=const(5.0)) for k in range(4)
    ]


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("backtest")
    (tmp / "history.om").write_text(
        to_openmetrics(input_series("vllm", units(), minutes=MINUTES), T0)
    )
    backfill(need("promtool", "prometheus"), tmp / "history.om", tmp / "blocks")
    with serve_prometheus(need("prometheus", "prometheus"), tmp / "blocks", tmp) as url:
        yield url


def backtest(
    prom: str, *extra: str, capsys: pytest.CaptureFixture[str], generated: bool = True
) -> dict:  # type: ignore[type-arg]
    argv = [
        "backtest",
        "--prometheus",
        prom,
        "--start",
        str(T0),
        "--end",
        str(T0 + MINUTES * 60),
        *(ARGS if generated else ARGS[:4]),
        "--format",
        "json",
        *extra,
    ]
    assert main(argv) == 0, capsys.readouterr().err
    out: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return out


@pytest.fixture(scope="module")
def default_run(prom: str) -> dict:  # type: ignore[type-arg]
    """The generated rules' backtest, asked once for the tests that read it."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(
                [
                    "backtest",
                    "--prometheus",
                    prom,
                    "--start",
                    str(T0),
                    "--end",
                    str(T0 + MINUTES * 60),
                    *ARGS,
                    "--format",
                    "json",
                ]
            )
            == 0
        )
    got: dict = json.loads(out.getvalue())  # type: ignore[type-arg]
    return got


def test_the_hot_unit_fires_once_and_the_balanced_group_never(default_run: dict) -> None:  # type: ignore[type-arg]
    got = default_run
    eps = got["episodes"]
    assert [
        (e["alert"], e["level"], e["instance"], e["kind"], e["labels"]["job"]) for e in eps
    ] == [("SkewscopeHotUnit", "instance", "i0", "count", "j")]
    e = eps[0]
    # fires within the horizon plus two windows of the onset, stays until the skew has left
    # the smoothing, and its peak is the injected 2x
    assert T0 + ONSET * 60 < e["start"] <= T0 + (ONSET + 4 + 2) * 60
    assert T0 + END * 60 <= e["end"] < T0 + (END + 10) * 60
    assert e["peak"] == pytest.approx(2.0, rel=0.02)
    assert got["alerts_per_day"] == {"job=j,model_name=m": pytest.approx(24.0)}


def test_for_is_applied_over_the_evaluation_instants(
    prom: str, default_run: dict, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[type-arg]
    """The condition holds without a gap once true: ``for`` 5m fires exactly 4 minutes after
    ``for`` 1m, and the episode ends at the same instant."""
    short = default_run["episodes"][0]
    long = backtest(prom, "--for", "5m", capsys=capsys)["episodes"][0]
    assert long["start"] - short["start"] == 240.0
    assert long["end"] == short["end"]
    assert not backtest(prom, "--for", "40m", capsys=capsys)["episodes"]


def test_the_episode_matches_prometheus_own_rule_manager(default_run: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """``promtool test rules`` on the same series, evaluated every 30 s: the alert is
    firing at the backtest's first and last firing instants and not one step before or after."""
    e = default_run["episodes"][0]
    rules = build_rules(RuleOptions(dialects=("vllm",), window_s=60.0))
    for g in rules["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    labels = {
        "job": "j",
        "model_name": "m",
        "instance": "i0",
        "dialect": "vllm",
        "level": "instance",
        "kind": "count",
        "severity": "warning",
    }
    tests = []
    for t, fires in (
        (e["start"] - 30, False),
        (e["start"], True),
        (e["end"], True),
        (e["end"] + 30, False),
    ):
        tests.append(
            {
                "eval_time": f"{int(t - T0)}s",
                "alertname": ALERTS[0],
                "exp_alerts": [{"exp_labels": labels}] if fires else [],
            }
        )
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "15s",
                "input_series": input_series("vllm", units(), minutes=MINUTES),
                "alert_rule_test": tests,
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, width=1_000_000))
    done = subprocess.run(
        [need("promtool", "prometheus"), "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_scored_against_a_truth_file(
    prom: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    truth = tmp_path / "truth.json"
    truth.write_text(
        json.dumps(
            {
                "episodes": [
                    {
                        "id": "i0-count",
                        "level": "instance",
                        "instance": "i0",
                        "dp_rank": None,
                        "kind": "count",
                        "start": T0 + ONSET * 60,
                        "end": T0 + END * 60,
                    },
                    {
                        "id": "never",
                        "level": "instance",
                        "instance": "b2",
                        "dp_rank": None,
                        "kind": "weight",
                        "start": T0 + 600,
                        "end": T0 + 1200,
                    },
                ]
            }
        )
    )
    s = backtest(prom, "--episodes", str(truth), capsys=capsys)["score"]
    assert (s["detected"], s["missed"], s["false_alerts"]) == (1, 1, 0)
    assert (s["precision"], s["recall"], s["kind_correct"]) == (1.0, 0.5, 1)
    assert 0 < s["median_delay_s"] <= (4 + 2) * 60
    argv = [
        "backtest",
        "--prometheus",
        prom,
        "--start",
        str(T0),
        "--end",
        str(T0 + MINUTES * 60),
        *ARGS,
        "--episodes",
        str(truth),
        "--format",
        "text",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "precision: 1.000" in text and "never (weight): missed" in text


def test_a_rules_file_is_backtested_as_written(
    prom: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A field rule on raw series (no recording rule: no scratch TSDB) and a rule file written
    by ``skewscope rules`` give what they say."""
    field = {
        "groups": [
            {
                "name": "field",
                "rules": [
                    {
                        "alert": "ManyRunning",
                        "expr": 'vllm:num_requests_running{job="b"} > 4',
                        "for": "2m",
                        "labels": {"severity": "info"},
                    }
                ],
            }
        ]
    }
    (tmp_path / "field.yml").write_text(yaml.safe_dump(field))
    eps = backtest(prom, "--rules", str(tmp_path / "field.yml"), capsys=capsys, generated=False)[
        "episodes"
    ]
    assert sorted(e["instance"] for e in eps) == ["b0", "b1", "b2", "b3"]
    assert {e["start"] for e in eps} == {T0 + 120.0}  # the first sample + for
    assert (
        main(["rules", "--dialect", "vllm", "--window", "1m", "-o", str(tmp_path / "r.yml")]) == 0
    )
    eps = backtest(prom, "--rules", str(tmp_path / "r.yml"), capsys=capsys, generated=False)
    assert [e["instance"] for e in eps["episodes"]] == ["i0"]


@pytest.mark.parametrize(
    "extra, code, message",
    [
        (
            ["--episodes", "/nonexistent/truth.json"],
            3,
            "/nonexistent/truth.json: cannot read (No such",
        ),
        (["--rules", "/nonexistent/r.yml"], 3, "/nonexistent/r.yml: cannot read (No such"),
        (["--step", "soon"], 2, "--step"),
    ],
)
def test_bad_input_is_one_line(
    prom: str, capsys: pytest.CaptureFixture[str], extra: list[str], code: int, message: str
) -> None:
    argv = ["backtest", "--prometheus", prom, "--last", "1h", *extra]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_combinations_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.yml").write_text("groups: []\n")
    for argv, message in (
        (["--rules", str(tmp_path / "r.yml"), "--for", "5m"], "--for shapes the generated"),
        (["--rules", str(tmp_path / "r.yml")], "no alerting rule"),
        ([], "needs a range"),
        (["--last", "1h", "--start", "0"], "--last cannot be combined"),
    ):
        code = main(
            [
                "backtest",
                "--prometheus",
                "http://127.0.0.1:9",
                *argv,
                *([] if "--last" in argv or not argv else ["--last", "1h"]),
            ]
        )
        err = capsys.readouterr().err
        assert code in (2, 3) and message in err and err.count("\n") == 1, (argv, err)


def test_last_counts_back_from_the_commands_clock(
    prom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--last`` ends at the clock ``main`` is given (issue 24): on a ManualClock at the
    history's end, ``--last 60m`` is the same range as ``--start``/``--end``, so the episodes
    match; at the system's clock the range is years after the history and finds nothing."""
    from skewscope.clock import ManualClock

    tail = [*ARGS, "--format", "json"]
    explicit = backtest(prom, capsys=capsys)
    end = ManualClock(T0 + MINUTES * 60)
    argv = ["backtest", "--prometheus", prom, "--last", f"{MINUTES}m", *tail]
    assert main(argv, clock=end) == 0, capsys.readouterr().err
    on_clock = json.loads(capsys.readouterr().out)
    assert on_clock["episodes"] == explicit["episodes"] and explicit["episodes"]
    assert on_clock["start"] == explicit["start"] and on_clock["end"] == explicit["end"]
    code = main(argv)
    out = capsys.readouterr()
    assert code != 0 or not json.loads(out.out)["episodes"], out.err
