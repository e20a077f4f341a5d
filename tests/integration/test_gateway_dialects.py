"""The endpoint pickers (llm-d, Gateway API Inference Extension) and vLLM production-stack's
router as gateway evidence, read from a real Prometheus holding their history beside the
engines' (tests/helpers/gateway_history.py: names and labels of tests/data/gateway/*.prom, written
from the projects' sources; none of these routers runs here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.gateway_history import (
    HOSTS,
    LAG,
    SPAN,
    T_EPP,
    T_GIE,
    T_PS,
    WINDOW,
    gateway_history,
)
from helpers.online_history import Sample, to_openmetrics
from skewscope.catalogue import EPP_POLICY
from skewscope.cli import main
from skewscope.sources.gateway_router import load_router_prometheus

DATA = Path(__file__).parent.parent / "data" / "gateway"
SAMPLES = ("llm-d-epp.prom", "inference-extension-epp.prom", "production-stack-router.prom")


@pytest.fixture(scope="module")
def history() -> list[Sample]:
    return gateway_history()


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, history: list[Sample]) -> Iterator[str]:
    prometheus, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("gateway-prometheus")
    (tmp / "history.om").write_text(to_openmetrics(history))
    backfill(promtool, tmp / "history.om", tmp / "blocks", timeout_s=60)
    with serve_prometheus(prometheus, tmp / "blocks", tmp) as url:
        yield url


def test_history_uses_the_sources_names_and_labels(history: list[Sample]) -> None:
    """Every router series the history writes has a name and label set of the samples written
    from the projects' sources (engine series aside)."""
    known: dict[str, set[frozenset[str]]] = {}
    for f in SAMPLES:
        for fam in text_string_to_metric_families((DATA / f).read_text()):
            for s in fam.samples:
                known.setdefault(s.name, set()).add(frozenset(s.labels) - {"le"})
    routers = [s for s in history if s.labels and dict(s.labels).get("job") != "vllm"]
    assert routers
    for s in routers:
        labels = frozenset(dict(s.labels)) - {"job", "instance"}
        assert labels in known.get(s.name, set()), (s.name, sorted(labels))


def _diagnose(prom: str, t0: int, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:  # type: ignore[type-arg]
    code = main(
        [
            "diagnose",
            "--prometheus",
            prom,
            "--start",
            str(t0),
            "--end",
            str(t0 + SPAN),
            "--step",
            f"{WINDOW}s",
            "--selector",
            '{job="vllm"}',
            "--format",
            "json",
            *extra,
        ]
    )
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)  # type: ignore[no-any-return]


