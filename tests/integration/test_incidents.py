"""Real incidents replayed: per-unit histories reconstructed from public issue threads
(tests/data/incidents/, each naming its thread) backfilled into a REAL Prometheus and diagnosed
with ``diagnose --prometheus``; the report must name the hot (or starved) units, the kind and a
plausible cause, as the fixture's ``[expect]`` says (docs/accuracy.md: before/after counts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.incidents import T0, Incident, incidents, mismatches, samples
from helpers.online_history import to_openmetrics
from skewscope.cli import main

CASES = incidents()


@pytest.fixture(scope="module")
def incident_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prom, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("incidents")
    om = tmp / "incidents.om"
    om.write_text(to_openmetrics([s for inc in CASES for s in samples(inc)]))
    backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prom, tmp / "blocks", tmp) as url:
        yield url


def diagnose(url: str, inc: Incident, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    iso = [
        datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (T0, T0 + inc.span_s)
    ]
    window = ["--window", inc.data["window"]] if "window" in inc.data else []
    arch = inc.data.get("architecture")  # what the operator knows of the model: --lockstep
    window += ["--lockstep", "yes" if arch == "dp_attention" else "no"] if arch else []
    argv = [
        "diagnose",
        "--prometheus",
        url,
        "--start",
        iso[0],
        "--end",
        iso[1],
        "--selector",
        f'{{job="{inc.data["job"]}"}}',
        "--format",
        "json",
        *window,
    ]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("inc", CASES, ids=[c.name for c in CASES])
def test_incident_is_diagnosed_as_the_thread_reports(
    incident_prometheus: str, inc: Incident, capsys: pytest.CaptureFixture[str]
) -> None:
    assert inc.data["source"].startswith("https://github.com/")
    doc = diagnose(incident_prometheus, inc, capsys)
    assert mismatches(doc, inc.expect) == [], (doc["findings"], doc["notes"])
