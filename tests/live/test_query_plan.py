"""The shared query plan (``prom_plan``: the instance level worked out from the rank level, each
histogram's buckets fetched once) gives the report and tables the former per-level plan gave,
with fewer queries, on real Prometheus and VictoriaMetrics."""

from __future__ import annotations

import functools
import importlib.util
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.backends import backfill, running, serve_prometheus, wait_until
from helpers.binaries import need
from helpers.online_history import SPAN, T0, WINDOW, history, to_vm_import
from helpers.online_servers import free_port
from skewscope.cli import main
from skewscope.frame import Evidence
from skewscope.sources import prometheus as prom
from skewscope.sources.prom_client import PromClient

_REAL = prom.load_prometheus
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet_history.py"


def _fleet_module() -> Any:
    """benchmarks/fleet_history.py: the bench's vLLM fleet with known hot units."""
    spec = importlib.util.spec_from_file_location("fleet_history", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_history"] = module
    spec.loader.exec_module(module)
    return module


FLEET = _fleet_module()
# 48 instances x 4 ranks, 20 minutes: instance 42 hot as a whole, instance 7's rank 0 hot
SMALL = FLEET.Fleet(instances=48, ranks=4, span_s=1200)


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("fleet")
    om = tmp / "fleet.om"
    with om.open("w") as f:
        for chunk in FLEET.openmetrics_chunks(SMALL):
            f.write(chunk)
    backfill(need("promtool", "prometheus"), om, tmp / "blocks", timeout_s=300)
    with serve_prometheus(need("prometheus", "prometheus"), tmp / "blocks", tmp) as url:
        yield url


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every range query sent, in order."""
    seen: list[str] = []
    for name in ("query_range", "query_range_series"):
        real = getattr(PromClient, name)

        def record(self: PromClient, query: str, *args: float, _real: Any = real) -> Any:
            seen.append(query)
            return _real(self, query, *args)

        monkeypatch.setattr(PromClient, name, record)
    return seen


def _diagnose(
    url: str, out: Path, monkeypatch: pytest.MonkeyPatch, shared: bool, selector: str = ""
) -> str:
    monkeypatch.setattr(prom, "load_prometheus", functools.partial(_REAL, shared_plan=shared))
    code = main(
        [
            "diagnose",
            "--prometheus",
            url,
            "--start",
            str(FLEET.T0),
            "--end",
            str(FLEET.T0 + SMALL.span_s),
            "--selector",
            selector,
            "--format",
            "markdown",
            "-o",
            str(out),
            "--force",
        ]
    )
    assert code == 0
    return out.read_text()


def test_the_shared_plan_reports_what_the_per_level_plan_reported_on_a_fleet_with_hot_units(
    fleet_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent: list[str]
) -> None:
    old = _diagnose(fleet_url, tmp_path / "old.md", monkeypatch, shared=False)
    old_queries = list(sent)
    sent.clear()
    new = _diagnose(fleet_url, tmp_path / "new.md", monkeypatch, shared=True)
    assert _same_report(new, old)
    hot_instance = FLEET.instance_label(FLEET.HOT_INSTANCE)
    hot_rank = f"{FLEET.instance_label(FLEET.HOT_DP[0])}/dp{FLEET.HOT_DP[1]}"
    assert hot_instance in new and hot_rank in new
    # 15 signals: 5 counters, 4 gauges (KV's mean also per instance), 3 histograms' buckets,
    # 3 histograms' sums (their counts are the buckets' +Inf bucket); plus the duplicate check.
    # Before: every signal at both levels and a bucket-bound probe per histogram.
    assert len(sent) == 1 + 5 + 4 + 1 + 3 + 3
    assert len(old_queries) == 1 + 2 * 15 + 3
    assert not any("histogram_quantile" in q or "count by (le)" in q for q in sent)
    counted = {q.split("seconds_")[1].split('"')[0] for q in sent if "_seconds_" in q}
    assert counted == {"bucket", "sum"}  # no latency histogram's _count is fetched
    assert sum(q.startswith("avg by (instance)") for q in sent) == 1  # KV mean per instance


def test_the_query_count_does_not_grow_with_the_fleet(
    fleet_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent: list[str]
) -> None:
    _diagnose(fleet_url, tmp_path / "all.md", monkeypatch, shared=True)
    whole = len(sent)
    sent.clear()
    one = FLEET.instance_label(3)
    _diagnose(
        fleet_url, tmp_path / "one.md", monkeypatch, shared=True, selector=f'instance="{one}"'
    )
    assert len(sent) == whole == 17


_FIGURE = re.compile(r"-?[0-9][0-9,]*(?:\.([0-9]+))?")


def _same_report(a: str, b: str) -> bool:
    """The same report but for a figure's last shown digit: Prometheus sums a group in no
    fixed order, so a per-level plan's instance figure can differ from the rank sum in its
    last bits, and a mean on a rounding edge shows 32.4 in one run and 32.5 in another."""
    if _FIGURE.sub("#", a) != _FIGURE.sub("#", b):
        return False
    for x, y in zip(_FIGURE.finditer(a), _FIGURE.finditer(b), strict=True):
        if x.group() != y.group():
            digits = len(x.group(1) or "")
            if not digits or digits != len(y.group(1) or ""):  # names, counts: exact
                return False
            va, vb = (float(m.group().replace(",", "")) for m in (x, y))
            if abs(va - vb) > 1.01 * 10**-digits:
                return False
    return True


def _tables(ev: Evidence) -> dict[str, dict[tuple[Any, ...], Any]]:
    out = {}
    for name, frame in (("instance", ev.instance), ("dp", ev.dp)):
        if frame is None:
            continue
        for row in frame.df.iter_rows(named=True):
            out[(name, row["unit"], row["window_start_s"])] = row
    return out  # type: ignore[return-value]


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)
    return a == b


@pytest.mark.parametrize(
    "job", ["vllm-dp", "vllm-scale", "sglang", "sglang-dpa", "mindie", "dynamo", "llm-d"]
)
def test_both_plans_give_the_same_tables_for_every_dialect_in_the_history(
    backend: str, job: str
) -> None:
    """The session history: a counter reset, a rank that joins late, spellings with ``:`` and
    ``_``, SGLang's copies per TP rank, Dynamo's worker labels, llm-d's ``-rank-<n>`` units."""
    got = {
        shared: prom.load_prometheus(
            backend,
            start=T0,
            end=T0 + SPAN,
            step_s=WINDOW,
            selector=f'job="{job}"',
            shared_plan=shared,
        )
        for shared in (True, False)
    }
    new, old = _tables(got[True]), _tables(got[False])
    assert new.keys() == old.keys() and new
    for key, row in new.items():
        assert row.keys() == old[key].keys()
        for col, value in row.items():
            assert _close(value, old[key][col]), (key, col, value, old[key][col])
    assert got[True].notes == got[False].notes


# --- a mean's count from its buckets' +Inf, and the spare _count query ------------------------

TTFT = "time_to_first_token_seconds"


def _variant(job: str, keep: Any) -> list[Any]:
    """The session history's vLLM job as ``job``, without the samples ``keep`` refuses."""
    out = []
    for s in history():
        labels = dict(s.labels)
        if labels.get("job") == "vllm-dp" and keep(
            s.name.split(":")[-1].removeprefix("vllm_"), labels
        ):
            out.append(type(s)(s.name, tuple(sorted({**labels, "job": job}.items())), s.t, s.value))
    return out


VARIANTS = {  # job: which samples it keeps, and whether the ttft _count query must be sent
    "full": (lambda n, lab: True, False),
    # a bucket set without +Inf: no count from the buckets, the spare query answers
    "no-inf": (lambda n, lab: not (n == f"{TTFT}_bucket" and lab["le"] == "+Inf"), True),
    # one rank without +Inf: the +Inf series do not cover every _sum group
    "one-rank-no-inf": (
        lambda n, lab: (
            not (
                n == f"{TTFT}_bucket"
                and lab["le"] == "+Inf"
                and lab["instance"] == "b:8000"
                and lab["engine"] == "1"
            )
        ),
        True,
    ),
    # only _sum and _count, as a summary exposes: no percentile, the count queried as before
    "no-buckets": (lambda n, lab: n != f"{TTFT}_bucket", True),
}


@pytest.fixture(scope="module")
def variants_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real VictoriaMetrics holding the variants (its own: the session history stays as is)."""
    tmp = tmp_path_factory.mktemp("variants")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        need("victoria-metrics", "victoria-metrics"),
        f"-storageDataPath={tmp / 'vm'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.disableCache",
    ]
    samples = [s for job, (keep, _) in VARIANTS.items() for s in _variant(job, keep)]
    with running(cmd, tmp / "vm.log") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/health").status_code == 200,
            "VictoriaMetrics",
        )
        resp = httpx.post(f"{url}/api/v1/import/prometheus", content=to_vm_import(samples))
        assert resp.status_code == 204, resp.text
        n_series = len({(s.name, s.labels) for s in samples})

        def imported() -> bool:
            httpx.get(f"{url}/internal/force_flush")
            r = httpx.get(
                f"{url}/api/v1/series",
                params={"match[]": '{job=~".+"}', "start": T0, "end": T0 + SPAN},
            )
            return len(r.json().get("data", [])) >= n_series

        wait_until(imported, "VictoriaMetrics import")
        yield url


@pytest.mark.parametrize("job", list(VARIANTS))
def test_a_means_count_from_the_inf_bucket_or_the_spare_query_gives_the_per_level_tables(
    variants_url: str, job: str, sent: list[str]
) -> None:
    got = {}
    for shared in (True, False):
        sent.clear()
        got[shared] = prom.load_prometheus(
            variants_url,
            start=T0,
            end=T0 + SPAN,
            step_s=WINDOW,
            selector=f'job="{job}"',
            shared_plan=shared,
        )
        if shared:
            counted = any(f"{TTFT}_count" in q for q in sent)
    new, old = _tables(got[True]), _tables(got[False])
    assert new.keys() == old.keys() and new
    # without +Inf, VictoriaMetrics' histogram_quantile answers a bound where Prometheus' (and
    # the shared plan's, prom_quantile) answers nothing: the percentile is not compared there
    skip = {"ttft_p99_ms", "ttft_p99_ms_bound"} if "no-inf" in job else set()
    for key, row in new.items():
        for col, value in row.items():
            assert col in skip or _close(value, old[key][col]), (key, col, value, old[key][col])
    assert got[True].notes == got[False].notes
    assert counted is VARIANTS[job][1]
    means = [row["ttft_mean_ms"] for key, row in new.items() if key[0] == "dp"]
    assert any(m == m for m in means)  # the mean is there to compare (not NaN throughout)
