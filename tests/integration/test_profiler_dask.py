"""``--scheduler``: a fleet's profiler folders read as tasks on a real Dask cluster (issue 25).

A real ``distributed`` scheduler and worker processes are started here (127.0.0.1): the report
must be the local run's byte for byte, the reads must really run on the workers, a worker killed
mid-task must be replaced by another one without changing the report, and a scheduler that
cannot be reached is one clean error line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client

from helpers.cli_run import run_cli
from helpers.profiler_fixtures import tiny_fleet
from skewscope.cli import main

PRELOAD_KILL = Path(__file__).parents[1] / "helpers" / "dask_preload_kill.py"
FOLDERS = 160  # tiny folders, batched: 8 tasks for each of 2 workers, 10 folders a task
MEMORY_LIMIT = "768MiB"


class Cluster:
    """A scheduler and its workers as child processes; ``add_worker`` starts one more."""

    def __init__(self, root: Path) -> None:
        self.root, self.procs = root, []
        self.file = root / "scheduler.json"
        self.procs.append(
            self._start(
                [
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(self.file),
                ],
                "scheduler",
            )
        )
        self.client = Client(scheduler_file=str(self.file), timeout=60, set_as_default=False)
        self.address = self.client.scheduler.address

    def _start(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("wb")
        return subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_" + argv[0], *argv[1:]],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def add_worker(self, *extra: str) -> subprocess.Popen[bytes]:
        n = len(self.procs)
        proc = self._start(
            [
                "worker",
                "--scheduler-file",
                str(self.file),
                "--nthreads",
                "1",
                "--no-nanny",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--memory-limit",
                MEMORY_LIMIT,
                *extra,
            ],
            f"worker-{n}",
        )
        self.procs.append(proc)
        return proc

    def tasks_done(self) -> int:
        """``read_batch`` tasks the scheduler saw finish (in memory, then released)."""
        counts = self.client.run_on_scheduler(
            lambda dask_scheduler: {
                k: dict(p.state_counts) for k, p in dask_scheduler.task_prefixes.items()
            }
        )
        return int(counts.get("read_batch", {}).get("memory", 0))

    def close(self) -> None:
        self.client.close()
        for p in self.procs:
            p.kill()
            p.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_fleet(tmp_path_factory.mktemp("dask") / "fleet", FOLDERS, hot=7)


def _report(fleet: Path, out: Path, *extra: str) -> str:
    assert (
        main(["diagnose", str(fleet), "--format", "json", "-o", str(out), "--force", *extra]) == 0
    )
    return out.read_text()


def test_reads_run_on_the_workers_and_the_report_is_the_local_one(
    cluster: Cluster, fleet: Path, tmp_path: Path
) -> None:
    for _ in range(2):
        cluster.add_worker()
    cluster.client.wait_for_workers(2, timeout=60)
    local = _report(fleet, tmp_path / "local.json")
    assert cluster.tasks_done() == 0
    on_dask = _report(fleet, tmp_path / "dask.json", "--scheduler", cluster.address)
    assert on_dask == local
    assert cluster.tasks_done() == 16  # every folder read by a worker
    assert json.loads(on_dask)["hot_units"] == ["inst-00007"]
    # the variable Dask's own clients read names the cluster too
    os.environ["DASK_SCHEDULER_ADDRESS"] = cluster.address
    try:
        assert _report(fleet, tmp_path / "env.json") == local
    finally:
        del os.environ["DASK_SCHEDULER_ADDRESS"]
    assert cluster.tasks_done() == 32
    # the workers stayed within their memory limit (a worker above it would be paused/killed)
    rss = cluster.client.run(lambda: __import__("psutil").Process().memory_info().rss)
    assert all(v < 768 << 20 for v in rss.values()), rss


def test_a_worker_killed_mid_task_is_replaced_and_the_report_unchanged(
    cluster: Cluster, fleet: Path, tmp_path: Path
) -> None:
    local = _report(fleet, tmp_path / "local.json")
    doomed = cluster.add_worker("--preload", str(PRELOAD_KILL))
    cluster.client.wait_for_workers(1, timeout=60)
    out = tmp_path / "dask.json"
    argv = [
        "diagnose",
        str(fleet),
        "--format",
        "json",
        "-o",
        str(out),
        "--scheduler",
        cluster.address,
    ]
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from skewscope.cli import main; raise SystemExit(main(sys.argv[1:]))",
            *argv,
        ],
        stderr=subprocess.PIPE,
    )
    assert doomed.wait(timeout=120) == -9  # killed by its own plugin on its first task
    assert run.poll() is None  # the run waits for a worker, it does not fail
    cluster.add_worker()
    _, err = run.communicate(timeout=240)
    assert run.returncode == 0, err.decode()
    assert out.read_text() == local


def test_a_scheduler_that_cannot_be_reached_is_one_clean_line(fleet: Path) -> None:
    rc, err = run_cli("diagnose", str(fleet), "--scheduler", "tcp://127.0.0.1:9")
    assert rc == 4 and err.count("\n") == 1, err  # a source that cannot be reached
    assert err.startswith(
        "skewscope: error: --scheduler tcp://127.0.0.1:9: cannot reach the Dask scheduler"
    ), err


def test_scheduler_is_an_option_of_the_profiler_source_only() -> None:
    rc, err = run_cli(
        "diagnose", "--prometheus", "http://127.0.0.1:9", "--scheduler", "tcp://127.0.0.1:9"
    )
    assert rc == 2 and "--scheduler" in err, err
