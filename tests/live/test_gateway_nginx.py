"""A REAL nginx (Debian ``nginx``) in front of the simulator's OpenAI-compatible engines.

nginx hashes the ``X-Session-Id`` header (``hash ... consistent``): a few heavy session keys pin
their traffic on one engine. Truth is what each engine was actually sent (its routed counter);
the access log nginx writes must give the same per-upstream counts, and the diagnosis joining
it with the engines' own /metrics must name stickiness and the keys.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from helpers.backends import wait_until
from helpers.gateway_servers import base_urls, nginx, scrape_diagnose, sim_engines, volume_gate
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.sim.writers.live import LiveCluster
from skewscope.sources.access_log import read_access_logs

HASH = "hash $http_x_session_id consistent;"
BODY = {"model": "m", "prompt": "tell me a story " * 8, "max_tokens": 4}


def _routed(cluster: LiveCluster) -> dict[str, float]:
    """host:port -> requests the engine there was actually sent."""
    return {
        u.removeprefix("http://").removesuffix("/metrics"): cluster.routed[i].finished
        for i, u in cluster.urls.items()
    }


def _heavy_keys(
    send: Callable[[str], None], cluster: LiveCluster, n: int = 3
) -> tuple[list[str], str]:
    """``n`` session keys nginx hashes onto the same engine (found by sending each once)."""
    by_upstream: dict[str, list[str]] = {}
    for k in range(200):
        before = _routed(cluster)
        send(f"heavy-{k}")
        after = _routed(cluster)
        up = next(u for u in after if after[u] > before[u])
        by_upstream.setdefault(up, []).append(f"heavy-{k}")
        if len(by_upstream[up]) == n:
            return by_upstream[up], up
    raise AssertionError("no engine got n keys")


def _traffic(
    url: str,
    heavy: list[str],
    seconds_worth: int,
    stop: threading.Event,
    light: list[str] | None = None,
) -> None:
    """Bounded load: per round, every heavy key 3 times and every ``light`` key once (default:
    4 one-off keys)."""
    with httpx.Client(timeout=10) as c:
        for r in range(seconds_worth):
            if stop.is_set():
                return
            extra = light if light is not None else [f"u{r}-{j}" for j in range(4)]
            keys = [*(h for h in heavy for _ in range(3)), *extra]
            for key in keys:
                assert (
                    c.post(
                        f"{url}/v1/completions", json=BODY, headers={"X-Session-Id": key}
                    ).status_code
                    == 200
                )


def _upstream_lines(log: Path) -> int:
    return sum("upstream_addr=-" not in ln for ln in log.read_text().splitlines() if ln.strip())


def test_access_log_counts_match_what_each_engine_got(tmp_path: Path) -> None:
    with sim_engines("idle") as cluster:
        ups = [u.removeprefix("http://") for u in base_urls(cluster)]
        with nginx(ups, tmp_path, HASH) as (url, log), httpx.Client(timeout=10) as c:

            def send(key: str) -> None:
                c.post(f"{url}/v1/completions", json=BODY, headers={"X-Session-Id": key})

            heavy, hot = _heavy_keys(send, cluster)
            _traffic(url, heavy, 15, threading.Event())
            # nginx writes a request's line, and an engine counts it finished, around the time
            # the client has its answer: wait until both have the last ones (a stop in between
            # loses a line)
            wait_until(
                lambda: _upstream_lines(log) == sum(_routed(cluster).values()),
                "every proxied request in the access log",
                timeout_s=10,
            )
            truth = _routed(cluster)
        gw = read_access_logs([str(log)])
    got = {u.upstream: u.requests for u in gw.units}
    assert got == {u: n for u, n in truth.items() if n}
    assert gw.source == "nginx" and gw.key_name == "http_x_session_id"
    hot_unit = next(u for u in gw.units if u.upstream == hot)
    assert {k for k, _ in hot_unit.keys[:3]} == set(heavy)
    assert all(abs(u.request_bytes - hot_unit.request_bytes) < 20 for u in gw.units)
    assert any("no upstream" in n for n in gw.notes)  # nginx's own readiness answer


def _one_key_per_other_upstream(
    send: Callable[[str], None], cluster: LiveCluster, hot: str
) -> list[str]:
    """A light session key for every engine but ``hot``: the background traffic reaches each of
    them evenly (one-off keys hash by chance, and with ~1 request per 1 s window a chance
    pile-up on one peer reads as a second hot unit)."""
    found: dict[str, str] = {}
    for k in range(400):
        before = _routed(cluster)
        send(f"light-{k}")
        after = _routed(cluster)
        up = next(u for u in after if after[u] > before[u])
        if up != hot:
            found.setdefault(up, f"light-{k}")
        if len(found) == len(after) - 1:
            return list(found.values())
    raise AssertionError("no light key for some engine")


@dataclass
class Sticky:
    """Engines behind nginx hashing sessions, with heavy keys pinned on ``hot`` and one light
    key for every other engine."""

    cluster: LiveCluster
    url: str
    log: Path
    heavy: list[str]
    hot: str
    light: list[str]


@contextlib.contextmanager
def sticky_nginx(tmp_path: Path) -> Iterator[Sticky]:
    with sim_engines("idle") as cluster:
        ups = [u.removeprefix("http://") for u in base_urls(cluster)]
        with nginx(ups, tmp_path, HASH) as (url, log), httpx.Client(timeout=10) as c:

            def send(key: str) -> None:
                c.post(f"{url}/v1/completions", json=BODY, headers={"X-Session-Id": key})

            heavy, hot = _heavy_keys(send, cluster)
            light = _one_key_per_other_upstream(send, cluster, hot)
            yield Sticky(cluster, url, log, heavy, hot, light)


def test_diagnose_joins_nginx_log_to_engine_metrics(tmp_path: Path) -> None:
    """End to end through the CLI: --scrape the engines while nginx routes, --access-log."""
    with sticky_nginx(tmp_path) as st:
        heavy, hot = st.heavy, st.hot
        doc = scrape_diagnose(
            st.cluster,
            lambda stop: _traffic(st.url, heavy, 400, stop, st.light),
            ["--access-log", str(st.log), *volume_gate(tmp_path)],
            tmp_path / "report.json",
        )
    assert doc["verdict"] == "imbalanced", doc["notes"]
    assert doc["hot_units"] == [hot]
    finding = doc["findings"][0]
    assert finding["root_causes"][0]["key"] == "sticky_sessions"
    assert "http_x_session_id" in finding["summary"] and all(h in finding["summary"] for h in heavy)
    gw = doc["gateway"]
    assert gw["source"] == "nginx"
    hot_row = next(u for u in gw["units"] if u["upstream"] == hot)
    assert hot_row["unit"] == hot and hot_row["top_keys_excess_share"] >= 0.5
    assert hot_row["router_share"] > 0.4
    # per window of the engines' grid: the shares of the windows with traffic sum to one
    shares = [u["share_series"] for u in gw["units"]]
    assert all(len(s) == len(gw["window_starts"]) > 1 for s in shares)
    sums = [sum(v for v in col if v == v) for col in zip(*shares, strict=True)]
    assert all(abs(x - 1) < 1e-4 for x in sums if x) and any(sums), sums  # JSON rounding
    # the key probing before the scrape is outside the engines' range: left out
    assert any("outside the engines' time range" in n for n in doc["notes"])


def test_watch_follows_the_nginx_log_while_it_is_written(tmp_path: Path) -> None:
    """watch --scrape --access-log: every run tallies the lines nginx appended, over the run's
    own windows, and names the hot upstream and its heavy keys as diagnose does."""
    from skewscope.cli import build_parser
    from skewscope.cli.watch import build_source
    from skewscope.monitor.watch import Watcher

    with sticky_nginx(tmp_path) as st:
        heavy, hot = st.heavy, st.hot
        args = build_parser().parse_args(
            [
                "watch",
                "--scrape",
                *st.cluster.urls.values(),
                "--interval",
                "250ms",
                "--window",
                "1s",
                "--last",
                "10s",
                "--access-log",
                str(st.log),
            ]
        )
        source = build_source(args, 10.0, 1.0)
        stop = threading.Event()
        load = threading.Thread(target=_traffic, args=(st.url, heavy, 400, stop, st.light))
        load.start()
        try:
            # the volume gate at 30 requests: the load goes as fast as nginx answers, fewer than
            # the default 100 land in 10 s on a busy machine; the runs' content is tested here
            w = Watcher(
                source,
                last_s=10.0,
                every_s=1.0,
                thresholds=DEFAULT_THRESHOLDS.updated({"min_requests_total": 30}, "test"),
            )
            wait_until(
                lambda: (
                    w.run_once()
                    and (r := w.status.report) is not None
                    and r.gateway is not None
                    and len(r.gateway.units) == len(st.cluster.urls)
                    and r.hot_units == (hot,)
                ),
                "a watch run naming the hot upstream",
                timeout_s=90,
            )
            first = w.status.report
            assert first is not None and first.gateway is not None
            last = first.gateway.window_starts[-1]
            # a later run: the lines appended since, over its own (later) windows
            wait_until(
                lambda: (
                    w.run_once()
                    and (r := w.status.report) is not None
                    and r.gateway is not None
                    and r.gateway.window_starts[-1] > last
                ),
                "a run over later windows",
                timeout_s=60,
            )
            second = w.status.report
        finally:
            stop.set()
            load.join(timeout=30)
            source.close()
    assert first is not None and second is not None
    for rep in (first, second):
        assert rep.gateway is not None and rep.gateway.source == "nginx"
        row = next(u for u in rep.gateway.units if u.upstream == hot)
        assert row.router_share > 0.4 and {k for k, _ in row.top_keys[:3]} == set(heavy)
        assert rep.findings[0].root_causes[0] == "sticky_sessions"
    assert first.gateway is not None and second.gateway is not None
    assert sum(u.requests for u in second.gateway.units) > 0
