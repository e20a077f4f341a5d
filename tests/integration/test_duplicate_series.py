"""The same series twice in one Prometheus (a federation mistake: the same target scraped by two
jobs; a router's per-worker series exported by two replicas) is read once, never summed: no
unit looks hot because its series was counted twice. Real Prometheus, backfilled history with
known truth: three vLLM instances at one rate, a's series also under a second job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_device_scrape import static

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.online_history import SPAN, STEP, T0, Sample, to_openmetrics
from helpers.online_servers import serve
from skewscope.cli import main
from skewscope.frame import Level
from skewscope.sources.scrape import load_scrape

RATE = 6.0  # requests per 15 s step, every instance
JOBS = {"a:8000": ("vllm", "vllm-federate"), "b:8000": ("vllm",), "c:8000": ("vllm",)}
# llm-d's endpoint picker, two replicas (epp-0, epp-1) exporting the same per-endpoint queues
QUEUES = {"vllm-a-rank-0": 3.0, "vllm-a-rank-1": 3.0, "vllm-b-rank-0": 3.0, "vllm-b-rank-1": 3.0}
EPP = "llm_d_router_epp_per_endpoint_queue_size"


def _history() -> list[Sample]:
    out = []
    for t_off in range(0, SPAN + 1, STEP):
        k = t_off // STEP
        for inst, jobs in JOBS.items():
            for job in jobs:
                lab = tuple(
                    sorted({"job": job, "instance": inst, "engine": "0", "model_name": "m"}.items())
                )
                at = T0 + t_off
                out += [
                    Sample(
                        "vllm:request_success_total",
                        (*lab, ("finished_reason", "stop")),
                        at,
                        RATE * k,
                    ),
                    Sample("vllm:prompt_tokens_total", lab, at, RATE * 100 * k),
                    Sample("vllm:generation_tokens_total", lab, at, RATE * 50 * k),
                    Sample("vllm:num_requests_running", lab, at, 4.0),
                    Sample("vllm:num_requests_waiting", lab, at, 1.0),
                ]
        for replica in ("epp-0:9090", "epp-1:9090"):
            for endpoint, queue in QUEUES.items():
                lab = tuple(
                    sorted(
                        {
                            "job": "llm-d",
                            "instance": replica,
                            "name": "pool",
                            "model_server_endpoint": endpoint,
                        }.items()
                    )
                )
                out.append(Sample(EPP, lab, T0 + t_off, queue))
    return out


@pytest.fixture(scope="module")
def doubled_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prom, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("doubled")
    (tmp / "history.om").write_text(to_openmetrics(sorted(_history(), key=lambda s: s.t)))
    backfill(promtool, tmp / "history.om", tmp / "blocks", timeout_s=60)
    with serve_prometheus(prom, tmp / "blocks", tmp) as url:
        yield url


def test_a_target_scraped_by_two_jobs_is_read_once_and_noted(
    doubled_prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    code = main(
        [
            "diagnose",
            "--prometheus",
            doubled_prometheus,
            "--start",
            str(T0),
            "--end",
            str(T0 + SPAN),
            "--window",
            "60s",
            "--level",
            "instance",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "balanced", doc["verdict"]
    assert doc["hot_units"] == []
    rates = doc["series"]["values"]["requests_per_s"]
    per_unit = {u: [v for v in row if isinstance(v, int | float)] for u, row in rates.items()}
    assert set(per_unit) == set(JOBS)
    for unit, row in per_unit.items():  # a's rate is its own, not twice it
        assert row and all(abs(v - RATE / STEP) < 1e-9 for v in row), (unit, row)
    notes = " ".join(doc["notes"])
    assert "1 unit(s) exported by more than one scrape job or target" in notes, notes
    assert "a:8000" in notes and "job=vllm-federate" in notes


def test_a_router_unit_from_two_replicas_is_read_once(doubled_prometheus: str) -> None:
    from skewscope.sources.prometheus import load_prometheus

    ev = load_prometheus(doubled_prometheus, start=T0, end=T0 + SPAN, window_s=60, dialect="llm-d")
    assert ev.dp is not None
    waiting = ev.dp.df.group_by("unit").agg(__import__("polars").col("waiting").max())
    got = dict(waiting.iter_rows())
    assert got == {"vllm-a/dp0": 3.0, "vllm-a/dp1": 3.0, "vllm-b/dp0": 3.0, "vllm-b/dp1": 3.0}
    assert any(
        "exported by more than one scrape job or target" in n and "epp-1:9090" in n
        for n in ev.notes
    ), ev.notes


def test_two_scrape_targets_serving_one_router_are_read_once() -> None:
    """--scrape: two EPP replicas (two targets) serve the same per-endpoint series."""
    text = "".join(
        f'{EPP}{{name="pool",model_server_endpoint="{e}"}} {q}\n' for e, q in QUEUES.items()
    )
    with serve(static(text)) as one, serve(static(text)) as two:
        ev = load_scrape(
            [one + "/metrics", two + "/metrics"],
            duration_s=1.0,
            interval_s=0.25,
            window_s=0.5,
            progress=False,
            dialect="llm-d",
        )
    frame = ev.dp if ev.dp is not None else ev.instance
    assert frame.level in (Level.DP, Level.INSTANCE)
    assert set(frame.df["waiting"].drop_nulls().to_list()) == {3.0}
    note = next(n for n in ev.notes if "exported by more than one scrape job or target" in n)
    assert one.removeprefix("http://") in note and two.removeprefix("http://") in note
