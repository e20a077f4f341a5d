"""Simulated /metrics: exposition per dialect, OpenMetrics history (real promtool), live HTTP.

Totals are recomputed here from the SimResult tables independently of the writer's event
arrays; the vLLM family/label shape is compared with real vLLM 0.32 captures (tests/data/samples).
"""

from __future__ import annotations

import io
import math
import re
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.sim_fixtures import make_result
from skewscope.catalogue import LiveClock
from skewscope.clock import ManualClock
from skewscope.sim.records import SimResult
from skewscope.sim.writers.exposition import (
    DIALECTS,
    ClusterModel,
    MetricSpec,
    Series,
    dialect_specs,
)
from skewscope.sim.writers.live import SIM_TIME_HEADER, serve
from skewscope.sim.writers.openmetrics import iter_import_lines, write_family, write_openmetrics

SAMPLES = Path(__file__).parents[1] / "data" / "samples"
# The families the diagnosis reads (vLLM names; counters as the parser names them).
DIAGNOSIS_FAMILIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:iteration_tokens_total",
    "vllm:num_preemptions",
    "vllm:cache_config_info",
)


@pytest.fixture(scope="module")
def result() -> SimResult:
    return make_result()


def _parse(text: str) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """family -> {(sample name, sorted labels): value}."""
    out: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
    return out


def _value(
    fams: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]], sample: str, **want: str
) -> float:
    """Sum of a sample's values over series whose labels include ``want``."""
    family = re.sub(r"(_total|_count|_sum|_bucket)$", "", sample)
    fam = fams.get(family) or fams[sample]
    return sum(
        v
        for (name, labels), v in fam.items()
        if name == sample and all(dict(labels).get(k) == w for k, w in want.items())
    )


def _expected_totals(
    result: SimResult, instance: str, rank: int, at: float | None = None
) -> dict[str, float]:
    """Totals of events at or before ``at`` (default: the end of the run) straight from the
    tables, with the writer's documented semantics (a step that ends after ``at`` or a request
    that finishes after it is not counted yet)."""
    at = result.end_s if at is None else at
    req = result.requests.filter((pl.col("instance") == instance) & (pl.col("dp_rank") == rank))
    st = result.steps.filter((pl.col("instance") == instance) & (pl.col("dp_rank") == rank))
    started = req.filter(pl.col("first_token_s") <= at)
    finished = req.filter(pl.col("finish_s") <= at)
    ended = st.filter(pl.col("end_s") <= at)
    busy = req.filter(
        (pl.col("arrival_s") <= at)
        & (pl.col("status") != "rejected")
        & (pl.col("finish_s").is_null() | (pl.col("finish_s") > at))
    )
    return {
        "prompt": float(started["input_tokens"].sum()),
        "generation": float(ended["decode_tokens"].sum() + started.height),
        "success": float(finished.height),
        "preemptions": float(st.filter(pl.col("start_s") <= at)["preempted"].sum()),
        "steps": float(ended.height),
        "ttft_count": float(started.height),
        "e2e_count": float(finished.height),
        "e2e_sum": float((finished["finish_s"] - finished["arrival_s"]).sum()),
        "busy": float(busy.height),
    }


def _check_vllm_totals(result: SimResult, at: float) -> None:
    model = ClusterModel(result, "vllm")
    for inst in result.instances:
        fams = _parse(model.text(inst, at))
        for r in (r for r in result.ranks if r.instance == inst):
            e = str(r.dp_rank)
            want = _expected_totals(result, inst, r.dp_rank, at)
            assert _value(fams, "vllm:prompt_tokens_total", engine=e) == want["prompt"]
            assert _value(fams, "vllm:generation_tokens_total", engine=e) == want["generation"]
            assert _value(fams, "vllm:request_success_total", engine=e) == want["success"]
            assert _value(fams, "vllm:num_preemptions_total", engine=e) == want["preemptions"]
            assert _value(fams, "vllm:iteration_tokens_total_count", engine=e) == want["steps"]
            assert (
                _value(fams, "vllm:time_to_first_token_seconds_count", engine=e)
                == want["ttft_count"]
            )
            assert (
                _value(fams, "vllm:e2e_request_latency_seconds_count", engine=e)
                == want["e2e_count"]
            )
            assert _value(fams, "vllm:e2e_request_latency_seconds_sum", engine=e) == (
                pytest.approx(want["e2e_sum"])
            )
            busy = _value(fams, "vllm:num_requests_running", engine=e) + _value(
                fams, "vllm:num_requests_waiting", engine=e
            )
            assert busy == want["busy"]


