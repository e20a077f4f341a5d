"""A fleet of many tiny instance folders (issue 26: 10,000 took 102 s to diagnose, whatif never
finished): read by worker processes in batches, judged and reported as a fleet summary, and
replayed with the gateway's load read as one array. The same path as 10,000 folders, smaller;
``benchmarks/bench_profiler.py --tiny 10000`` times the full size."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from pathlib import Path

import pytest

from helpers.profiler_fixtures import set_cell, tiny_fleet
from skewscope.cli import main
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.errors import SchemaError
from skewscope.sources import profiler_pool as pool
from skewscope.sources.profiler import load_profiler
from skewscope.sources.profiler_instance import Instance
from skewscope.sources.profiler_layout import discover_all
from skewscope.sources.profiler_range import CLOCKS

FLEET = 200  # folders: past ReadBudget.process_min_instances (128) and table_units_max (20)
HOT = 137


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_fleet(tmp_path_factory.mktemp("fleet") / "run", FLEET, HOT)


def test_a_fleet_of_tiny_folders_is_read_in_processes(fleet: Path) -> None:
    sizes = [pool.csv_bytes(f) for f in discover_all([str(fleet)])]
    assert len(sizes) == FLEET and pool.READ_BUDGET.in_processes(sizes)
    # the process path gives what one-by-one thread reads give, and tells every byte read
    seen: list[tuple[int, int]] = []
    fast = load_profiler([str(fleet)], progress=lambda d, t: seen.append((d, t)))
    slow = load_profiler([str(fleet)], budget=pool.ReadBudget(process_min_instances=10**9))
    assert fast.instance.df.equals(slow.instance.df)
    assert seen[0] == (0, sum(sizes)) and seen[-1] == (sum(sizes), sum(sizes))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_the_report_names_the_hot_folder_in_a_fleet_summary(fleet: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert main(["diagnose", str(fleet), "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    hot = f"inst-{HOT:05d}"
    assert report["verdict"] == "imbalanced" and report["hot_units"] == [hot]
    assert [f["units"] for f in report["findings"]] == [[hot]]
    summary = report["fleet"]
    assert summary["units"] == FLEET and summary["roles"] == {"hot": 1, "normal": FLEET - 1}
    assert len(summary["shown"]) == DEFAULT_THRESHOLDS.table_units_max
    assert summary["shown"][0] == hot
    rate = summary["spread"]["requests_per_s"]
    assert rate["max"] == pytest.approx(2.5 * rate["median"])
    terminal = tmp_path / "report.txt"
    assert main(["diagnose", str(fleet), "-o", str(terminal)]) == 0
    text = terminal.read_text()
    assert f"Fleet: {FLEET:,} units (1 hot, {FLEET - 1:,} normal)" in text
    # no row per unit: the units named are the table's (at a narrow terminal its columns
    # come in several parts, each naming the same units again)
    named = set(re.findall(r"inst-\d{5}", text))
    assert hot in named and len(named) <= DEFAULT_THRESHOLDS.table_units_max


def test_the_first_bad_folder_in_order_is_reported(fleet: Path, tmp_path: Path) -> None:
    """A bad cell in two folders of different batches: the earlier folder's error, one line."""
    bad = tiny_fleet(tmp_path / "run", 300, HOT % 300)
    for i in (250, 41):
        batch = bad / f"inst-{i:05d}" / "batch.csv"
        text = batch.read_bytes()
        batch.unlink()  # a hard link: the bad cell goes into a file of its own
        batch.write_bytes(text)
        set_cell(batch, 3, "batch_size", "lots")
    with pytest.raises(SchemaError) as err:
        load_profiler([str(bad)])
    assert str(err.value).startswith(str(bad / "inst-00041" / "batch.csv"))


def test_whatif_replays_a_fleet_of_tiny_folders(tmp_path: Path) -> None:
    """The replay of 200 folders: the hot folder carries the most load under the current
    routing (three times the requests), evened out by least_requests (the gateway's pool read
    as one array); the report lists the largest shares, not one per unit."""
    small = tiny_fleet(tmp_path / "run", 200, 17)
    out = tmp_path / "whatif.json"
    args = ["whatif", str(small), "--policies", "round_robin,least_requests", "--jobs", "1"]
    assert main([*args, "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["instances"] == 200
    load = {p["name"]: p["unit_load"] for p in report["policies"]}
    current = load["current"]
    assert max(current, key=current.__getitem__) == "inst-00017"
    assert current["inst-00017"] > 3 * current["inst-00000"]  # 3x the requests, longer ones
    assert max(load["least_requests"].values()) < current["inst-00017"]
    text = tmp_path / "whatif.txt"
    assert main([*args, "-o", str(text)]) == 0
    shown = text.read_text()
    assert "request shares of 200 units; the 20 largest: inst-00017" in shown
    assert "inst-00150" not in shown


def test_reading_the_folders_shows_progress_in_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal the one progress display prints a plain line every
    ``[sources] progress_every_s``: the CSV megabytes read, up to the whole fleet."""
    small = tiny_fleet(tmp_path / "run", 150)
    total = sum(p.stat().st_size for p in small.glob("*/*.csv")) / 1e6
    config = tmp_path / "skewscope.toml"
    config.write_text("[sources]\nprogress_every_s = 0.000001\n")
    out = tmp_path / "report.json"
    assert main(["diagnose", str(small), "--config", str(config), "-o", str(out)]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith("skewscope: reading profiler CSVs: ") for line in lines)
    assert lines[-1].endswith(f"{total:,.1f} of {total:,.1f} MB")


def _dies_in_a_worker(inst: Instance) -> str:
    """A ``finish`` whose worker process dies on one folder (as one killed for memory)."""
    if multiprocessing.parent_process() is not None and inst.name == "inst-00100":
        os._exit(3)
    return inst.name


def test_a_worker_that_dies_leaves_its_batches_to_threads(tmp_path: Path) -> None:
    small = tiny_fleet(tmp_path / "run", 200)
    found = discover_all([str(small)])
    seen: list[int] = []
    names = pool.read_all(
        found, CLOCKS, _dies_in_a_worker, progress=lambda done, total: seen.append(done)
    )
    assert names == [f.name for f in found]
    assert seen == sorted(seen) and seen[-1] == sum(pool.csv_bytes(f) for f in found)
