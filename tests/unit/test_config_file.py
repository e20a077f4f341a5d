"""``--config FILE``: a TOML ``[thresholds]`` table overrides the analysis' thresholds, the report
lists the thresholds it used, and a bad file gives one clean line naming the key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from helpers.report_schema import assert_valid
from skewscope.cli import main
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.settings import SOURCE_SETTINGS, SourceLimits

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "cluster-skew")


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "skewscope.toml"
    path.write_text(text)
    return str(path)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["diagnose", EXAMPLE, "--level", "instance", "--format", "json", *argv]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_source_settings_are_not_thresholds() -> None:
    assert {f.name for f in dataclasses.fields(SourceLimits)} == SOURCE_SETTINGS
    assert not SOURCE_SETTINGS & {f.name for f in dataclasses.fields(DEFAULT_THRESHOLDS)}


def test_sources_table_sets_the_limits_not_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from skewscope.cli.common import limits_from_args, thresholds_from_args

    cfg = _config(
        tmp_path,
        "[sources]\nmax_query_mb = 4\nprogress_every_s = 1.5\n[thresholds]\nhot_ratio = 1.4\n",
    )
    args = argparse.Namespace(config=cfg)
    assert limits_from_args(args) == SourceLimits(max_query_mb=4.0, progress_every_s=1.5)
    assert limits_from_args(args).max_query_bytes == 4 * 2**20
    assert thresholds_from_args(args).hot_ratio == 1.4
    doc = _json(capsys, "--config", cfg)
    assert doc["thresholds_overridden"] == ["hot_ratio"]
    assert not SOURCE_SETTINGS & set(doc["thresholds"])  # type: ignore[arg-type]


def test_report_carries_the_default_thresholds(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys)
    assert doc["thresholds"] == DEFAULT_THRESHOLDS.as_dict()
    assert doc["thresholds_overridden"] == []
    assert not SOURCE_SETTINGS & set(doc["thresholds"])  # type: ignore[arg-type]
    assert doc["verdict"] == "imbalanced"


def test_config_changes_the_verdict_and_the_report_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # inst-1 gets 1.8x its peers' requests: a hot ratio of 3 no longer calls it hot
    cfg = _config(tmp_path, "[thresholds]\nhot_ratio = 3\nweight_p_value = 0.05\n")
    doc = _json(capsys, "--config", cfg)
    assert doc["verdict"] == "balanced"
    th = doc["thresholds"]
    assert th["hot_ratio"] == 3.0 and th["weight_p_value"] == 0.05  # type: ignore[index]
    assert doc["thresholds_overridden"] == ["hot_ratio", "weight_p_value"]
    assert_valid(doc)
    assert (
        main(["diagnose", EXAMPLE, "--level", "instance", "--config", cfg, "--format", "markdown"])
        == 0
    )
    md = capsys.readouterr().out
    assert "set by --config: hot\\_ratio 3, weight\\_p\\_value 0.05" in md
    assert main(["diagnose", EXAMPLE, "--level", "instance", "--format", "markdown"]) == 0
    assert "hot\\_ratio 1.3" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[thresholds]\nhot_ratoi = 1.5\n", "[thresholds] hot_ratoi: unknown threshold"),
        ('[thresholds]\nhot_ratio = "1.5"\n', "hot_ratio: expected a number, got '1.5'"),
        ("[thresholds]\nhot_ratio = true\n", "hot_ratio: expected a number, got True"),
        ("[thresholds]\nmin_windows = 6.5\n", "min_windows: expected an integer, got 6.5"),
        ("[thresholds]\nhot_ratio = inf\n", "hot_ratio: expected a finite number, got inf"),
        ("[thresholds]\nkv_high = nan\n", "kv_high: expected a finite number, got nan"),
        ("[thresholds]\nhot_ratio = 0.9\n", "hot_ratio: expected a number in (1, 1000], got 0.9"),
        (
            "[thresholds]\nmin_consecutive = 9\n",
            "min_consecutive: expected at most min_windows (6), got 9",
        ),
        (
            "[sources]\nmax_scrape_mb = 0\n",
            "[sources] max_scrape_mb: expected a number in (0, 1e9]",
        ),
        (
            "[thresholds]\nmax_query_mb = 4.0\n",
            "[thresholds] max_query_mb: read by the sources, not the analysis; set it in the "
            "[sources] table",
        ),
        ("[sources]\nhot_ratio = 1.5\n", "[sources] hot_ratio: unknown source setting"),
        ('[sources]\nmax_query_mb = "4"\n', "[sources] max_query_mb: expected a number"),
        ("[sources]\nprogress_every_s = nan\n", "progress_every_s: expected a finite number"),
        (
            "hot_ratio = 1.5\n",
            "hot_ratio: unknown key (expected a [thresholds] or [sources] table)",
        ),
        ("thresholds = 3\n", "thresholds: expected a table, got 3"),
        ("sources = 3\n", "sources: expected a table, got 3"),
    ],
)
@pytest.mark.parametrize("command", ["diagnose", "compare", "watch"])
def test_bad_config_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str, command: str
) -> None:
    cfg = _config(tmp_path, text)
    argv = {
        "diagnose": ["diagnose", EXAMPLE],
        "compare": ["compare", EXAMPLE, EXAMPLE],
        "watch": ["watch", "--prometheus", "http://127.0.0.1:9", "--runs", "1"],
    }[command]
    assert main([*argv, "--config", cfg]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"skewscope: error: --config {cfg}: ") and message in err, err
    assert "\n" not in err and "Traceback" not in err


def test_unreadable_or_broken_config_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", EXAMPLE, "--config", str(tmp_path / "none.toml")]) == 3
    assert "cannot read" in capsys.readouterr().err
    cfg = _config(tmp_path, "[thresholds\n")
    assert main(["diagnose", EXAMPLE, "--config", cfg]) == 3
    err = capsys.readouterr().err
    assert "not TOML" in err and "line 1" in err


def test_compare_uses_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the same capture on both sides; with a hot ratio no unit reaches, both sides are even
    cfg = _config(tmp_path, "[thresholds]\nhot_ratio = 3\n")
    assert (
        main(
            [
                "compare",
                EXAMPLE,
                EXAMPLE,
                "--level",
                "instance",
                "--config",
                cfg,
                "--format",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["before"]["hot_units"] == [] and doc["verdict"] == "converged"
    assert main(["compare", EXAMPLE, EXAMPLE, "--level", "instance", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["before"]["hot_units"] == ["inst-1"]
