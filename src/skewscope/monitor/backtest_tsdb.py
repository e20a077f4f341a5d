"""The scratch TSDB ``backtest`` writes recorded samples into, level by level (monitor.backtest).

The samples are written as OpenMetrics and backfilled with ``promtool tsdb create-blocks-from
openmetrics`` (the tool Prometheus ships for backfilling), then a local ``prometheus`` is
(re)started on the blocks, bound to loopback, so the next level's PromQL runs on the real
engine. Its lookback delta is half a step: a record is read at the instant it was written and
never later, which is what a live rule's stale marker does when a series stops. Everything lives
in a temporary directory removed on exit, and the process is stopped on every exit.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

from skewscope.errors import SourceError, UsageError
from skewscope.monitor.template import duration
from skewscope.sources.prom_client import PromClient

READY_S = 60.0
BACKFILL_S = 600.0
Samples = list[tuple[dict[str, str], dict[float, float]]]  # labels (with __name__), t -> v


def binaries() -> tuple[str, str]:
    """(prometheus, promtool) from PATH, or one UsageError line saying why both are needed."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or tool is None:
        missing = " and ".join(
            n for n, p in (("prometheus", prom), ("promtool", tool)) if p is None
        )
        raise UsageError(
            f"backtest: {missing} not found on PATH: the recording rules are evaluated level "
            "by level in a local scratch Prometheus (docs/monitoring.md, Backtest); install "
            "Prometheus, or backtest a --rules file whose alerts read no recording rule"
        )
    return prom, tool


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def write_openmetrics(samples: Samples, out: IO[str]) -> int:
    """The samples as OpenMetrics text (families grouped by name, ``# EOF``); the count."""
    n = 0
    for labels, series in sorted(samples, key=lambda s: s[0]["__name__"]):
        name = labels["__name__"]
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()) if k != "__name__")
        head = f"{name}{{{body}}}" if body else name
        for t in sorted(series):
            out.write(f"{head} {_value(series[t])} {t:.3f}\n")
            n += 1
    out.write("# EOF\n")
    return n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ScratchTSDB:
    """A local Prometheus on backfilled blocks; ``add`` writes a level, ``query`` reads."""

    def __init__(self, step_s: float, timeout_s: float = 300.0) -> None:
        self.prom, self.promtool = binaries()
        self.step_s = step_s
        self.timeout_s = timeout_s
        self._tmp = Path(tempfile.mkdtemp(prefix="skewscope-backtest-"))
        self._blocks = self._tmp / "data"
        self._blocks.mkdir()
        (self._tmp / "prometheus.yml").write_text("global: {}\n")
        self._proc: subprocess.Popen[bytes] | None = None
        self._client: PromClient | None = None
        self._n = 0

    def __enter__(self) -> ScratchTSDB:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def add(self, samples: Samples) -> None:
        """Backfill ``samples`` and restart the scratch Prometheus on the blocks."""
        self._n += 1
        om = self._tmp / f"level-{self._n}.om"
        with om.open("w", encoding="utf-8") as f:
            n = write_openmetrics(samples, f)
        if n:
            done = subprocess.run(
                [
                    self.promtool,
                    "tsdb",
                    "create-blocks-from",
                    "openmetrics",
                    str(om),
                    str(self._blocks),
                ],
                capture_output=True,
                text=True,
                timeout=BACKFILL_S,
            )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise SourceError(
                    f"backtest: promtool could not backfill level {self._n}: {last[:200]}"
                )
        om.unlink()
        self._start()

    def query(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        if self._client is None:
            self._start()
        assert self._client is not None
        return self._client.query_range_series(expr, start, end, step)

    def _start(self) -> None:
        self._stop()
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [
            self.prom,
            f"--config.file={self._tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={self._blocks}",
            "--storage.tsdb.retention.time=100y",
            f"--query.lookback-delta={duration(self.step_s / 2)}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        log = (self._tmp / "prometheus.log").open("ab")
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    self._client = PromClient(url, timeout_s=self.timeout_s)
                    return
            time.sleep(0.1)
        tail = (self._tmp / "prometheus.log").read_text(errors="replace").strip()
        self._stop()
        raise SourceError(
            "backtest: the scratch Prometheus did not start: "
            f"{(tail.splitlines() or ['no log'])[-1][:200]}"
        )

    def _stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
            self._proc = None


@contextlib.contextmanager
def scratch(step_s: float, timeout_s: float = 300.0) -> Iterator[ScratchTSDB]:
    tsdb = ScratchTSDB(step_s, timeout_s)
    try:
        yield tsdb
    finally:
        tsdb.close()