def test_llm_d_endpoint_picker_sends_more_and_decides_on_stale_load(
    prom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _diagnose(prom, T_EPP, capsys)
    gw = doc["gateway"]
    assert gw["source"] == "llm-d-epp" and gw["policy"] == EPP_POLICY
    assert gw["policy_class"] == "load_aware" and gw["load_polled"] is True
    by = {u["upstream"]: u for u in gw["units"]}
    assert set(by) == {"vllm-a", "vllm-b", "vllm-c", "vllm-d"}  # <pod>@0 folded into the pod
    assert by["vllm-c"]["unit"] == "vllm-c"
    assert by["vllm-c"]["router_share"] == pytest.approx(0.5, abs=0.02)
    assert by["vllm-c"]["engine_share"] == pytest.approx(0.5, abs=0.02)
    (hot,) = [f for f in doc["findings"] if f["units"] == ["vllm-c"]]
    assert hot["kind"] == "count" and hot["evidence"]["gateway"]["router_share"] > 0.45
    (stale,) = gw["stale_load"]
    assert stale["unit"] == "vllm-c" and stale["lag_windows"] == LAG
    assert gw["pool"] == {"ready endpoints": 4, "average KV utilisation": 0.4, "average queue": 1}
    # the failed scheduling attempts (empty endpoint labels) are no upstream
    assert "" not in by
    # llm-d's picker exports the Inference Extension's names too: one router, no "several"
    assert not [n for n in doc["notes"] if "several routers" in n]
    assert main(
        [
            "diagnose",
            "--prometheus",
            prom,
            "--start",
            str(T_EPP),
            "--end",
            str(T_EPP + SPAN),
            "--step",
            f"{WINDOW}s",
            "--selector",
            '{job="vllm"}',
        ]
    ) in (0, 1)
    text = capsys.readouterr().out
    assert "stale load: llm-d-epp under epp-scorers saw vllm-c's queue off by" in text


def test_production_stack_router_session_policy_and_health(
    prom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _diagnose(prom, T_PS, capsys)
    gw = doc["gateway"]
    assert gw["source"] == "vllm-production-stack" and gw["policy"] == "session"
    by = {u["upstream"]: u for u in gw["units"]}
    assert set(by) == set(HOSTS) and all(u["unit"] == h for h, u in by.items())
    assert by[HOSTS[2]]["requests"] == pytest.approx(3 * SPAN, rel=0.02)
    assert by[HOSTS[3]]["unhealthy_share"] == pytest.approx(4 / 20, abs=0.03)
    assert by[HOSTS[2]]["router_load"] == pytest.approx(12.0, abs=0.5)  # the router's in-flight
    assert gw["load_polled"] is False and gw["stale_load"] == []
    (hot,) = [f for f in doc["findings"] if f["units"] == [HOSTS[2]]]
    assert hot["root_causes"][0]["key"] == "sticky_sessions"
    shares = by[HOSTS[3]]["share_series"]
    assert shares[11] is None or shares[11] == 0  # sent nothing while held unhealthy
    assert any("unhealthy" in n for n in doc["notes"])


def test_production_stack_routers_engine_names_are_not_an_engine(
    prom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --selector: the router's vllm:num_requests_running{server} copies share the engines'
    names, and still only the four engines are units (a series with ``server`` is a router's)."""
    code = main(
        [
            "diagnose",
            "--prometheus",
            prom,
            "--start",
            str(T_PS),
            "--end",
            str(T_PS + SPAN),
            "--step",
            f"{WINDOW}s",
            "--format",
            "json",
        ]
    )
    out = capsys.readouterr().out
    assert code in (0, 1), out
    doc = json.loads(out)
    assert {u["unit"] for u in doc["units"]} == set(HOSTS)
    assert doc["hot_units"] == [HOSTS[2]]


def test_inference_extension_ports_are_dp_ranks(
    prom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod's scheduling counts per port are its DP ranks (ascending port order) and join the
    engines' DP units; the hot rank's finding is ranked on what the picker sent it."""
    doc = _diagnose(prom, T_GIE, capsys, "--level", "dp")
    gw = doc["gateway"]
    assert gw["source"] == "inference-extension-epp"
    joined = {u["upstream"]: u["unit"] for u in gw["units"]}
    assert joined == {f"vllm-a@{r}": f"vllm-a/dp{r}" for r in range(4)}
    (hot,) = [f for f in doc["findings"] if f["units"] == ["vllm-a/dp2"]]
    assert "gateway" in hot["evidence"]
    assert gw["pool"]["ready endpoints"] == 4


def test_no_router_in_the_range_is_no_gateway_evidence(prom: str) -> None:
    assert (
        load_router_prometheus(prom, start=T_EPP - 7 * 24 * 3600, end=T_EPP - 7 * 24 * 3600 + SPAN)
        is None
    )


def test_watch_shows_and_exports_the_gateway_share(prom: str) -> None:
    """watch --prometheus reads the router beside the engines every run: the live view has a
    gateway-share column for the hot unit and the exporter a skewscope_gateway_share series."""
    from rich.console import Console

    from skewscope.cli import build_parser
    from skewscope.cli.watch import build_source
    from skewscope.clock import ManualClock
    from skewscope.monitor import screen
    from skewscope.monitor.exporter import ReportCollector
    from skewscope.monitor.watch import Watcher

    args = build_parser().parse_args(
        [
            "watch",
            "--prometheus",
            prom,
            "--selector",
            '{job="vllm"}',
            "--last",
            f"{SPAN}s",
            "--step",
            f"{WINDOW}s",
        ]
    )
    source = build_source(args, float(SPAN), float(WINDOW))
    w = Watcher(source, last_s=SPAN, every_s=30, clock=ManualClock(T_PS + SPAN))
    assert w.run_once()
    shares = {
        tuple(s.labels[k] for k in ("unit", "level", "source")): s.value
        for fam in ReportCollector(lambda: w.status).collect()
        if fam.name == "skewscope_gateway_share"
        for s in fam.samples
    }
    assert shares[HOSTS[2], "instance", "vllm-production-stack"] == pytest.approx(0.52, abs=0.02)
    assert len(shares) == len(HOSTS)
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(screen.render(w.status))
    text = console.export_text()
    assert "gateway share" in text
    row = next(r for r in text.splitlines() if r.startswith(f"│ {HOSTS[2]} "))
    assert f"{shares[HOSTS[2], 'instance', 'vllm-production-stack']:.0%}" in row
