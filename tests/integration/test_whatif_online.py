"""``skewscope whatif --prometheus``: built-in skew scenarios simulated, their OpenMetrics history
backfilled into a REAL Prometheus with promtool, and replayed from what the metrics show only
(per-window counters and gauges, length / TTFT / queue / inter-token-latency histograms). The
replay of the current routing must reproduce the observed metrics within the stated error, and
the candidate that removes the scenario's known cause must be predicted to cut the load ratio
and TTFT P99."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.report_schema import assert_valid
from helpers.sim_scrape import scrape_run
from skewscope.cli import main
from skewscope.config import WHATIF
from skewscope.report.whatif import document
from skewscope.sim.engine import START_S, simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.workload import generate
from skewscope.sources.online_workload import scrape_workload
from skewscope.sources.scrape import ScrapeRun

# scenario -> (dialect, the candidate that removes its cause); histories are written as vLLM
CASES: dict[str, tuple[str, str]] = {
    "wrong-weights": ("vllm", "fix_weights"),
    "dp-count": ("vllm", "dp:fix_weights"),
    "slow-device": ("vllm", "fix_weights"),
}
SESSIONS = "sticky-sessions"  # backfilled too: its gateway log carries the session keys
STEP = 1.0  # scrape interval of the backfilled history
WINDOW = "5s"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from skewscope.sim.writers.openmetrics import write_openmetrics

    prometheus, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("whatif-prom")
    for name in [*CASES, SESSIONS]:
        om = write_openmetrics(
            simulate(builtin_scenarios()[name]), tmp / f"{name}.om", "vllm", STEP, job=name
        )
        backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prometheus, tmp / "blocks", tmp) as url:
        yield url


def whatif_online(url: str, name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    sc = builtin_scenarios()[name]
    argv = [
        "whatif",
        "--prometheus",
        url,
        "--start",
        str(START_S),
        "--end",
        str(START_S + sc.duration_s),
        "--step",
        WINDOW,
        "--selector",
        f'{{job="{name}"}}',
        "--format",
        "json",
        "--jobs",
        "1",
        *extra,
    ]
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert_valid(doc, "whatif")
    return doc


@pytest.mark.parametrize("name", sorted(CASES))
def test_online_replay_reproduces_metrics_and_the_fix_is_predicted_to_help(
    name: str, prom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # the cheapest candidate lists that hold the fix (fix_weights is always added when due)
    doc = whatif_online(
        prom, name, capsys, "--policies", "round_robin", "--dp-policies", "round_robin"
    )
    for metric in ("ttft_p99_ms", "queue_wait_p95_ms", "max_over_median_load"):
        c = doc["calibration"][metric]
        assert c["observed"] is not None and c["replayed"] is not None, (metric, c)
        close = abs(c["replayed"] - c["observed"]) <= max(
            WHATIF.calibration_max_error * abs(c["observed"]),
            WHATIF.calibration_floor_steps * doc["service_model"]["step"]["fixed_ms"]
            if metric.endswith("_ms")
            else WHATIF.calibration_floor_ratio,
        )
        assert close and c["ok"], (metric, c)
    assert doc["trusted"] is True, doc["notes"]
    by = {p["name"]: p["predicted"] for p in doc["policies"]}
    cur, fix = by["current"], by[CASES[name][1]]
    assert fix["ttft_p99_ms"] < 0.7 * cur["ttft_p99_ms"]
    assert fix["max_over_median_load"] < cur["max_over_median_load"] - 0.1
    assert doc["recommended"] != "current"
    codes = {n["code"] for n in doc["note_facts"]}
    assert {"whatif_through_buckets", "whatif_online_workload"} <= codes
    assert any("histograms" in n for n in doc["notes"])


def scraped(name: str, dialect: str = "vllm", every_s: float = 2.0) -> ScrapeRun:
    """What scraping every simulated instance's /metrics every ``every_s`` over the run would
    collect: the simulator's exposition text at each time, parsed by the scrape path's parser
    (deterministic: no wall clock)."""
    result = simulate(builtin_scenarios()[name])
    return scrape_run(result, dialect, every_s, float(WINDOW.removesuffix("s")))


def test_scrape_path_replay_reproduces_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    """The same check through the scrape reduction (snapshots -> evidence and histograms)."""
    from skewscope.whatif.online import whatif_online

    we = scrape_workload(scraped("wrong-weights"))
    assert {"prompt_length", "output_length", "ttft", "queue_time", "itl"} <= set(we.buckets)
    assert we.kv_config and we.held_at_end
    doc = document(whatif_online(we, "scrape", ("round_robin",), ()))
    assert_valid(doc, "whatif")
    assert doc["trusted"] is True, doc["calibration"]
    by = {p["name"]: p["predicted"] for p in doc["policies"]}
    assert by["fix_weights"]["ttft_p99_ms"] < 0.7 * by["current"]["ttft_p99_ms"]
    assert by["fix_weights"]["max_over_median_load"] < by["current"]["max_over_median_load"] - 1


def test_whatif_scrape_cli_reads_live_endpoints(capsys: pytest.CaptureFixture[str]) -> None:
    """``--scrape`` end to end on live simulated endpoints (a short run: the command works and
    its report is valid; the calibration is checked above on a whole run). Each scrape is 10
    simulated seconds on: the 10 rounds see 100 s of the run however late they are."""
    from skewscope.catalogue import LiveClock
    from skewscope.sim.writers.live import serve

    result = simulate(builtin_scenarios()["wrong-weights"])
    with serve(result, "vllm", live_clock=LiveClock.SCRAPE, step_s=10.0, grace_s=10.0) as cluster:
        urls = [
            (u if u.endswith("/metrics") else u + "/metrics").replace(
                "http://", "http://user:S3cretPASSWORD@", 1
            )
            for u in cluster.urls.values()
        ]
        code = main(
            [
                "whatif",
                "--scrape",
                *urls,
                "--duration",
                "5s",
                "--interval",
                "0.5s",
                "--format",
                "json",
                "--jobs",
                "1",
                "--policies",
                "round_robin",
            ]
        )
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert_valid(doc, "whatif")
    assert doc["instances"] == 4 and [p["name"] for p in doc["policies"]][:2] == [
        "current",
        "round_robin",
    ]
    # the URLs' credentials (the endpoints ignore them) are not in the report's source label
    assert "S3cretPASSWORD" not in out.out + out.err and doc["source"].count("***@") == 4


def access_log(name: str, path: Path) -> Path:
    """The nginx log (key=value lines) a gateway in front of the simulated run would write:
    each request's time, upstream (the instance label's host:port) and session header. The
    session ids are the simulated workload's own (drawn by the same seeded generator)."""
    sc = builtin_scenarios()[name]
    result = simulate(sc)
    wl = generate(
        sc.workload,
        sc.duration_s,
        np.random.default_rng(np.random.SeedSequence(sc.seed).spawn(3)[0]),
    )
    rq = result.requests
    assert np.allclose(wl.arrival_s + result.start_s, rq["arrival_s"].to_numpy())
    lines = [
        f"msec={t:.3f} upstream_addr=127.0.0.1:{inst} http_x_session_id=user-{s} request_length=900"
        for t, inst, s in zip(
            rq["arrival_s"].to_list(), rq["instance"].to_list(), wl.session.tolist(), strict=True
        )
        if inst is not None
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sessions_from_the_access_log_replay_session_policies(
    prom: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One heavy client pinned by stickiness: with the gateway's session keys, consistent_hash
    and cache_aware are replayed on them — consistent hashing keeps the heavy key on one unit,
    so it does not fix the skew, while round robin does. Without the log they are left out."""
    policies = "round_robin,consistent_hash,cache_aware"
    plain = whatif_online(prom, SESSIONS, capsys, "--policies", policies)
    assert [p["name"] for p in plain["policies"]][:2] == ["current", "round_robin"]
    assert not {"consistent_hash", "cache_aware"} & {p["name"] for p in plain["policies"]}
    assert "whatif_no_sessions_online" in {n["code"] for n in plain["note_facts"]}
    assert any("--access-log" in n for n in plain["notes"])
    log = access_log(SESSIONS, tmp_path / "nginx.log")
    doc = whatif_online(prom, SESSIONS, capsys, "--policies", policies, "--access-log", str(log))
    by = {p["name"]: p["predicted"] for p in doc["policies"]}
    assert {"consistent_hash", "cache_aware"} <= set(by)
    sessions = [n for n in doc["note_facts"] if n["code"] == "whatif_sessions"]
    assert [(n["keys"], n["key_name"]) for n in sessions] == [(64, "http_x_session_id")]
    assert any(n.startswith("sessions: 64 distinct http_x_session_id keys") for n in doc["notes"])
    assert doc["trusted"] is True
    assert by["round_robin"]["max_over_median_load"] < 1.3
    assert by["consistent_hash"]["max_over_median_load"] > 2.0  # the heavy key stays pinned
    assert by["round_robin"]["ttft_p99_ms"] < 0.2 * by["consistent_hash"]["ttft_p99_ms"]


def test_credentials_in_the_prometheus_url_are_not_in_any_output(
    prom: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--prometheus http://user:PASSWORD@host`` (Prometheus ignores the basic auth it was not
    configured for): the report's source label — header, JSON ``source``, ``-o`` files — is the
    redacted URL, never the password."""
    secret = "S3cretPASSWORD"
    url = prom.replace("http://", f"http://user:{secret}@", 1)
    doc = whatif_online(
        url, "wrong-weights", capsys, "--policies", "round_robin", "--dp-policies", "round_robin"
    )
    assert secret not in json.dumps(doc) and "***@" in doc["source"]
    sc = builtin_scenarios()["wrong-weights"]
    for fmt in ("md", "html"):
        out = tmp_path / f"w.{fmt}"
        code = main(
            [
                "whatif",
                "--prometheus",
                url,
                "--start",
                str(START_S),
                "--end",
                str(START_S + sc.duration_s),
                "--step",
                WINDOW,
                "--selector",
                '{job="wrong-weights"}',
                "--jobs",
                "1",
                "--policies",
                "round_robin",
                "--dp-policies",
                "round_robin",
                "-o",
                str(out),
            ]
        )
        seen = capsys.readouterr()
        assert code == 0, seen.err
        assert secret not in out.read_text() + seen.out + seen.err