# ----------------------------------------------------------------------------- exposition
@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_dialect_parses_at_any_time(result: SimResult, dialect: str) -> None:
    model = ClusterModel(result, dialect)
    n_specs = len(dialect_specs(dialect))
    for inst in result.instances:
        for t in (result.start_s - 1.0, result.start_s + 17.3, result.end_s, result.end_s + 5):
            fams = list(text_string_to_metric_families(model.text(inst, t)))
            assert len(fams) == n_specs
            for fam in fams:
                if fam.type != "histogram":
                    continue
                by_series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = (
                    defaultdict(list)
                )
                counts = {}
                for s in fam.samples:
                    rest = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                    if s.name.endswith("_bucket"):
                        by_series[rest].append((float(s.labels["le"]), s.value))
                    elif s.name.endswith("_count"):
                        counts[rest] = s.value
                for rest, buckets in by_series.items():
                    values = [v for _, v in sorted(buckets)]
                    assert values == sorted(values) and values[-1] == counts[rest]


def test_vllm_counters_equal_simresult_totals_at_end(result: SimResult) -> None:
    _check_vllm_totals(result, result.end_s)
    _check_vllm_totals(result, result.start_s + 21.7)
    # after the last event every counter holds the whole table
    last = float(result.steps["end_s"].max()) + 1.0  # type: ignore[arg-type]
    _check_vllm_totals(result, last)
    whole = result.requests.filter(pl.col("first_token_s").is_not_null())
    fams = _parse(ClusterModel(result, "vllm").text("inst-0", last))
    assert (
        _value(fams, "vllm:prompt_tokens_total")
        == whole.filter(pl.col("instance") == "inst-0")["input_tokens"].sum()
    )
    # the fixture's hot rank preempts, so the preemption counter is really exercised
    assert _expected_totals(result, "inst-0", 0)["preemptions"] > 0


def test_gauges_follow_the_run(result: SimResult) -> None:
    model = ClusterModel(result, "vllm")
    before = _parse(model.text("inst-0", result.start_s - 1))
    assert _value(before, "vllm:prompt_tokens_total") == 0
    assert _value(before, "vllm:kv_cache_usage_perc") == 0
    inst = model.instances["inst-0"]
    times = np.linspace(result.start_s, result.end_s, 50)
    kv = next(f for f in inst.families(times) if f.spec.role == "kv_usage")
    hot = kv.metrics[0][0].values
    assert hot.min() >= 0 and hot.max() <= 1 and hot.max() > 0.5  # hot rank nearly full


def test_vllm_families_and_labels_match_real_captures(result: SimResult) -> None:
    """Our vLLM exposition has the real capture's families, types, label names, buckets."""

    def shape(text: str) -> dict[str, tuple[str, dict[str, frozenset[str]], tuple[float, ...]]]:
        out = {}
        for fam in text_string_to_metric_families(text):
            names: dict[str, set[str]] = defaultdict(set)
            les = set()
            for s in fam.samples:
                names[s.name] |= {k for k in s.labels if k != "le"}
                if "le" in s.labels:
                    les.add(float(s.labels["le"]))
            out[fam.name] = (
                fam.type,
                {k: frozenset(v) for k, v in names.items()},
                tuple(sorted(les)),
            )
        return out

    def engines(text: str, family: str) -> set[str]:
        return {
            s.labels["engine"]
            for f in text_string_to_metric_families(text)
            if f.name == family
            for s in f.samples
        }

    model = ClusterModel(result, "vllm")
    for inst, capture in (
        ("inst-0", "vllm-0.32-cpu-dp2.metrics.txt"),
        ("inst-1", "vllm-0.32-cpu-single.metrics.txt"),
    ):
        real_text = (SAMPLES / capture).read_text()
        real = shape(real_text)
        ours_text = model.text(inst, result.end_s)
        ours = shape(ours_text)
        assert set(DIAGNOSIS_FAMILIES) <= set(ours)
        for name, (kind, labels, les) in ours.items():
            assert name in real, name
            rkind, rlabels, rles = real[name]
            assert kind == rkind, name
            assert labels == rlabels, name
            if name not in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens"):
                assert les == rles, name  # token buckets follow max_model_len (512 there)
            assert engines(ours_text, name) == engines(real_text, name), name


