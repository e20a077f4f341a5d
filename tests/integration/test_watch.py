"""watch as a library and its exporter, on the bundled example (known truth: inst-1 gets 1.8x
the requests of its peers, and inside every instance the dispatcher sends dp0 1.7x its sibling):
the contract names scraped over HTTP, a failing source that keeps the last values, incidents
from consecutive runs, SQLite history and ``skewscope history``."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.scripted_source import ScriptedSource
from skewscope.analysis.diagnose import diagnose
from skewscope.cli import main
from skewscope.clock import ManualClock
from skewscope.errors import SourceError
from skewscope.frame import Evidence
from skewscope.monitor import screen
from skewscope.monitor.exporter import parse_listen, serve
from skewscope.monitor.history import HistoryStore, open_store
from skewscope.monitor.incidents import COOLED, STOPPED, IncidentTracker
from skewscope.monitor.status import ERROR_REASONS
from skewscope.monitor.watch import Watcher
from skewscope.report.model import Report
from skewscope.sources.profiler import load_profiler

EXAMPLE = Path(__file__).parents[1].parent / "examples" / "cluster-skew"


@pytest.fixture(scope="module")
def evidence() -> Evidence:
    return load_profiler([str(EXAMPLE)])


@pytest.fixture(scope="module")
def report(evidence: Evidence) -> Report:
    return diagnose(evidence)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exporter by (name, sorted labels)."""
    text = httpx.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


@pytest.fixture
def exporter() -> Iterator[Callable[[Watcher], str]]:
    servers: list[Any] = []

    def start(w: Watcher) -> str:
        server, url = serve(lambda: w.status, "127.0.0.1:0")
        servers.append(server)
        return url

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_exporter_serves_the_contract_for_the_known_truth(
    evidence: Evidence, exporter: Callable[[Watcher], str]
) -> None:
    w = Watcher(ScriptedSource([evidence]), last_s=60, every_s=30)
    assert w.run_once()
    got = scrape(exporter(w))
    hot = {k[1]: v for k, v in got.items() if k[0] == "skewscope_unit_hot"}
    assert hot == {
        labels(unit="inst-0", level="instance", kind="none"): 0.0,
        labels(unit="inst-1", level="instance", kind="count"): 1.0,
        labels(unit="inst-2", level="instance", kind="none"): 0.0,
        labels(unit="inst-1/dp0", level="dp", kind="count"): 1.0,
        labels(unit="inst-1/dp1", level="dp", kind="none"): 0.0,
        labels(unit="inst-0/dp0", level="dp", kind="count"): 1.0,
        labels(unit="inst-0/dp1", level="dp", kind="none"): 0.0,
        labels(unit="inst-2/dp0", level="dp", kind="count"): 1.0,
        labels(unit="inst-2/dp1", level="dp", kind="none"): 0.0,
    }
    ratio = {
        (dict(k[1])["unit"], dict(k[1])["signal"]): v
        for k, v in got.items()
        if k[0] == "skewscope_unit_load_ratio"
    }
    # gateway weights 1 : 1.8 : 1 -> inst-1 carries ~1.8x the requests of its peers
    assert 1.5 < ratio[("inst-1", "requests")] < 2.2
    assert ratio[("inst-0", "requests")] < 1.0 and ratio[("inst-2", "requests")] < 1.0
    assert ratio[("inst-1/dp0", "requests")] > 1.3 > ratio[("inst-1/dp1", "requests")]
    assert {dict(k[1])["signal"] for k in got if k[0] == "skewscope_unit_load_ratio"} >= {
        "requests",
        "total_tokens",
        "busy_ms",
        "running",
    }
    assert got[("skewscope_verdict", labels(verdict="imbalanced"))] == 1.0
    assert got[("skewscope_verdict", labels(verdict="balanced"))] == 0.0
    assert got[("skewscope_verdict", labels(verdict="insufficient_data"))] == 0.0
    assert got[("skewscope_last_run_timestamp_seconds", ())] == pytest.approx(w.status.report_at)
    assert got[("skewscope_run_duration_seconds", ())] > 0
    for reason in ERROR_REASONS:
        assert got[("skewscope_run_errors_total", labels(reason=reason))] == 0.0


