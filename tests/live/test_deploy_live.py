"""The packaged pieces with the real tools: Debian's ``prometheus-alertmanager`` on the
configuration docs/monitoring.md gives (``amtool check-config`` passes on it), a real Prometheus
that loads the generated rules, scrapes a simulated skewed cluster live and sends its alerts
there, a webhook receiver run by the test, and ``skewscope watch`` started with the exact
arguments of deploy/kubernetes/deployment.yaml (only the Prometheus address, the listen address
and the history path point at this machine).

Truth: the wrong-weights scenario sends inst-1 1.8x its peers' requests (``truth_dict``). Every
wait is on a condition (a notification received, a probe answering, the process gone), bounded
by the simulated run's length, which moves one step per scrape of an instance (the live
``scrape`` clock: Prometheus sees the same run however late its scrapes are); Alertmanager's
group_wait is shortened from the documented 1 m to 1 s, the one change made to the documented
configuration.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from helpers.backends import running, scraped_after, wait_until
from helpers.binaries import need
from helpers.online_servers import Quiet, free_port
from helpers.online_servers import serve as http_serve
from skewscope.catalogue import LiveClock
from skewscope.frame import WINDOWS
from skewscope.monitor.rules import HOT_ALERT, STARVED_ALERT, RuleOptions, render_rules
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import load_scenario
from skewscope.sim.writers.live import serve
from skewscope.sim.writers.truth import truth_dict

ROOT = Path(__file__).parent.parent.parent
SPEED = 3.0
SCENARIO = "wrong-weights"


def documented_alertmanager_config() -> dict[str, Any]:
    """The YAML block of docs/monitoring.md's Alertmanager section."""
    text = (ROOT / "docs" / "monitoring.md").read_text()
    section = text.split("\n## Alertmanager", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/monitoring.md: no yaml block under ## Alertmanager"
    doc = yaml.safe_load(block.group(1))
    assert isinstance(doc, dict)
    return doc


class Receiver(Quiet):
    """Alertmanager's webhook: every notification body is kept."""

    got: list[dict[str, Any]]
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.lock:
            self.got.append(json.loads(body))
        self.send_response(200)
        self.end_headers()


@dataclass
class Watch:
    proc: subprocess.Popen[str]
    base: str  # http://127.0.0.1:PORT of its exporter
    out: list[str]


@dataclass
class Stack:
    notifications: list[dict[str, Any]]
    alertmanager: str
    hot_address: str  # inst-1's host:port, Prometheus' instance label
    watch: Watch

    def alerts(self, name: str) -> list[dict[str, Any]]:
        with Receiver.lock:
            return [
                a
                for n in self.notifications
                for a in n["alerts"]
                if a["labels"]["alertname"] == name
            ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prom, am = (
        need("prometheus", "prometheus"),
        need("prometheus-alertmanager", "prometheus-alertmanager"),
    )
    amtool = need("amtool", "prometheus-alertmanager")
    tmp = tmp_path_factory.mktemp("deploy-live")
    notes: list[dict[str, Any]] = []
    handler = type("Hook", (Receiver,), {"got": notes})
    with http_serve(handler) as hook_url:
        config = documented_alertmanager_config()
        (tmp / "documented.yml").write_text(yaml.safe_dump(config))
        check = subprocess.run(
            [amtool, "check-config", str(tmp / "documented.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        for r in config["receivers"]:
            for w in r.get("webhook_configs", []):
                w["url"] = f"{hook_url}/skewscope"
        for route in (config["route"], *config["route"].get("routes", [])):
            route["group_wait"] = "1s"
            route["group_interval"] = "1s"
        (tmp / "alertmanager.yml").write_text(yaml.safe_dump(config))
        am_port = free_port()
        am_url = f"http://127.0.0.1:{am_port}"
        am_cmd = [
            am,
            f"--config.file={tmp / 'alertmanager.yml'}",
            f"--storage.path={tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ]

        result = simulate(load_scenario(SCENARIO))
        truth = truth_dict(result)
        window = WINDOWS.choose(result.end_s - result.start_s) / SPEED
        (tmp / "rules.yml").write_text(
            render_rules(RuleOptions(dialects=("vllm",), window_s=window))
        )
        interval_ms = round(window * 1000 / 4)
        interval = f"{interval_ms}ms"
        prom_config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(tmp / "rules.yml")],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
            },
        }
        (tmp / "prometheus.yml").write_text(json.dumps(prom_config))
        port = free_port()
        prom_url = f"http://127.0.0.1:{port}"
        prom_cmd = [
            prom,
            f"--config.file={tmp / 'prometheus.yml'}",
            "--web.enable-lifecycle",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        with (
            running(am_cmd, tmp / "alertmanager.log") as amp,
            running(prom_cmd, tmp / "prometheus.log") as pp,
        ):
            wait_until(
                lambda: amp.poll() is None and httpx.get(f"{am_url}/-/ready").status_code == 200,
                f"Alertmanager (log: {tmp / 'alertmanager.log'})",
            )
            wait_until(
                lambda: pp.poll() is None and httpx.get(f"{prom_url}/-/ready").status_code == 200,
                f"Prometheus (log: {tmp / 'prometheus.log'})",
            )
            # each scrape of an instance is SPEED scrape intervals of simulated time on (SPEED x
            # wall time on a quiet machine): the run moves as Prometheus sees it, so a busy
            # machine's late scrapes cannot let it end before the rules have judged it
            cluster = serve(
                result,
                "vllm",
                live_clock=LiveClock.SCRAPE,
                step_s=interval_ms / 1000 * SPEED,
                grace_s=5.0,
            )
            try:
                address = {i: u.split("//", 1)[1].split("/", 1)[0] for i, u in cluster.urls.items()}
                prom_config["scrape_configs"] = [
                    {"job_name": SCENARIO, "static_configs": [{"targets": list(address.values())}]}
                ]
                (tmp / "prometheus.yml").write_text(json.dumps(prom_config))
                reloaded = time.time()
                assert httpx.post(f"{prom_url}/-/reload", timeout=30).status_code == 200
                # the deployed watch runs every 30 s: started once Prometheus holds two scrapes
                # of every target, its first run has data (else the second, 30 s on, would)
                wait_until(
                    lambda: scraped_after(prom_url, reloaded + 1.0, len(address), SCENARIO),
                    "two scrapes of every simulated instance",
                    timeout_s=60,
                )
                (hot_unit,) = truth["hot_units"]
                with deployed_watch(prom_url, tmp, []) as watch:
                    yield Stack(notes, am_url, address[hot_unit], watch)
            finally:
                cluster.stop()


def deployment_args() -> list[str]:
    dep = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return list(c["args"])


@contextlib.contextmanager
def deployed_watch(prom_url: str, tmp: Path, out: list[str]) -> Iterator[Watch]:
    """The Deployment's container command on this machine (its output lines kept in ``out``);
    killed at exit if a test did not stop it."""
    args = deployment_args()
    port = free_port()
    args[args.index("--prometheus") + 1] = prom_url
    args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
    env = {**os.environ, "SKEWSCOPE_HISTORY": str(tmp / "history.sqlite")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "skewscope.cli", "watch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield Watch(proc, f"http://127.0.0.1:{port}", out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=10)


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None


def test_hot_unit_alert_reaches_the_webhook_with_its_labels(stack: Stack) -> None:
    def fired() -> bool:
        return any(
            a["labels"].get("instance") == stack.hot_address and a["status"] == "firing"
            for a in stack.alerts(HOT_ALERT)
        )

    # a deadline, not a duration: the simulated run at SPEED, Prometheus' rule windows, and
    # room for a busy machine's late scrapes (the run waits for them)
    run_s = 2 * 200.0 / SPEED + 60.0
    wait_until(fired, f"{HOT_ALERT} for {stack.hot_address} at the webhook", timeout_s=run_s)
    alert = next(
        a for a in stack.alerts(HOT_ALERT) if a["labels"].get("instance") == stack.hot_address
    )
    assert alert["labels"]["level"] == "instance"
    assert alert["labels"]["kind"] == "count"
    assert alert["labels"]["job"] == SCENARIO
    assert "skewscope diagnose --prometheus" in alert["annotations"]["description"]
    runbook = alert["annotations"]["runbook_url"]  # the runbook travels with the alert
    assert runbook.endswith(f"/docs/runbooks/{HOT_ALERT}.md")
    assert (ROOT / "docs" / "runbooks" / f"{HOT_ALERT}.md").is_file()
    for other in stack.alerts(HOT_ALERT):  # nothing but the truth's unit is called hot
        assert other["labels"]["instance"] == stack.hot_address, other["labels"]


def test_a_starved_unit_inhibits_its_peers_hot_alert(stack: Stack) -> None:
    """The documented inhibit rule, in the real Alertmanager: alerts posted to its API for a
    group where one unit is starved and another hot, and the same hot alert in another job."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def alert(name: str, job: str, instance: str) -> dict[str, Any]:
        return {
            "labels": {
                "alertname": name,
                "job": job,
                "model_name": "m",
                "level": "instance",
                "instance": instance,
                "kind": "count",
            },
            "startsAt": now,
            "annotations": {"summary": "posted by the test"},
        }

    posted = [
        alert(STARVED_ALERT, "pool-a", "10.1.0.1:8000"),
        alert(HOT_ALERT, "pool-a", "10.1.0.2:8000"),
        alert(HOT_ALERT, "pool-b", "10.1.0.3:8000"),
    ]
    assert (
        httpx.post(f"{stack.alertmanager}/api/v2/alerts", json=posted, timeout=10).status_code
        == 200
    )

    def state(instance: str) -> dict[str, Any] | None:
        got = httpx.get(f"{stack.alertmanager}/api/v2/alerts", timeout=10).json()
        return next((a["status"] for a in got if a["labels"].get("instance") == instance), None)

    wait_until(
        lambda: (state("10.1.0.2:8000") or {}).get("state") == "suppressed",
        "the hot alert inhibited by its group's starved one",
    )
    assert state("10.1.0.2:8000")["inhibitedBy"]  # type: ignore[index]
    assert state("10.1.0.3:8000")["state"] == "active"  # type: ignore[index]

    def delivered(instance: str) -> bool:
        return any(
            a["labels"].get("instance") == instance
            for n in stack.notifications
            for a in n["alerts"]
        )

    wait_until(
        lambda: delivered("10.1.0.1:8000") and delivered("10.1.0.3:8000"),
        "the starved alert and the other job's hot alert at the webhook",
    )
    assert not delivered("10.1.0.2:8000")


def test_the_deployed_watch_is_ready_serves_and_stops_on_sigterm(stack: Stack) -> None:
    w = stack.watch
    wait_until(
        lambda: (r := _get(f"{w.base}/healthz")) is not None and r.status_code == 200,
        "/healthz of the deployed watch",
    )
    wait_until(
        lambda: (r := _get(f"{w.base}/readyz")) is not None and r.status_code == 200,
        "/readyz of the deployed watch",
        timeout_s=120,
    )
    metrics = httpx.get(f"{w.base}/metrics", timeout=10).text
    assert re.search(r'^skewscope_verdict\{verdict="[a-z_]+"\} 1\.0$', metrics, re.M)
    assert "skewscope_last_run_timestamp_seconds" in metrics
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=120) == 0, w.out[-10:]
    wait_until(
        lambda: bool(w.out) and w.out[-1] == "skewscope watch: stopped",
        f"the stop line (output: {w.out[-5:]})",
    )