def test_sglang_dp_rank_only_on_scheduler_metrics(result: SimResult) -> None:
    model = ClusterModel(result, "sglang")
    dp = _parse(model.text("inst-0", result.end_s))
    assert {dict(k[1]).get("dp_rank") for k in dp["sglang:num_running_reqs"]} == {"0", "1"}
    assert all("dp_rank" not in dict(k[1]) for k in dp["sglang:time_to_first_token_seconds"])
    single = _parse(model.text("inst-1", result.end_s))
    assert all("dp_rank" not in dict(k[1]) for k in single["sglang:num_queue_reqs"])
    assert all(dict(k[1])["tp_rank"] == "0" for k in single["sglang:num_queue_reqs"])
    total = sum(_expected_totals(result, "inst-0", d)["prompt"] for d in (0, 1))
    assert _value(dp, "sglang:prompt_tokens_total") == total


def test_mindie_has_no_dp_label_and_percent_kv(result: SimResult) -> None:
    vllm = ClusterModel(result, "vllm")
    mindie = ClusterModel(result, "mindie")
    for t in np.linspace(result.start_s, result.end_s, 7):
        fams = _parse(mindie.text("inst-0", float(t)))
        assert all(
            len(dict(k[1])) == 1 for f in fams.values() for k in f if not k[0].endswith("_bucket")
        )  # model_name only
        ref = _parse(vllm.text("inst-0", float(t)))
        assert _value(fams, "prompt_tokens_total") == _value(ref, "vllm:prompt_tokens_total")
        kv = _value(fams, "npu_cache_usage_perc")
        assert 0 <= kv <= 100
        ranks = [r for r in result.ranks if r.instance == "inst-0"]
        used = sum(
            _value(ref, "vllm:kv_cache_usage_perc", engine=str(r.dp_rank)) * r.total_blocks
            for r in ranks
        )
        assert kv == pytest.approx(100 * used / sum(r.total_blocks for r in ranks))


def test_ms_service_metric_labels(result: SimResult) -> None:
    fams = _parse(ClusterModel(result, "ms-service-metric").text("inst-0", result.end_s))
    assert "vllm:num_requests_running" in fams  # on top of vLLM's own families
    free = fams["vllm_profiling_free_kvcache_blocks"]
    assert {dict(k[1])["dp"] for k in free} == {"0", "1"}
    batch = fams["vllm_profiling_batch_size"]
    assert {dict(k[1])["engine"] for k in batch} == {"0", "1"}
    for r in (r for r in result.ranks if r.instance == "inst-0"):
        total = _value(fams, "vllm_profiling_total_kvcache_blocks", dp=str(r.dp_rank))
        assert total == r.total_blocks


def test_unknown_dialect_is_refused(result: SimResult) -> None:
    with pytest.raises(ValueError, match="dialect"):
        ClusterModel(result, "tgi")


def test_simulator_engine_output(tmp_path: Path) -> None:
    """The simulator engine's output gives consistent exposition too."""
    from skewscope.sim import engine, scenario

    res = engine.simulate(scenario.load_scenario("balanced"), duration_s=60.0, record_members=False)
    _check_vllm_totals(res, res.end_s)
    write_openmetrics(res, tmp_path / "h.om", "vllm", 15.0)
    _promtool_blocks(tmp_path / "h.om", tmp_path / "blocks")


# ----------------------------------------------------------------------------- OpenMetrics
def _promtool_blocks(om: Path, blocks: Path) -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is required (Debian package prometheus): install it"
    cp = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(blocks)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


