"""The short fleet day (``skewscope.sim.day``) is diagnosable: backfilled with promtool into a
REAL Prometheus (both dialects, one job each), ``skewscope diagnose --prometheus`` over each
injected episode's span names the injected unit (at the instance level, or in the DP drill of
its instance) with the episode's kind; the starved instance among the starved units."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from skewscope.cli import main
from skewscope.sim.day import DaySpec, write_day

DIALECTS = ("vllm", "sglang")


@pytest.fixture(scope="module")
def days(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    prometheus, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("prom-day")
    truths = {}
    for dialect in DIALECTS:
        files = write_day(DaySpec.short(dialect=dialect), tmp / dialect)
        backfill(promtool, files.history, tmp / "blocks", timeout_s=240)
        files.history.unlink()  # the blocks hold it now
        truths[dialect] = json.loads(files.truth.read_text())
    with serve_prometheus(prometheus, tmp / "blocks", tmp) as url:
        yield url, truths


def named(doc: dict[str, Any]) -> dict[str, str]:
    """unit -> kind of every unit the report names, the DP drills' too; starved ones as
    ``starved``."""
    out: dict[str, str] = {}
    for d in (doc, *doc.get("drilldown", [])):
        for f in d["findings"]:
            for u in f["units"]:
                out.setdefault(u, f["kind"])
        for u in d.get("starved_units", []):
            out[u] = "starved"
    return out


@pytest.mark.parametrize("dialect", DIALECTS)
def test_diagnose_names_each_injected_unit_over_its_episode(
    days: tuple[str, dict[str, Any]], dialect: str, tmp_path: Path
) -> None:
    url, truths = days
    truth = truths[dialect]
    wrong = []
    for e in truth["episodes"]:
        out = tmp_path / f"{e['id']}.json"
        argv = [
            "diagnose",
            "--prometheus",
            url,
            "--start",
            str(e["start"]),
            "--end",
            str(e["end"]),
            "--selector",
            f'{{job="{truth["job"]}"}}',
            "-o",
            str(out),
        ]
        assert main(argv) == 0, e["id"]
        units = named(json.loads(out.read_text()))
        inst = e["instance"]
        if e["level"] == "instance":
            want = [inst]
        elif e["dp_rank"] is not None:
            want = [f"{inst}/dp{e['dp_rank']}"]
        else:  # stale load: the instance's ranks together
            want = [f"{inst}/dp{r}" for r in range(truth["ranks"])]
        got = {u: units.get(u) for u in want}
        if any(k != e["kind"] for k in got.values()):
            wrong.append((e["id"], e["kind"], got, units))
    assert not wrong, wrong
