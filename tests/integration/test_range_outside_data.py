"""A range outside a backfilled history: the error says so and where the data is, on a REAL
Prometheus (promtool-backfilled blocks) and a REAL VictoriaMetrics, instead of reading as a
wrong target ("no known serving-engine metrics")."""

from __future__ import annotations

import pytest

from helpers.online_history import SPAN, T0
from skewscope.cli import main

DAY = 86400


@pytest.mark.parametrize("offset", [DAY, -30 * DAY, 365 * DAY])
def test_a_range_outside_the_history_names_the_data_span(
    backend: str, offset: int, capsys: pytest.CaptureFixture[str]
) -> None:
    start = T0 + offset
    code = main(
        [
            "diagnose",
            "--prometheus",
            backend,
            "--start",
            str(start),
            "--end",
            str(start + 600),
            "--selector",
            '{job="vllm-dp"}',
        ]
    )
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.count("\n") == 1 and "no known serving-engine" not in err
    assert "no samples in this range" in err
    # the history's samples are at T0 .. T0 + SPAN (2023-11-14T22:00:00Z .. 22:20:00Z)
    assert "the data spans 2023-11-14T22:00:00Z .. 2023-11-14T22:20:00Z" in err, err
    assert SPAN == 1200


def test_a_target_without_engine_metrics_keeps_its_own_error(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "diagnose",
            "--prometheus",
            backend,
            "--start",
            str(T0),
            "--end",
            str(T0 + 600),
            "--selector",
            '{job="no-such-job"}',
        ]
    )
    err = capsys.readouterr().err
    assert code == 4 and "no known serving-engine metrics" in err