def test_failing_source_keeps_the_last_values_and_counts_the_error(
    evidence: Evidence, exporter: Callable[[Watcher], str]
) -> None:
    source = ScriptedSource(
        [evidence, SourceError("Prometheus at http://p:9090 did not answer"), RuntimeError("boom")]
    )
    w = Watcher(source, last_s=60, every_s=30)
    url = exporter(w)
    assert w.run_once()
    first = scrape(url)
    good = w.status
    assert not w.run_once()
    after = scrape(url)
    assert w.status.report is good.report and w.status.report_at == good.report_at
    assert w.status.last_error == "source: Prometheus at http://p:9090 did not answer"
    assert after[("skewscope_run_errors_total", labels(reason="source"))] == 1.0
    unit_series = {k: v for k, v in first.items() if k[0].startswith("skewscope_unit_")}
    assert unit_series and {k: after[k] for k in unit_series} == unit_series
    assert (
        after[("skewscope_last_run_timestamp_seconds", ())]
        == first[("skewscope_last_run_timestamp_seconds", ())]
    )
    line = screen.log_line(w.status, 0.0)
    assert 'error="source: Prometheus' in line and "keeping report of" in line
    assert not w.run_once()  # an unexpected exception is counted, never raised
    assert scrape(url)[("skewscope_run_errors_total", labels(reason="internal"))] == 1.0
    assert w.status.last_error == "internal: RuntimeError: boom"
    assert "last run failed" in _text(screen.render(w.status))


