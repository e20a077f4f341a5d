"""A REAL sglang-router (and vllm-router) in front of the simulator's OpenAI-compatible
engines, the router and the engines scraped by a REAL Prometheus; ``skewscope diagnose
--prometheus`` finds the router's metrics by name and joins them to the engines' load.

Truth is what the test does: which keys it sends, which worker it fails, which prompts share a
prefix. Load is bounded: ``ROUNDS`` rounds of about 9 requests, one round a second. The
engines' replay stays at its start (a manual clock never moved), so their counters are the
routed requests alone; every wait is on a condition (a scrape of every target after the
requests), never a fixed sleep.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from helpers.backends import scraped_after, wait_until
from helpers.gateway_servers import base_urls, router, scraping_prometheus, sim_engines
from skewscope.cli import main
from skewscope.sim.writers.live import LiveCluster

ROUNDS = 30  # rounds of traffic, one a second (Prometheus' windows are wall time)
STEP = "3s"
PREFIX = "You are a careful assistant for the ACME support desk. " * 25


def _routed(cluster: LiveCluster) -> dict[str, float]:
    return {
        u.removeprefix("http://").removesuffix("/metrics"): cluster.routed[i].finished
        for i, u in cluster.urls.items()
    }


class Fleet:
    """Engines, router and Prometheus of one test."""

    def __init__(self, cluster: LiveCluster, router: str, prom: str, targets: int) -> None:
        self.cluster, self.router, self.prom, self.targets = cluster, router, prom, targets
        self.client = httpx.Client(timeout=10)

    def send(self, prompt: str, key: str | None = None) -> int:
        headers = {"X-SMG-Routing-Key": key, "X-Session-Id": key} if key else {}
        r = self.client.post(
            f"{self.router}/v1/completions",
            headers=headers,
            json={"model": "m", "prompt": prompt, "max_tokens": 4},
        )
        return r.status_code

    def scraped(self, what: str) -> None:
        """Wait until Prometheus has scraped every target since now (what was sent before is
        in its TSDB): a condition, however slow a busy machine makes the scrapes."""
        t = time.time()
        wait_until(
            lambda: scraped_after(self.prom, t, self.targets),
            f"a scrape of all {self.targets} targets after {what}",
            timeout_s=60,
        )

    def run(
        self, one_round: Callable[[int], None], events: dict[int, Callable[[], None]] | None = None
    ) -> dict[str, object]:
        """``ROUNDS`` rounds of traffic on a one-second grid (a late round starts at once; the
        count of requests never depends on the machine's speed), each event before its round;
        then, once Prometheus has scraped the last answers, diagnose the range."""
        start = time.time()
        for r in range(ROUNDS):
            time.sleep(max(0.0, start + r - time.time()))
            if events and r in events:
                events[r]()
            one_round(r)
        end = time.time()
        self.scraped("the last round")
        out = self.cluster_dir / "report.json"
        code = main(
            [
                "diagnose",
                "--prometheus",
                self.prom,
                "--start",
                f"{start:.3f}",
                "--end",
                f"{end:.3f}",
                "--step",
                STEP,
                "--format",
                "json",
                "-o",
                str(out),
            ]
        )
        assert code == 0
        return json.loads(out.read_text())  # type: ignore[no-any-return]

    cluster_dir: Path


@pytest.fixture
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    kind, policy, extra = request.param
    with sim_engines("idle", grace_s=300) as cluster:
        workers = base_urls(cluster)
        with router(kind, workers, tmp_path, policy, extra) as (url, metrics):
            targets = [metrics, *(w.removeprefix("http://") for w in workers)]
            with scraping_prometheus(targets, tmp_path) as prom:
                f = Fleet(cluster, url, prom, len(targets))
                f.cluster_dir = tmp_path
                # every worker's counters exist before the range (increase() cannot count a
                # series' first sample), then a scrape of every target
                for j in range(8):
                    assert f.send(f"warm-up {j}") == 200
                f.scraped("the warm-up")
                yield f
                f.client.close()
    # the router never reached for the network (a model_path in /model_info makes it try the
    # Hugging Face hub for a tokenizer)
    assert "huggingface" not in (tmp_path / "router.log").read_text().lower()


STICKY = [("sglang-router", "manual", ()), ("vllm-router", "consistent_hash", ())]


def _pinned_keys(fleet: Fleet) -> tuple[list[str], str, list[str]]:
    """Three routing keys the router pinned on one worker (the hot one), and one key pinned on
    each other worker (the background: one-off keys hash by chance, and a chance pile-up on a
    peer within a 3 s window read as a second hot unit 1 run in 3)."""
    by_worker: dict[str, list[str]] = {}
    workers = set(_routed(fleet.cluster))
    for k in range(200):
        before = _routed(fleet.cluster)
        assert fleet.send("hello there", f"tenant-{k}") == 200
        after = _routed(fleet.cluster)
        w = next(u for u in after if after[u] > before[u])
        by_worker.setdefault(w, []).append(f"tenant-{k}")
        full = [u for u, keys in by_worker.items() if len(keys) >= 3]
        if full and set(by_worker) == workers:
            hot = full[0]
            return by_worker[hot][:3], hot, [by_worker[u][0] for u in sorted(workers - {hot})]
    raise AssertionError(f"no key layout found in 200 keys: {by_worker}")


# Opt-in (-m heavy): two routers started and 30 s of traffic each (the default suite is near
# its budget). Deterministic: every request's worker is known before the run (pinned keys).
@pytest.mark.heavy
@pytest.mark.parametrize("fleet", STICKY, indirect=True, ids=["sglang-manual", "vllm-hash"])
def test_sticky_routing_keys(fleet: Fleet) -> None:
    heavy, hot, light = _pinned_keys(fleet)

    def one_round(r: int) -> None:  # per round: 6 requests to the hot worker, 2 to each other
        for key in heavy * 2:
            fleet.send("summarise the ticket", key)
        for key in light * 2:
            fleet.send("summarise the ticket", key)

    doc = fleet.run(one_round)
    assert doc["verdict"] == "imbalanced", doc["notes"]
    assert doc["hot_units"] == [hot], doc["gateway"]
    finding = doc["findings"][0]
    assert finding["kind"] == "count"
    assert finding["root_causes"][0]["key"] == "sticky_sessions"
    gw = doc["gateway"]
    assert f"The gateway ({gw['source']}) sent" in finding["summary"]
    assert f"under {gw['policy']}" in finding["summary"]
    assert (gw["source"], gw["policy"]) in {
        ("sglang-router", "manual"),
        ("vllm-router", "consistent_hash"),
    }
    assert gw["policy_class"] == "sticky"
    row = next(u for u in gw["units"] if u["upstream"] == hot)
    assert row["unit"] == hot and row["router_share"] > 0.4
    assert abs(row["router_share"] - row["engine_share"]) < 0.1


@pytest.mark.parametrize(
    "fleet",
    [
        (
            "sglang-router",
            "round_robin",
            (
                "--health-failure-threshold",
                "2",
                "--health-success-threshold",
                "1",
                "--cb-failure-threshold",
                "2",
                "--cb-timeout-duration-secs",
                "60",
                "--retry-max-retries",
                "3",
            ),
        )
    ],
    indirect=True,
)
def test_failing_worker_is_a_health_check_and_the_breaker_keeps_it_out(fleet: Fleet) -> None:
    sick = base_urls(fleet.cluster)[3]
    sick_unit = sick.removeprefix("http://")

    def health(ok: bool) -> Callable[[], None]:
        return lambda: httpx.post(f"{sick}/sim/health", json={"healthy": ok}).raise_for_status()

    def one_round(r: int) -> None:
        for j in range(9):
            fleet.send(f"question {r}-{j}")

    # it fails before round 4 and recovers before round 16; the breaker's 60 s cool-down
    # outlasts the run
    doc = fleet.run(one_round, {4: health(False), 16: health(True)})
    assert doc["verdict"] == "imbalanced", doc["notes"]
    assert doc["starved_units"] == [sick_unit]
    finding = next(f for f in doc["findings"] if sick_unit in f["units"])
    assert finding["root_causes"][0]["key"] == "health_check"
    assert f"The gateway marked {sick_unit}" in finding["summary"]
    assert "circuit-open" in finding["summary"] and "whole cool-down" in finding["summary"]
    row = next(u for u in doc["gateway"]["units"] if u["upstream"] == sick_unit)
    assert row["breaker_open_share"] > 0.4
    assert row["router_share"] < 0.15


@pytest.mark.parametrize("fleet", [("sglang-router", "cache_aware", ())], indirect=True)
def test_cache_aware_routing_captures_a_shared_prefix(fleet: Fleet) -> None:
    """Per round 8 prompts share a long prefix (cache-aware routing sends them all to the worker
    that holds it) and 2 do not. Where the router sends those depends on its trees' sizes: all
    on the prefix worker in most runs, but once, with 5 + 5, the prefix worker came out only
    heavier, not busier, which the diagnosis rightly judged chance. With 8 + 2 the prefix
    worker is hot by count wherever the 2 go."""

    def one_round(r: int) -> None:
        for j in range(8):
            fleet.send(f"{PREFIX} customer question {r}-{j}")
        for j in range(2):
            fleet.send(f"unrelated {r} {j} " + " ".join(f"w{r * 31 + j * 7 + i}" for i in range(9)))

    doc = fleet.run(one_round)
    assert doc["verdict"] == "imbalanced", doc["notes"]
    (hot,) = doc["hot_units"]
    finding = doc["findings"][0]
    assert finding["root_causes"][0]["key"] == "prefix_affinity"
    assert "under cache_aware" in finding["summary"]
    assert doc["gateway"]["policy_class"] == "prefix"
    row = next(u for u in doc["gateway"]["units"] if u["upstream"] == hot)
    assert row["router_share"] > 0.4


@pytest.mark.parametrize("fleet", [("sglang-router", "round_robin", ())], indirect=True)
def test_balanced_round_robin(fleet: Fleet) -> None:
    def one_round(r: int) -> None:
        for j in range(8):
            fleet.send(f"question {r}-{j}")

    doc = fleet.run(one_round)
    assert doc["verdict"] == "balanced", doc["notes"]
    gw = doc["gateway"]
    assert gw["policy"] == "round_robin" and gw["not_in_gateway"] == []
    for row in gw["units"]:
        assert row["unit"] == row["upstream"]
        assert abs(row["router_share"] - 0.25) < 0.05
        assert abs(row["engine_share"] - 0.25) < 0.05
