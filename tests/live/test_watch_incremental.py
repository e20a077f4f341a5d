"""``watch --prometheus`` reads only the windows it does not keep, and its reports are those of a
full diagnose at the same instant: a REAL Prometheus on a backfilled history with known truth
(online_history: a:8000 gets twice b:8000's requests, a's rank 0 runs 8 and queues 16 while its
sibling idles; b's rank 1 restarts at T0+600, so a counter reset sits inside the kept range; c
leaves at T0+600 and d joins at T0+300, so units appear and disappear; DCGM and npu-exporter
devices are joined to the vLLM hosts). The watch is stepped through its runs on a ManualClock at
explicit instants, aligned to the windows and not, so the open window is cut at every phase."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers.backends import backfill, running, wait_until
from helpers.binaries import need
from helpers.online_history import T0, Sample, history, to_openmetrics, to_vm_import
from helpers.online_servers import free_port
from skewscope.analysis.diagnose import diagnose
from skewscope.cli import build_parser
from skewscope.cli.watch import build_source
from skewscope.clock import ManualClock
from skewscope.frame import Evidence
from skewscope.monitor.watch import PrometheusSource, Watcher
from skewscope.report.document import report_document
from skewscope.sources.prom_incremental import IncrementalPrometheus
from skewscope.sources.prometheus import load_prometheus

SELECTOR = 'job=~"vllm-dp|vllm-scale"'
LAST, WINDOW, EVERY = 300.0, 30.0, 23.0  # 10 windows; runs drift across the window grid
HOT = {("a:8000", "instance"), ("a:8000/dp0", "dp")}


def full(url: str, now: float) -> Evidence:
    return load_prometheus(url, start=now - LAST, end=now, window_s=WINDOW, selector=SELECTOR)


def same_evidence(got: Evidence, want: Evidence) -> None:
    assert got.notes == want.notes
    for a, b in ((got.instance, want.instance), (got.dp, want.dp)):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.df.equals(b.df, null_equal=True), (a.df, b.df)
            assert (a.aliases, a.missing, a.notes) == (b.aliases, b.missing, b.notes)


def hot_units(evidence: Evidence) -> set[tuple[str, str]]:
    r = diagnose(evidence)
    return {(u, x.level) for x in (r, *r.drilldown) for u in x.hot_units}


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("incremental")
    (tmp / "history.om").write_text(to_openmetrics(history()))
    backfill(need("promtool", "prometheus"), tmp / "history.om", tmp / "blocks", timeout_s=60)
    return tmp / "blocks"


class Server:
    """A real Prometheus on its own copy of the blocks, which the test can stop and start."""

    def __init__(self, blocks: Path, tmp: Path) -> None:
        self.data, self.tmp, self.port = tmp / "data", tmp, free_port()
        shutil.copytree(blocks, self.data)
        (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
        self.url = f"http://127.0.0.1:{self.port}"
        self._run: Iterator[object] | None = None

    def start(self) -> None:
        cmd = [
            need("prometheus", "prometheus"),
            f"--config.file={self.tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self._cm = running(cmd, self.tmp / "prometheus.log")
        proc = self._cm.__enter__()
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{self.url}/-/ready").status_code == 200,
            "Prometheus",
        )

    def stop(self) -> None:
        self._cm.__exit__(None, None, None)


@pytest.fixture
def server(blocks: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(blocks, tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def watch_source(url: str) -> PrometheusSource:
    """The source ``skewscope watch --prometheus URL ... --debug`` runs on."""
    args = build_parser().parse_args(
        [
            "watch",
            "--prometheus",
            url,
            "--selector",
            SELECTOR,
            "--last",
            f"{LAST:g}s",
            "--window",
            f"{WINDOW:g}s",
            "--debug",
        ]
    )
    source = build_source(args, LAST, WINDOW)
    assert isinstance(source, PrometheusSource)
    return source


def test_each_run_is_a_full_diagnose_at_the_same_instant(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = ManualClock(T0 + LAST)
    source = watch_source(server.url)
    loaded: list[Evidence] = []
    read = source.loader
    source.loader = lambda start, end: loaded.append(read(start, end)) or loaded[-1]
    w = Watcher(source, last_s=LAST, every_s=EVERY, clock=clock)
    found_hot = 0
    reports: list[object] = []
    try:
        now = T0 + LAST
        while now <= T0 + 1200:
            clock.set(now)
            assert w.run_once(), w.status.last_error
            want = full(server.url, now)
            same_evidence(loaded[-1], want)
            assert w.status.report is not None
            assert report_document(w.status.report) == report_document(diagnose(want))
            reports.append(w.status.report)
            found_hot += hot_units(want) >= HOT
            now += EVERY
    finally:
        source.close()
    assert found_hot == len(loaded) > 30  # the known hot units, run after run
    seen = [
        line.removeprefix("skewscope watch: debug: ")
        for line in capsys.readouterr().err.splitlines()
    ]
    assert len(seen) == len(loaded)
    assert seen[0] == "full read of 10 windows: nothing kept yet"
    assert all(line.startswith("incremental read: ") for line in seen[1:]), seen
    # each run reads the window closed since the previous one (if any: runs are 23 s apart), the
    # kept ones read within 30 s (watch_settle_s) of their end, and one settled window, checked
    # against the kept one: 2 or 3 of the range's 9 or 10 windows
    assert {int(line.split()[2]) for line in seen[1:]} == {2, 3}, seen
    # a run whose range holds the same windows, all read again unchanged, returns the very
    # Evidence of the run before: the watch keeps its report instead of judging again
    same = [i for i, line in enumerate(seen) if line.endswith("the previous evidence stands")]
    assert 3 <= len(same) < len(seen) // 2, seen
    assert all(reports[i] is reports[i - 1] for i in same)
    assert all(reports[i] is not reports[i - 1] for i in range(1, len(seen)) if i not in same)


def test_a_restarted_server_is_read_in_full_and_said_so(server: Server) -> None:
    clock = ManualClock(T0 + 600)
    seen: list[str] = []
    reader = IncrementalPrometheus(
        server.url, window_s=WINDOW, selector=SELECTOR, debug=seen.append
    )
    w = Watcher(
        PrometheusSource("prometheus", LAST, reader.load), last_s=LAST, every_s=30, clock=clock
    )
    try:
        for now in (T0 + 600, T0 + 630):
            clock.set(now)
            assert w.run_once(), w.status.last_error
        server.stop()  # down: the run fails, the last good report stays
        clock.set(T0 + 660)
        assert not w.run_once() and w.status.last_error.startswith("source:")
        assert w.status.report is not None and w.status.good_runs == 2
        server.start()  # back (a restart): the kept tables are not trusted
        for now in (T0 + 690, T0 + 720):
            clock.set(now)
            assert w.run_once(), w.status.last_error
            assert w.status.report is not None
            want = report_document(diagnose(full(server.url, now)))
            assert report_document(w.status.report) == want
    finally:
        reader.close()
    assert seen[1].startswith("incremental read")
    assert seen[2].startswith("full read of 10 windows: the server restarted"), seen
    assert seen[3].startswith("incremental read")


def test_a_settled_window_that_changed_is_seen_and_the_range_read_again(
    tmp_path: Path,
) -> None:
    """A real VictoriaMetrics (no runtimeinfo: the check of a settled window is its only guard)
    holds a history where a:8000's scrapes in (T0+720, T0+750] are missing, as after a
    scraper's outage; the watch keeps that window, settled. Then the samples arrive (a remote
    write catching up, a backfill): the next run reads the window again, finds it changed,
    reads the whole range and says so; its Evidence is the full read's."""
    gap = [
        s
        for s in history()
        if dict(s.labels).get("instance") == "a:8000" and T0 + 720 < s.t <= T0 + 750
    ]
    rest = [s for s in history() if s not in gap]
    assert gap
    vm = need("victoria-metrics", "victoria-metrics")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        vm,
        f"-storageDataPath={tmp_path / 'vm'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.disableCache",
    ]

    def imported(samples: list[Sample]) -> None:
        r = httpx.post(f"{url}/api/v1/import/prometheus", content=to_vm_import(samples))
        assert r.status_code == 204, r.text
        want = sum(
            1
            for s in samples
            if s.name == "vllm:num_requests_running" and dict(s.labels)["instance"] == "a:8000"
        )

        def visible() -> bool:
            httpx.get(f"{url}/internal/force_flush")
            r = httpx.get(
                f"{url}/api/v1/query",
                params={
                    "query": 'count_over_time(vllm:num_requests_running{instance="a:8000"}[2h])',
                    "time": T0 + 1201,
                },
            )
            return sum(float(x["value"][1]) for x in r.json()["data"]["result"]) >= want

        wait_until(visible, "VictoriaMetrics import")

    seen: list[str] = []
    with running(cmd, tmp_path / "vm.log") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/health").status_code == 200,
            "VictoriaMetrics",
        )
        imported(rest)
        reader = IncrementalPrometheus(url, window_s=WINDOW, selector=SELECTOR, debug=seen.append)
        try:
            for now in (T0 + 720, T0 + 750, T0 + 780):
                same_evidence(reader.load(now - LAST, now), full(url, now))
            imported(rest + gap)
            now = T0 + 810
            got = reader.load(now - LAST, now)
            same_evidence(got, full(url, now))
        finally:
            reader.close()
    assert [line.split(":")[0] for line in seen] == [
        "full read of 10 windows",
        "incremental read",
        "incremental read",
        "full read of 10 windows",
    ], seen
    # a:8000's ranks had no sample in that window: now they have
    assert seen[-1] == (
        f"full read of 10 windows: the window at {T0 + 720} read again has "
        "other units for instance kv_usage (2 where 1 were kept)"
    ), seen