def _text(renderable: Any) -> str:
    from rich.console import Console

    console = Console(record=True, width=160, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def cooled(report: Report) -> Report:
    """The same run with nothing hot (the skew went away)."""
    return replace(report, verdict="balanced", hot_units=(), findings=(), drilldown=())


def hotter(report: Report, factor: float) -> Report:
    units = tuple(
        replace(u, load_ratios={k: v * factor for k, v in u.load_ratios.items()})
        for u in report.units
    )
    return replace(report, units=units)


def test_incidents_come_from_consecutive_runs(report: Report) -> None:
    t = IncidentTracker("test", open_runs=1)
    opened = t.update(report, 100.0)
    assert {(i.unit, i.level, i.kind) for i in opened} == {
        ("inst-1", "instance", "count"),
        ("inst-1/dp0", "dp", "count"),
        ("inst-0/dp0", "dp", "count"),
        ("inst-2/dp0", "dp", "count"),
    }
    first_peak = next(i.peak_ratio for i in opened if i.unit == "inst-1")
    t.update(hotter(report, 1.5), 130.0)
    t.update(report, 160.0)  # a lower ratio does not lower the peak
    assert t.update(cooled(report), 190.0) == []  # one calm run: not over yet (hysteresis)
    (ended,) = [i for i in t.update(cooled(report), 220.0) if i.unit == "inst-1"]
    assert (ended.onset_s, ended.last_seen_s, ended.end_s) == (100.0, 160.0, 190.0)
    assert ended.end_reason == COOLED
    assert ended.peak_ratio == pytest.approx(first_peak * 1.5)
    assert not t.open


@pytest.mark.parametrize(
    ("calm_runs", "want"),
    [
        (2, [(100.0, 160.0, 190.0), (250.0, 250.0, None)]),  # one calm run (130) splits nothing
        (1, [(100.0, 100.0, 130.0), (160.0, 160.0, 190.0), (250.0, 250.0, None)]),
    ],
)
def test_an_incident_ends_only_after_k_calm_runs(
    report: Report, calm_runs: int, want: list[tuple[float, float, float | None]]
) -> None:
    hot, calm = report, cooled(report)
    sequence = [
        (hot, 100.0),
        (calm, 130.0),
        (hot, 160.0),
        (calm, 190.0),
        (calm, 220.0),
        (hot, 250.0),
    ]
    t = IncidentTracker("test", calm_runs=calm_runs, open_runs=1)
    seen: dict[tuple[str, float], tuple[float, float, float | None]] = {}
    for r, at in sequence:
        for i in t.update(r, at):
            if i.unit == "inst-1":
                seen[i.unit, i.onset_s] = (i.onset_s, i.last_seen_s, i.end_s)
    assert sorted(seen.values()) == want
    assert all(i.end_reason == COOLED for i in t.update(calm, 280.0) + t.update(calm, 310.0))


def test_an_incident_opens_only_after_k_alarming_runs_at_the_first_of_them(
    report: Report,
) -> None:
    hot, calm = report, cooled(report)
    t = IncidentTracker("test", calm_runs=1, open_runs=2)
    assert t.update(hot, 100.0) == []  # one hot run: pending
    assert t.update(calm, 130.0) == []  # a blip: never an incident
    assert t.update(hot, 160.0) == []
    (opened,) = [i for i in t.update(hot, 190.0) if i.unit == "inst-1"]
    assert (opened.onset_s, opened.last_seen_s, opened.end_s) == (160.0, 190.0, None)
    assert opened.confirmed_s == 190.0  # dated from its first hot run, shown at the second
    (ended,) = [i for i in t.update(calm, 220.0) if i.unit == "inst-1"]
    assert (ended.onset_s, ended.end_s) == (160.0, 220.0)
    assert t.update(hot, 250.0) == [] and not t.open  # pending again, not reopened


def test_a_run_that_judged_nothing_neither_alarms_nor_calms(report: Report) -> None:
    """Runs every 30 s over 1 min windows alternate 6 and 5 whole windows: the short ones are
    insufficient data, and must not split the hot runs around them."""
    nothing = replace(cooled(report), verdict="insufficient_data")
    t = IncidentTracker("test", calm_runs=1, open_runs=2)
    assert t.update(report, 100.0) == [] and t.update(nothing, 130.0) == []
    (opened,) = [i for i in t.update(report, 160.0) if i.unit == "inst-1"]
    assert opened.onset_s == 100.0
    assert t.update(nothing, 190.0) == [] and ("inst-1", "instance") in t.open


@pytest.mark.parametrize(
    ("scenario", "kind"), [("health-check", "starved"), ("stale-load", "stale_load")]
)
def test_starved_units_and_stale_groups_open_incidents_of_their_kind(
    tmp_path: Path, scenario: str, kind: str
) -> None:
    """A starved unit and a group whose ranks take turns (neither is a hot unit) are alarms
    too: watch must not stay silent through a failed health check or a stale balancer."""
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import builtin_scenarios
    from skewscope.sim.writers.profiler import write_profiler

    sc = builtin_scenarios()[scenario]
    write_profiler(simulate(sc), tmp_path)
    rep = diagnose(load_profiler([str(tmp_path)]))
    truth = sc.truth
    want = (
        set(truth.idle_units)
        if kind == "starved"
        else {u.rsplit("/dp", 1)[0] for u in truth.rotating_units}
    )
    got = {(i.unit, i.kind) for i in IncidentTracker("test", open_runs=1).update(rep, 1.0)}
    assert {u for u, k in got if k == kind} == want, got


# The example's hot units in report order: inst-1, then the instances' drill-downs in turn
HOT = ["inst-1", "inst-0/dp0", "inst-1/dp0", "inst-2/dp0"]


def check_store(store: HistoryStore, report: Report) -> None:
    """The history contract, for SQLite and Postgres alike."""
    source = ScriptedSource([])
    w = Watcher(
        source,
        last_s=60,
        every_s=30,
        store=store,
        calm_runs=1,
        open_runs=1,
        clock=ManualClock(90.0),
    )
    for r, at in ((report, 100.0), (report, 130.0), (cooled(report), 160.0), (report, 190.0)):
        changed = w.tracker.update(r, at)
        w._record(changed, at)
    rows = store.list()
    newest_first = HOT[::-1]  # the same onset: the later insert (id) first
    assert [(i.unit, i.onset_s, i.end_s, i.end_reason) for i in rows] == [
        *((u, 190.0, None, "") for u in newest_first),
        *((u, 100.0, 160.0, COOLED) for u in newest_first),
    ]
    assert len(store.list(open_only=True)) == len(HOT)
    assert all(i.confirmed_s == i.onset_s for i in rows)  # open_runs 1: shown when it began
    assert {i.unit for i in store.list(unit="inst-1")} == {"inst-1"}
    one = store.get(rows[-1].id or -1)
    assert one is not None and one.kind == "count" and "persistent hot spot" in one.summary
    assert store.close_orphans(200.0) == 0  # its own incidents: never orphans
    other = type(store)(store.conn, postgres=store.postgres, shown=store.shown)  # a 2nd writer
    assert other.close_orphans(200.0) == 0  # the first writer's lease still runs
    assert other.close_orphans(190.0 + w._lease(0.0) + 1) == len(HOT)  # it died: lease ran out
    assert not store.list(open_only=True)
    assert {i.end_reason for i in store.list() if i.onset_s == 190.0} == {STOPPED}


def test_sqlite_history_and_history_command(
    tmp_path: Path, report: Report, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h" / "history.sqlite"
    store = open_store(str(db))
    check_store(store, report)
    store.close()
    assert main(["history", "list", "--db", str(db), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 2 * len(HOT) and all(i["end_s"] is not None for i in listed)
    assert main(["history", "show", str(listed[-1]["id"]), "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "inst-1" in shown and "cooled" in shown and "persistent hot spot" in shown
    assert main(["history", "list", "--db", str(db)]) == 0
    assert f"{2 * len(HOT)} incident(s)" in capsys.readouterr().out
    assert main(["history", "show", "999", "--db", str(db)]) == 2
    assert "no incident 999" in capsys.readouterr().err
    assert main(["history", "list", "--db", str(tmp_path / "nope.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("skewscope: error: history ") and "watch --save" in err


def test_default_history_path_is_documented_and_overridable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from skewscope.monitor.history import default_path

    monkeypatch.delenv("SKEWSCOPE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_path() == tmp_path / "skewscope" / "history.sqlite"
    monkeypatch.setenv("SKEWSCOPE_HISTORY", str(tmp_path / "x.db"))
    assert default_path() == tmp_path / "x.db"


def test_stop_abandons_a_run_in_flight(evidence: Evidence) -> None:
    """SIGTERM/SIGINT call stop(): the loop returns even while a query hangs."""
    release = threading.Event()

    class Hanging(ScriptedSource):
        def load(self, now: float) -> Evidence:
            release.wait(30)
            return evidence

    w = Watcher(Hanging([]), last_s=60, every_s=1)
    threading.Timer(0.3, w.stop).start()
    w.loop()
    assert w.status.runs == 0
    release.set()


def test_loop_runs_every_interval_and_notifies(evidence: Evidence) -> None:
    """The loop on a manual clock: each run starts one interval after the previous one, at
    instants read from the clock (no wall-clock sleep)."""
    seen: list[tuple[bool, float]] = []
    clock = ManualClock(1000.0)
    w = Watcher(
        ScriptedSource([evidence, SourceError("down")]),
        last_s=60,
        every_s=30,
        on_run=lambda st, good: seen.append((good, clock.time())),
        clock=clock,
    )
    w.loop(max_runs=3)
    assert seen == [(True, 1000.0), (False, 1030.0), (False, 1060.0)]
    assert w.status.errors["source"] == 2 and w.status.good_runs == 1


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("127.0.0.1:9109", ("127.0.0.1", 9109)),
        ("9109", ("127.0.0.1", 9109)),
        ("[::1]:0", ("::1", 0)),
    ],
)
def test_parse_listen(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


def test_watch_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--no-tui"]) == 2
    assert "give --prometheus URL or --scrape URL" in capsys.readouterr().err
    assert main(["watch", "--scrape", "http://127.0.0.1:1/metrics", "--listen", "x:y"]) == 2
    assert "--listen" in capsys.readouterr().err
    assert main(["watch", "--scrape", "http://127.0.0.1:1/metrics", "--every", "0"]) == 2
    assert "--every" in capsys.readouterr().err


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    from helpers.postgres_server import postgres

    with postgres() as url:
        yield url


def test_postgres_history_and_history_command(
    postgres_url: str, report: Report, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(postgres_url)
    assert store.postgres
    check_store(store, report)
    store.close()
    assert main(["history", "list", "--db", postgres_url, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [i["unit"] for i in listed] == [*HOT[::-1], *HOT[::-1]]
    assert main(["history", "show", str(listed[0]["id"]), "--db", postgres_url]) == 0
    assert "watch stopped" in capsys.readouterr().out


def test_unreachable_postgres_is_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from helpers.postgres_server import _free_port

    url = f"postgresql://me:sekret@127.0.0.1:{_free_port()}/db"
    assert main(["history", "list", "--db", url]) == 4
    err = capsys.readouterr().err
    assert err.startswith("skewscope: error: history postgresql://***@127.0.0.1:")
    assert "sekret" not in err and "\n" not in err.strip()


def test_live_view_shows_hot_units_kind_ratios_since_and_sparkline(evidence: Evidence) -> None:
    clock = ManualClock(99.0)

    class OneSecond(ScriptedSource):  # each load takes one second of the clock
        def load(self, now: float) -> Evidence:
            clock.advance(1.0)
            return super().load(now)

    w = Watcher(OneSecond([evidence]), last_s=60, every_s=30, clock=clock)
    clock.set(100.0)
    assert w.run_once()  # 100 -> 101
    clock.set(130.0)
    assert w.run_once()  # 130 -> 131
    text = _text(screen.render(w.status))
    row = next(line for line in text.splitlines() if line.startswith("│ inst-1 "))
    assert "instance" in row and "count" in row and "requests 1." in row
    assert screen.clock(101.0) in row  # hot since the first run that found it (ended at 101)
    heat = w.status.report.units[1].heat_by_window  # type: ignore[union-attr]
    assert screen.sparkline(heat) in row
    assert "inst-1/dp0" in text and "Imbalanced" in text
    line = screen.log_line(w.status, 131.0)
    assert "verdict=imbalanced" in line and "inst-1(instance,count," in line


def test_sparkline_scales_to_the_series_and_leaves_gaps() -> None:
    nan = float("nan")
    assert screen.sparkline([0.0, 1.0, 2.0, nan, 2.0]) == "▁▄█ █"
    assert screen.sparkline([nan, 0.0]) == " ▁"


@pytest.mark.parametrize(
    "capture", ["vllm-0.32-cpu-dp2.metrics.txt", "vllm-0.32-cpu-single.metrics.txt"]
)
def test_sampler_drops_only_samples_no_dialect_reads(capture: str) -> None:
    """The rolling sampler keeps a fraction of each scrape; the evidence must not change."""
    from skewscope.sources.sampler import keep_read
    from skewscope.sources.scrape import Snapshot, evidence_from_targets, parse_exposition

    text = (Path(__file__).parents[1] / "data" / "samples" / capture).read_text()
    samples = parse_exposition(text).samples
    snaps = {
        f"http://10.0.0.{t}:8000/metrics": [
            Snapshot(
                k * 5.0, tuple((n, lab, v * (1 + k * (t + 1) * 0.05)) for n, lab, v in samples)
            )
            for k in range(13)
        ]
        for t in range(3)
    }
    kept = {u: [keep_read(s) for s in ss] for u, ss in snaps.items()}
    n_kept = len(kept["http://10.0.0.0:8000/metrics"][0].samples or ())
    assert 0 < n_kept < len(samples) / 2
    full = evidence_from_targets(snaps, t0=0.0, window_s=10.0, n_windows=6)
    lean = evidence_from_targets(kept, t0=0.0, window_s=10.0, n_windows=6)
    assert full.instance.df.height == 18 and full.instance.df["requests"].null_count() == 0
    assert lean.notes == full.notes and lean.instance.aliases == full.instance.aliases
    assert lean.instance.df.equals(full.instance.df)
    assert (lean.dp is None) == (full.dp is None)
    if full.dp is not None and lean.dp is not None:
        assert lean.dp.df.equals(full.dp.df)


def test_listen_on_a_taken_port_is_a_usage_error() -> None:
    import socket

    from skewscope.errors import UsageError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = Watcher(ScriptedSource([]), last_s=60, every_s=30)
        with pytest.raises(UsageError, match=f"--listen 127.0.0.1:{port}: cannot listen"):
            serve(lambda: w.status, f"127.0.0.1:{port}")


def test_unit_ids_reach_the_screen_literally(report: Report) -> None:
    """A unit id comes from a label or folder name: rich markup and escape sequences in it are
    shown as text, on the live view, in the log line and in the history tables."""
    from skewscope.monitor.incidents import Incident

    evil = "[bold]inst-1[/bold]\x1b[31m"

    def rename(r: Report) -> Report:
        swap = lambda u: evil if u == "inst-1" else u  # noqa: E731
        return replace(
            r,
            hot_units=tuple(swap(u) for u in r.hot_units),
            units=tuple(replace(u, unit=swap(u.unit)) for u in r.units),
            findings=tuple(replace(f, units=tuple(swap(u) for u in f.units)) for f in r.findings),
        )

    w = Watcher(ScriptedSource([]), last_s=60, every_s=30)
    w._publish(report=rename(report), report_at=1.0)
    text = _text(screen.render(w.status))
    assert "│ [bold]inst-1[/bold]\\x1b[31m" in text and "\x1b" not in text
    assert "[bold]inst-1[/bold]\\x1b[31m(instance,count," in screen.log_line(w.status, 2.0)
    incident = Incident(evil, "instance", "count", 1.0, 2.0, 1.5, "[red]s[/red]", id=7)
    table = _text(screen.incident_table([incident]))
    detail = _text(screen.incident_detail(incident))
    for shown in (table, detail):
        assert "[bold]inst-1[/bold]\\x1b[31m" in shown and "\x1b" not in shown
    assert "[red]s[/red]" in detail


def test_rolling_sampler_windows_sit_on_the_prometheus_grid() -> None:
    """watch --scrape and watch --prometheus judge the same windows: whole windows of
    [latest - span, latest] on the epoch grid (prom_matrix.plan_windows), whatever the phase of
    the scrape rounds; a counter's increase in a window is counted from the last scrape at or
    before its start, so every increment lands in exactly one window."""
    from skewscope.sources.prom_matrix import plan_windows
    from skewscope.sources.sampler import RollingScraper
    from skewscope.sources.scrape import Snapshot, parse_exposition

    def scrape(t: float) -> Snapshot:
        text = "\n".join(
            f'vllm:request_success_total{{finished_reason="stop"}} {rate * (t - 1000.0)}\n'
            f"vllm:num_requests_running {running}"
            for rate, running in ((2.0, 3.0),)
        )
        return Snapshot(t, parse_exposition(text).samples)

    urls = ["http://10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics"]
    sampler = RollingScraper(urls, span_s=60.0, interval_s=5.0, window_s=10.0)
    for k in range(40):  # rounds at 1003, 1008, ...: never on a window boundary
        t = 1003.0 + 5.0 * k
        for u in urls:
            sampler._buf[u].append((t, scrape(t)))
    latest = 1003.0 + 5.0 * 39
    ev = sampler.evidence()
    first_t, _, n = plan_windows(latest - 60.0, latest, 10.0)
    want = [first_t - 10.0 + 10.0 * k for k in range(n)]
    assert sorted(set(ev.instance.df["window_start_s"].to_list())) == want
    assert ev.instance.df["requests"].to_list() == [20.0] * (2 * n)  # 2/s over every 10 s
