"""An option the chosen source does not read is a usage error (exit 2, one line naming the
option and why), never silently ignored (cli/applies.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skewscope.cli import main

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "cluster-skew")
DEAD = "http://127.0.0.1:9"  # nothing listens: a check that passes would end in exit 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["diagnose", EXAMPLE, "--step", "15s"],
            "diagnose: --step applies to --prometheus only (the query step = window; use --window "
            "elsewhere); it would be ignored with profiler folders",
        ),
        (["diagnose", EXAMPLE, "--selector", '{job="x"}'], "--selector applies to --prometheus"),
        (["diagnose", EXAMPLE, "--interval", "5s"], "--interval applies to --scrape only"),
        (["diagnose", EXAMPLE, "--duration", "2m"], "--duration applies to --scrape only"),
        (
            ["diagnose", EXAMPLE, "--dialect", "vllm"],
            "--dialect applies to --prometheus and --scrape only",
        ),
        (["diagnose", EXAMPLE, "--insecure"], "--insecure applies to --prometheus and --scrape"),
        (["diagnose", EXAMPLE, "--token-file", "t"], "--token-file applies to --prometheus"),
        (
            ["diagnose", EXAMPLE, "--timeout", "5s"],
            "--timeout applies to --gateway-url, --prometheus and --scrape only",
        ),
        (
            ["diagnose", "--prometheus", DEAD, "--last", "5m", "--interval", "3s"],
            "--interval applies to --scrape only (how often /metrics is sampled); it would be "
            "ignored with --prometheus",
        ),
        (
            ["diagnose", "--scrape", DEAD + "/metrics", "--last", "5m"],
            "--last applies to profiler folders and --prometheus only (a scrape samples from now "
            "for --duration); it would be ignored with --scrape",
        ),
        (["diagnose", "--scrape", DEAD + "/metrics", "--step", "5s"], "--step applies to"),
        (["compare", EXAMPLE, EXAMPLE, "--step", "15s"], "compare: --step applies to"),
        (
            ["compare", EXAMPLE, EXAMPLE, "--before-start", "5"],
            "compare: --before-start applies to --prometheus only",
        ),
        (
            ["watch", "--prometheus", DEAD, "--interval", "5s", "--runs", "1"],
            "watch: --interval applies to --scrape only",
        ),
        (
            ["watch", "--scrape", DEAD, "--step", "5s", "--runs", "1"],
            "watch: --step applies to --prometheus only",
        ),
        (
            ["whatif", EXAMPLE, "--last", "5m"],
            "whatif: --last is not read by whatif (it replays the whole capture)",
        ),
        (["whatif", EXAMPLE, "--step", "15s"], "whatif: --step applies to --prometheus only"),
    ],
)
def test_an_option_the_source_does_not_read_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("skewscope: error: ") and message in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["diagnose", EXAMPLE, "--last", "5m", "--level", "instance"], 0),  # zoom: read offline
        (["diagnose", EXAMPLE, "--gateway-url", DEAD, "--timeout", "1s"], 4),  # the router's
        (
            [
                "watch",
                "--scrape",
                DEAD,
                "--last",
                "5s",
                "--interval",
                "1s",
                "--runs",
                "1",
                "--no-tui",
                "--every",
                "0.1s",
                "--timeout",
                "0.2s",
            ],
            0,
        ),  # span of the sampler
    ],
)
def test_an_option_the_source_reads_passes(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int
) -> None:
    assert main(argv) == code
    assert "applies to" not in capsys.readouterr().err