@pytest.mark.parametrize("dialect", DIALECTS)
def test_promtool_accepts_openmetrics_history(
    result: SimResult, dialect: str, tmp_path: Path
) -> None:
    om = write_openmetrics(result, tmp_path / "h.om", dialect, step_s=5.0)
    text = om.read_text()
    assert text.endswith("\n# EOF\n")
    for line in text.splitlines()[:-1]:
        if line.startswith("# TYPE") and line.endswith(" counter"):
            assert not line.split()[2].endswith("_total")
        elif not line.startswith("#"):
            stamp = float(line.rsplit(" ", 1)[1])
            assert result.start_s <= stamp <= result.end_s  # seconds, not ms
            assert 'job="skewscope-sim"' in line and 'instance="127.0.0.1:' in line
    assert "BLOCK ULID" in _promtool_blocks(om, tmp_path / "blocks")


def test_promtool_stored_the_simresult_totals(result: SimResult, tmp_path: Path) -> None:
    """Read the blocks back (promtool tsdb dump): the last stored counter = SimResult total."""
    om = write_openmetrics(result, tmp_path / "h.om", "vllm", step_s=15.0)
    blocks = tmp_path / "blocks"
    _promtool_blocks(om, blocks)
    (blocks / "wal").mkdir(exist_ok=True)  # dump opens the dir as a TSDB
    promtool = shutil.which("promtool")
    assert promtool
    dump = subprocess.run(
        [promtool, "tsdb", "dump", str(blocks)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    last: dict[tuple[str, str], tuple[int, float]] = {}
    pat = re.compile(
        r'__name__="vllm:prompt_tokens_total".*engine="(\d+)".*'
        r'instance="127\.0\.0\.1:([^"]+)".* (\S+) (\d+)$'
    )
    for line in dump.splitlines():
        m = pat.search(line)
        if m:
            key, ts = (m.group(2), m.group(1)), int(m.group(4))
            if key not in last or ts > last[key][0]:
                last[key] = (ts, float(m.group(3)))
    assert len(last) == len(result.ranks)
    for r in result.ranks:
        ts, value = last[(r.instance, str(r.dp_rank))]
        assert ts == round(result.end_s * 1000)
        assert value == _expected_totals(result, r.instance, r.dp_rank)["prompt"]


def test_import_lines_match_openmetrics_samples(result: SimResult, tmp_path: Path) -> None:
    lines = list(iter_import_lines(result, "vllm", step_s=5.0))
    line = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\} \S+ \d{13}$")
    assert all(line.match(x) for x in lines)
    om = write_openmetrics(result, tmp_path / "h.om", "vllm", step_s=5.0).read_text()
    om_samples = {
        (x.rsplit(" ", 2)[0], round(float(x.rsplit(" ", 1)[1]) * 1000)): x.rsplit(" ", 2)[1]
        for x in om.splitlines()
        if not x.startswith("#")
    }
    imp = {(x.rsplit(" ", 2)[0], int(x.rsplit(" ", 1)[1])): x.rsplit(" ", 2)[1] for x in lines}
    assert imp.keys() == om_samples.keys()
    # the file's values (polars' CSV writer) read back as the same floats as format_value's
    assert [float(v) for v in imp.values()] == [float(om_samples[k]) for k in imp]
    assert all(
        v in ("NaN", "+Inf", "-Inf") or v[0].isdigit() or v[0] == "-" for v in om_samples.values()
    )


def test_openmetrics_values_read_back_as_the_same_floats(tmp_path: Path) -> None:
    """Integral counts, long fractions, tiny and huge values, NaN and both infinities: each
    written value parses to the float it was (Go's ParseFloat reads what float() reads)."""
    values = np.array(
        [
            0.0,
            1.0,
            3.0,
            2.0**53,
            1e22,
            0.1 + 0.2,
            1e-5,
            1.5e-7,
            123.456,
            np.nan,
            np.inf,
            -np.inf,
            -0.5,
        ]
    )
    stamps = [f"{1745395200 + 5 * j:.3f}" for j in range(len(values))]
    out = io.BytesIO()
    series = [[Series("m", (("a", "b"),), values)]]
    write_family(
        out,
        MetricSpec("m", "gauge", "running", "help"),
        [("i", series)],
        stamps,
        {"i": {"instance": "x", "job": "j"}},
        header=False,
    )
    # one series, a scrape per value: one line each, in time order
    lines = out.getvalue().decode().splitlines()
    assert [line.split(" ")[2] for line in lines] == stamps
    assert all(line.startswith('m{a="b",instance="x",job="j"} ') for line in lines)
    got = [line.split(" ")[1] for line in lines]
    assert len(got) == len(values)
    assert "+Inf" in got and "-Inf" in got and "NaN" in got
    np.testing.assert_array_equal(np.array([float(v) for v in got]), values)


# ----------------------------------------------------------------------------- live
def _served(url: str) -> tuple[float, dict[str, float]]:
    """A live /metrics answer: the simulated time it says it is, and vLLM's prompt-token and
    finished-request counters summed over the instance's ranks."""
    r = httpx.get(url, timeout=5)
    assert r.status_code == 200
    fams = _parse(r.text)
    return float(r.headers[SIM_TIME_HEADER]), {
        "prompt": _value(fams, "vllm:prompt_tokens_total"),
        "success": _value(fams, "vllm:request_success_total"),
    }


def _truth_at(result: SimResult, instance: str, at: float) -> dict[str, float]:
    """The same two counters from the run's tables at ``at``."""
    totals = [
        _expected_totals(result, instance, r.dp_rank, at)
        for r in result.ranks
        if r.instance == instance
    ]
    return {k: sum(t[k] for t in totals) for k in ("prompt", "success")}


def test_live_endpoints_serve_growing_counters(result: SimResult) -> None:
    """On a manual clock the test says when: the counters at each instant are the run's."""
    with serve(result, "vllm", live_clock=LiveClock.MANUAL, grace_s=5.0) as cluster:
        assert set(cluster.urls) == set(result.instances)
        url = cluster.urls["inst-0"]
        assert url.startswith("http://127.0.0.1:")
        first = httpx.get(url, timeout=5)
        assert first.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "vllm:num_requests_running{" in first.text  # colons kept
        t0, a = _served(url)
        assert t0 == result.start_s
        assert cluster.advance(18.0) == result.start_s + 18.0
        t1, b = _served(url)
        assert t1 == result.start_s + 18.0
        assert a == _truth_at(result, "inst-0", t0) and b == _truth_at(result, "inst-0", t1)
        assert b["prompt"] > a["prompt"]
        assert httpx.get(url.replace("/metrics", "/nope"), timeout=5).status_code == 404
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=2)


