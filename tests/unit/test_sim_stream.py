"""Writers fed as the run goes (issue 14, part 3): the streamed outputs equal the outputs of
the kept step table, byte for byte, whatever the time chunks and worker processes; workers
report their simulated time to the parent's progress."""

from __future__ import annotations

from pathlib import Path

import pytest

import skewscope.sim.engine as engine
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.records import START_S
from skewscope.sim.scenario import load_scenario
from skewscope.sim.writers.history import HistorySinks, write_history
from skewscope.sim.writers.openmetrics import scrape_times, write_openmetrics

MID = """name = "mid"
duration_s = 60.0
seed = 3
[cluster]
instances = 5
dp_ranks = 2
[[cluster.override]]
unit = "inst-1"
speed = 1.6
[[cluster.health]]
instance = "inst-4"
fail_at_s = 35.0
[gateway]
policy = "{gateway}"
[dispatcher]
policy = "least_requests"
[workload]
rate = 40.0
sessions = 20
[truth]
verdict = "balanced"
"""


@pytest.mark.parametrize(
    ("gateway", "args"),
    [
        ("round_robin", ["--jobs", "2"]),  # instances in two worker processes
        (
            "round_robin",
            [
                "--jobs",
                "1",
                "--metrics-dialect",
                "sglang",
                "--device-exporter",
                "dcgm",
                "--metrics-interval",
                "1s",
            ],
        ),
        ("least_requests", ["--metrics-dialect", "mindie", "--metrics-interval", "2s"]),
    ],
)
def test_streamed_history_equals_the_kept_tables(
    gateway: str,
    args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    toml = tmp_path / "mid.toml"
    toml.write_text(MID.format(gateway=gateway))
    sc = load_scenario(str(toml))
    opts = dict(zip(args[::2], args[1::2], strict=True))
    ref = write_openmetrics(
        simulate(sc, record_members=False),
        tmp_path / "ref.om",
        opts.get("--metrics-dialect", "vllm"),
        float(opts.get("--metrics-interval", "5s").rstrip("s")),
        devices=opts.get("--device-exporter"),
    )
    # ~1,000 steps a chunk: the run is cut some 20 times, scrapes fall on both sides of cuts
    monkeypatch.setattr(engine, "CHUNK_ROWS", 1000)
    chunks: list[int] = []
    real = engine.simulate

    def spy(*a: object, **k: object) -> object:
        res = real(*a, **k)  # type: ignore[arg-type]
        chunks.extend(len(p[-1].chunks) for p in res.outputs)
        return res

    monkeypatch.setattr(engine, "simulate", spy)
    out = tmp_path / "streamed.om"
    assert main(["simulate", str(toml), "--openmetrics", str(out), *args]) == 0
    assert out.read_bytes() == ref.read_bytes()
    assert len(chunks) == int(opts.get("--jobs", "1")) and min(chunks) > 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # spill removed
    assert "wrote OpenMetrics history" in capsys.readouterr().out


def test_a_text_that_misses_its_place_is_an_error_not_a_shifted_file(tmp_path: Path) -> None:
    """The groups' texts are written side by side at offsets worked out from their sizes: a
    size that is off by one byte must fail the write (no file left), and the right sizes give
    the kept tables' file byte for byte."""
    toml = tmp_path / "mid.toml"
    toml.write_text(MID.format(gateway="round_robin"))
    sc = load_scenario(str(toml))
    spill = tmp_path / "spill"
    spill.mkdir()
    sinks = HistorySinks(
        sc.model_name, "vllm", None, scrape_times(START_S, START_S + sc.duration_s, 5.0), spill
    )
    parts = simulate(sc, record_members=False, keep_steps=False, jobs=2, sinks=sinks).outputs
    assert len(parts) == 2
    parts[1].sizes[3] += 1
    with pytest.raises(RuntimeError, match=r"bytes, \d+ were placed"):
        write_history(tmp_path / "bad.om", parts, jobs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid.toml", "spill"]
    parts[1].sizes[3] -= 1
    out = write_history(tmp_path / "good.om", parts, jobs=2)
    ref = write_openmetrics(simulate(sc, record_members=False), tmp_path / "ref.om", "vllm", 5.0)
    assert out.read_bytes() == ref.read_bytes()
    assert not list(spill.iterdir())  # spills removed once written


def test_workers_report_simulated_time_to_the_parent(tmp_path: Path) -> None:
    toml = tmp_path / "mid.toml"
    toml.write_text(MID.format(gateway="round_robin").replace("rate = 40.0", "rate = 200.0"))
    sc = load_scenario(str(toml))
    seen: list[float] = []
    apart = simulate(sc, keep_steps=False, jobs=2, progress=seen.append)
    one = simulate(sc, keep_steps=False)
    assert seen and seen == sorted(seen) and seen[0] >= 0.0 and seen[-1] <= sc.duration_s
    assert apart.run_stats["steps"] == one.run_stats["steps"]
    assert apart.requests.equals(one.requests)


@pytest.mark.parametrize(
    ("generation", "jobs"), [("current", "2"), ("mindie", "1"), ("cann2025", "2")]
)
def test_streamed_profiler_folders_equal_the_kept_tables(
    generation: str,
    jobs: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every file of every instance, byte for byte; inst-4 fails its health check at 35 s,
    so its devices' last forwards wait many chunks for their (absent) next forward."""
    from skewscope.sim.writers.profiler import write_profiler
    from skewscope.sim.writers.truth import write_truth

    toml = tmp_path / "mid.toml"
    toml.write_text(MID.format(gateway="round_robin"))
    ref = tmp_path / "ref"
    kept = simulate(load_scenario(str(toml)))
    write_profiler(kept, ref, generation)
    write_truth(kept, ref)
    monkeypatch.setattr(engine, "CHUNK_ROWS", 1000)
    out = tmp_path / "out"
    assert (
        main(
            [
                "simulate",
                str(toml),
                "--out",
                str(out),
                "--generation",
                generation,
                "--jobs",
                jobs,
                "--openmetrics",
                str(tmp_path / "h.om"),
            ]
        )
        == 0
    )
    files = sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert len(files) > 20
    for f in files:
        assert (out / f).read_bytes() == (ref / f).read_bytes(), f
    assert "wrote 5 instance folder(s)" in capsys.readouterr().out
