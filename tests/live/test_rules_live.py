"""Opt-in wall-clock smoke test (``-m heavy``): the generated rules in a REAL Prometheus
scraping live simulated clusters. The default suite evaluates the same rules on the same
scenarios at explicit instants instead (tests/integration/test_rules_backtest.py): no wall clock,
no race with a busy machine.

Every built-in scenario is served at once (``sim.writers.live``, the code behind ``simulate
--serve``), one scrape job per scenario, so one Prometheus judges them all in about a minute.
Time runs ``SPEED`` x faster than wall time (each scrape of an instance is ``SPEED`` scrape
intervals of simulated time on: the live ``scrape`` clock, so late scrapes lose none of a run),
so the rule window is the diagnosis' window for the run divided by ``SPEED``; ``for`` and the
look-back follow from the thresholds. The expected
alerts come from each run's ground truth (``truth_dict``), never from this file: each skew
scenario alerts on its hot (or starved) unit with the right level and kind, and the balanced,
idle and transient scenarios never alert.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.backends import running, wait_until
from helpers.binaries import need
from helpers.online_servers import free_port
from skewscope.catalogue import LiveClock
from skewscope.frame import WINDOWS
from skewscope.monitor.rules import HOT_ALERT, STARVED_ALERT, RuleOptions, render_rules
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios, load_scenario
from skewscope.sim.writers.live import LiveCluster, serve
from skewscope.sim.writers.truth import truth_dict
from skewscope.sources.dialects import DIALECTS

# 3x wall time: a run's rule window is 1.7 s of wall time, four scrapes. At 4x one CI run in
# many saw a unit's alert never fire (scrapes of 14 live clusters and the rules on 2 cores).
SPEED = 3.0
DIALECT = "vllm"
pytestmark = pytest.mark.heavy
# As in test_rules_backtest.py: transient-burst is a skew at this window by the alerts'
# horizon, stale-load a pattern the rules do not have; smoke-tested: the truth's units alert,
# balanced and idle stay quiet.
NOT_JUDGED = {"transient-burst", "stale-load"}
RANK = DIALECTS[DIALECT].rank_label


Seen = dict[tuple[str, ...], Counter[str]]
# Per job, the alerts each poll saw when they changed: (seconds since the first poll,
# [(alert, instance, rank, level, kind, state)]), to tell in a failure what did happen.
Timeline = dict[str, list[tuple[float, list[tuple[str, ...]]]]]


@dataclass
class Served:
    truth: dict[str, Any]
    cluster: LiveCluster
    address: dict[str, str]  # instance name -> host:port (Prometheus' instance label)


def _address(url: str) -> str:
    return url.split("//", 1)[1].split("/", 1)[0]


@pytest.fixture(scope="module")
def fired(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Served], Seen, Timeline]]:
    """Serve every scenario, run Prometheus on the rules, and count, per firing alert (job,
    alert, instance, rank, level), the polls that saw it with each ``kind``; keep each job's
    alert timeline for the failure messages."""
    prom = need("prometheus", "prometheus")
    tmp = tmp_path_factory.mktemp("rules-live")
    results = {n: simulate(load_scenario(n)) for n in sorted(builtin_scenarios())}
    # the window the diagnosis judges most runs by (as test_rules_backtest.py)
    chosen = [WINDOWS.choose(r.end_s - r.start_s) for r in results.values()]
    sim_window = max(set(chosen), key=chosen.count)
    window = sim_window / SPEED
    (tmp / "rules.yml").write_text(render_rules(RuleOptions(dialects=(DIALECT,), window_s=window)))
    served: dict[str, Served] = {}
    interval_ms = round(window * 1000 / 4)
    interval = f"{interval_ms}ms"
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(tmp / "rules.yml")],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        prom,
        f"--config.file={tmp / 'prometheus.yml'}",
        "--web.enable-lifecycle",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    seen: Seen = {}
    timeline: Timeline = {}
    with running(cmd, tmp / "prometheus.log") as proc:
        # Prometheus first, then the clusters (their clock starts when they serve), then the
        # scrape jobs by a config reload: no simulated time is lost to Prometheus' start-up.
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/-/ready").status_code == 200,
            f"Prometheus (log: {tmp / 'prometheus.log'})",
        )
        try:
            for name, result in results.items():
                # SPEED x wall time on a quiet machine, stepped per scrape: a busy machine's late
                # scrapes cannot let a run end before the rules have judged it
                cluster = serve(
                    result,
                    DIALECT,
                    live_clock=LiveClock.SCRAPE,
                    step_s=interval_ms / 1000 * SPEED,
                    grace_s=5.0,
                )
                served[name] = Served(
                    truth_dict(result), cluster, {i: _address(u) for i, u in cluster.urls.items()}
                )
            config["scrape_configs"] = [
                {"job_name": name, "static_configs": [{"targets": list(s.address.values())}]}
                for name, s in served.items()
            ]
            (tmp / "prometheus.yml").write_text(json.dumps(config))
            assert httpx.post(f"{url}/-/reload", timeout=30).status_code == 200
            t0 = time.monotonic()
            while not all(s.cluster.stopped for s in served.values()):
                time.sleep(0.5)
                alerts = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
                now: dict[str, list[tuple[str, ...]]] = {name: [] for name in served}
                for a in alerts:
                    lab = a["labels"]
                    key = (
                        lab["job"],
                        lab["alertname"],
                        lab["instance"],
                        lab.get(RANK or "", ""),
                        lab["level"],
                    )
                    now[lab["job"]].append((*key[1:], lab.get("kind", ""), a["state"]))
                    if a["state"] == "firing":
                        seen.setdefault(key, Counter())[lab.get("kind", "")] += 1
                for name, states in now.items():
                    past = timeline.setdefault(name, [])
                    if not past or past[-1][1] != sorted(states):
                        past.append((round(time.monotonic() - t0, 1), sorted(states)))
        finally:
            for s in served.values():
                s.cluster.stop()
    yield served, seen, timeline


def _expected(s: Served) -> dict[tuple[str, ...], str]:
    """(alert, instance address, rank, level) -> kind, as the truth asks for."""
    t = s.truth
    out = {}
    for alert, units in ((HOT_ALERT, t["hot_units"]), (STARVED_ALERT, t["idle_units"])):
        for unit in units:
            inst, _, rank = unit.partition("/dp")
            kind = t["kind"] if alert == HOT_ALERT else ""
            out[(alert, s.address[inst], rank, t["level"])] = kind
    return out


def _story(name: str, timeline: Timeline, served: dict[str, Served]) -> str:
    """The job's alert changes and its clusters' addresses, for a failure message."""
    return f"timeline {timeline.get(name)}; units {served[name].address}"


def test_skew_scenarios_alert_on_their_unit(
    fired: tuple[dict[str, Served], Seen, Timeline],
) -> None:
    """The truth's units alert, at the truth's level; the kind the alert carried most of the
    time is the truth's (a label flip restarts ``for``, so it is rare, not impossible)."""
    served, seen, timeline = fired
    skewed = {
        n: s
        for n, s in served.items()
        if s.truth["verdict"] == "imbalanced" and n not in NOT_JUDGED
    }
    assert skewed, "no skew scenario among the built-ins"
    for name, s in skewed.items():
        got = {
            k[1:]: kinds
            for k, kinds in seen.items()
            if k[0] == name and k[1] in (HOT_ALERT, STARVED_ALERT)
        }
        want = _expected(s)
        story = _story(name, timeline, served)
        assert set(want) <= set(got), f"{name}: fired {sorted(got)}, truth {sorted(want)}; {story}"
        for key, kind in want.items():
            assert got[key].most_common(1)[0][0] == kind, f"{name}: kinds {got[key]}; {story}"


def test_quiet_scenarios_never_alert(fired: tuple[dict[str, Served], Seen, Timeline]) -> None:
    served, seen, timeline = fired
    quiet = [
        n for n, s in served.items() if s.truth["verdict"] != "imbalanced" and n not in NOT_JUDGED
    ]
    assert {"balanced", "idle"} <= set(quiet)
    for name in quiet:
        assert not [k for k in seen if k[0] == name], (
            f"{name} alerted: {sorted(seen)}; {_story(name, timeline, served)}"
        )


def test_rules_file_is_what_prometheus_loaded(tmp_path: Path) -> None:
    """The CLI writes the same rules the library renders (the live test loads the latter)."""
    from skewscope.cli import main

    out = tmp_path / "r.yml"
    assert main(["rules", "--dialect", DIALECT, "--window", "2s", "-o", str(out)]) == 0
    assert out.read_text() == render_rules(RuleOptions(dialects=(DIALECT,), window_s=2.0))
