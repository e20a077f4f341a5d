"""``skewscope whatif`` (and ``simulate``, the other command with a worker pool) stopped by
SIGTERM or SIGHUP mid-run: a real subprocess with worker processes (forkserver, resource
tracker, replay or simulation workers). The parent must stop its workers before it exits —
none of them may keep working after it — say so in one line, exit 128 + the signal, and leave
no helper process behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.profiler import write_profiler

WAIT_S = 120.0  # bound of every wait on a condition (never a timing assertion)


def children(pid: int) -> dict[int, int]:
    """Every live process -> its parent, from /proc (no psutil)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])  # (comm) may hold spaces
    return out


def descendants(pid: int) -> set[int]:
    parent = children(pid)
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {WAIT_S:.0f} s: {what}")
        time.sleep(0.05)  # polling a condition, not synchronising on time


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """wrong-weights over 20x its length: every replay takes long enough to be interrupted."""
    sc = builtin_scenarios()["wrong-weights"]
    folder = tmp_path_factory.mktemp("big-ww")
    write_profiler(simulate(dataclasses.replace(sc, duration_s=sc.duration_s * 20)), folder)
    return folder


LONG_SCENARIO = """
name = "long-rr"
duration_s = 4000.0
[cluster]
instances = 4
[gateway]
policy = "round_robin"
[workload]
rate = 8.0
[truth]
verdict = "balanced"
level = "instance"
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_replay_stops_the_workers_before_the_parent_exits(
    sig: signal.Signals, big_folder: Path
) -> None:
    stop_mid_run(
        sig,
        [
            "whatif",
            str(big_folder),
            "--jobs",
            "2",
            "--format",
            "json",
            "--policies",
            "round_robin,least_requests,least_tokens",
        ],
    )


def test_signal_mid_simulation_stops_the_workers_before_the_parent_exits(tmp_path: Path) -> None:
    """A streamed run of a gateway that reads no load runs its instance groups in workers."""
    scenario = tmp_path / "long.toml"
    scenario.write_text(LONG_SCENARIO)
    stop_mid_run(
        signal.SIGTERM, ["simulate", str(scenario), "--out", str(tmp_path / "out"), "--jobs", "2"]
    )
    assert not (tmp_path / "out").exists()  # the atomic folder was not left half-written


def stop_mid_run(sig: signal.Signals, argv: list[str]) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    proc = subprocess.Popen(
        [sys.executable, "-m", "skewscope.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    seen: set[int] = set()
    workers: set[int] = set()
    try:

        def replaying() -> bool:
            assert proc.poll() is None, f"{argv[0]} ended first: {proc.stderr.read()}"  # type: ignore[union-attr]
            now = children(proc.pid)
            seen.update(descendants(proc.pid))
            # a replay worker: a child of the forkserver, itself a child of whatif
            workers.update(p for p in seen if now.get(now.get(p, 0), 0) == proc.pid)
            return bool(workers)

        wait_for(replaying, f"{argv[0]} starts its workers")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=WAIT_S)
        # the workers were terminated and reaped before the parent exited
        assert not [p for p in workers if alive(p)], f"a worker outlived {argv[0]}"
        assert proc.returncode == 128 + sig, err
        lines = err.strip().splitlines()
        assert lines[-1] == "skewscope: terminated", err
        assert "Traceback" not in err
        # the forkserver and the resource tracker follow their parent out
        wait_for(lambda: not [p for p in seen if alive(p)], f"{argv[0]}'s helper processes exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in seen | workers:
            if alive(p):
                os.kill(p, signal.SIGKILL)