def test_live_manual_clock_moves_only_by_the_control_endpoint(result: SimResult) -> None:
    """``POST /sim/advance`` on any instance moves the whole cluster, never past the run's end;
    once there, the servers stop after their grace (a wait on that, not on a duration)."""
    with serve(result, "vllm", live_clock=LiveClock.MANUAL, grace_s=0.2) as cluster:
        base = {i: u.removesuffix("/metrics") for i, u in cluster.urls.items()}
        assert _served(cluster.urls["inst-1"])[0] == result.start_s  # scraping moves nothing
        assert _served(cluster.urls["inst-1"])[0] == result.start_s
        at = result.start_s
        for inst, seconds in (("inst-0", 7.5), ("inst-1", 20.0), ("inst-0", 0.0)):
            r = httpx.post(f"{base[inst]}/sim/advance", json={"seconds": seconds}, timeout=5)
            at += seconds
            assert r.status_code == 200 and r.json()["sim_time"] == at
            for i, url in cluster.urls.items():
                t, got = _served(url)
                assert t == at and got == _truth_at(result, i, at)
        for bad in ({"seconds": -1}, {"seconds": "5"}, {"seconds": True}, {}):
            assert (
                httpx.post(f"{base['inst-0']}/sim/advance", json=bad, timeout=5).status_code == 400
            )
        info = httpx.get(f"{base['inst-1']}/sim/time", timeout=5).json()
        assert info == {
            "sim_time": at,
            "start_s": result.start_s,
            "end_s": result.end_s,
            "clock": "manual",
        }
        with pytest.raises(ValueError, match="finite"):
            cluster.advance(math.inf)
        assert not cluster.stopped
        r = httpx.post(f"{base['inst-0']}/sim/advance", json={"seconds": 1e9}, timeout=5)
        assert r.json()["sim_time"] == result.end_s
        assert cluster.wait(timeout=60), "the watchdog did not stop a run at its end"


def test_live_scrape_clock_steps_each_instance_per_answer(result: SimResult) -> None:
    """Stepped per scrape, the n-th answer of an instance is ``n * step_s`` into the run
    whenever it is asked for; the cluster stops once every instance has reached the end."""
    step = 7.0
    with serve(result, "vllm", live_clock=LiveClock.SCRAPE, step_s=step, grace_s=0.2) as cluster:
        n = math.ceil((result.end_s - result.start_s) / step)
        inst0 = cluster.urls["inst-0"]
        for k in range(n + 2):
            t, got = _served(inst0)
            assert t == min(result.start_s + k * step, result.end_s)
            assert got == _truth_at(result, "inst-0", t)
        assert cluster.sim_time("inst-0") == result.end_s
        assert cluster.sim_time() == result.start_s  # inst-1 was never scraped
        base = inst0.removesuffix("/metrics")
        assert httpx.post(f"{base}/sim/advance", json={"seconds": 1}, timeout=5).status_code == 409
        with pytest.raises(ValueError, match="not advanced by hand"):
            cluster.advance(1.0)
        assert not cluster.stopped
        for _ in range(n):
            _served(cluster.urls["inst-1"])
        assert cluster.wait(timeout=60), "the watchdog did not stop a run at its end"
    with pytest.raises(ValueError, match="step_s"):
        serve(result, "vllm", live_clock=LiveClock.SCRAPE)


def test_live_wall_clock_reads_the_clock_it_is_given(result: SimResult) -> None:
    """The wall clock is ``speed`` x the injected Clock: a ManualClock shared with a scraper
    moves both together."""
    clock = ManualClock(1000.0)
    with serve(result, "vllm", speed=4.0, clock=clock, grace_s=0.2) as cluster:
        url = cluster.urls["inst-0"]
        assert _served(url)[0] == result.start_s
        clock.advance(2.5)
        t, got = _served(url)
        assert t == result.start_s + 10.0 and got == _truth_at(result, "inst-0", t)
        clock.advance(1e6)
        assert cluster.wait(timeout=60), "the watchdog did not stop a run at its end"


def test_live_stops_itself_after_the_run(result: SimResult) -> None:
    cluster = serve(result, "mindie", speed=1000.0, grace_s=0.2)
    try:
        assert cluster.wait(timeout=10), "watchdog did not stop the servers"
        assert cluster.sim_time() == result.end_s
    finally:
        cluster.stop()


def test_live_is_loopback_only(result: SimResult) -> None:
    with pytest.raises(ValueError, match="loopback"):
        serve(result, "vllm", host="0.0.0.0")


def test_victoriametrics_ingests_import_lines(result: SimResult, tmp_path: Path) -> None:
    """Real VictoriaMetrics: import the lines, then an instant query at the end of the run
    returns the SimResult totals (colon names kept)."""
    vm = shutil.which("victoria-metrics")
    assert vm, "victoria-metrics is required (Debian package victoria-metrics): install it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            vm,
            f"-storageDataPath={tmp_path / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "victoria-metrics did not start"
            time.sleep(0.1)
        body = "\n".join(iter_import_lines(result, "vllm", step_s=15.0)) + "\n"
        assert (
            httpx.post(f"{base}/api/v1/import/prometheus", content=body, timeout=30).status_code
            == 204
        )
        httpx.get(f"{base}/internal/force_flush", timeout=10)
        got: dict[tuple[str, str], float] = {}
        deadline = time.monotonic() + 20
        while len(got) < len(result.ranks) and time.monotonic() < deadline:
            time.sleep(0.3)
            data = httpx.get(
                f"{base}/api/v1/query",
                timeout=10,
                params={
                    "query": 'vllm:prompt_tokens_total{job="skewscope-sim"}',
                    "time": f"{result.end_s:.3f}",
                },
            ).json()
            got = {
                (x["metric"]["instance"], x["metric"]["engine"]): float(x["value"][1])
                for x in data["data"]["result"]
            }
        for r in result.ranks:
            want = _expected_totals(result, r.instance, r.dp_rank)["prompt"]
            assert got[(f"127.0.0.1:{r.instance}", str(r.dp_rank))] == want
    finally:
        proc.terminate()
        proc.wait(timeout=10)
