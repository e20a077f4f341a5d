"""The process boundary as a shell meets it (cli/streams.py), with real subprocesses and pipes:
a reader that went away (``| head -1``), a full disk (/dev/full), SIGTERM mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "cluster-skew")
ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
CLOSED_PIPE = 128 + signal.SIGPIPE


def skewscope(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skewscope.cli", *args], env=ENV, text=True, timeout=300, **kw
    )  # type: ignore[call-overload, no-any-return]


@pytest.fixture
def history_db(tmp_path: Path) -> str:
    from skewscope.monitor.history import open_store

    db = str(tmp_path / "history.sqlite")
    open_store(db).close()
    return db


COMMANDS = [
    ["diagnose", EXAMPLE, "--format", "html"],
    ["diagnose", EXAMPLE],
    ["rules"],
    ["dashboard"],
    ["history", "list", "--db", "{db}"],
    ["--help"],
]


def _args(cmd: list[str], db: str) -> list[str]:
    return [a.replace("{db}", db) for a in cmd]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_closed_pipe_ends_quietly_with_the_sigpipe_status(
    cmd: list[str], history_db: str
) -> None:
    """`skewscope ... | head -1` once head has gone: the read end is closed before the child
    starts, so its first write meets a closed pipe (no race on when head exits)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = skewscope(_args(cmd, history_db), stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert done.returncode == CLOSED_PIPE, done.stderr
    assert done.stderr == ""  # no traceback, no "Exception ignored"


def test_head_reads_the_first_line_and_the_rest_ends_quietly() -> None:
    """The shell pipeline itself: the whole report's first line reaches head."""
    done = subprocess.run(
        ["bash", "-c", "set -o pipefail; python3 -m skewscope.cli rules | head -1"],
        env=ENV,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert done.stdout.startswith("#") or done.stdout.startswith("groups")
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr
    assert done.returncode in (0, CLOSED_PIPE)  # 0 when the rules fit in the pipe's buffer


needs_dev_full = pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="no /dev/full")


@needs_dev_full
@pytest.mark.parametrize("cmd", COMMANDS[:5], ids=lambda c: " ".join(c[:2]))
def test_stdout_on_a_full_disk_is_one_line(cmd: list[str], history_db: str) -> None:
    with open("/dev/full", "w") as full:
        done = skewscope(_args(cmd, history_db), stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert done.stderr == "skewscope: error: stdout: cannot write (No space left on device)\n"


@needs_dev_full
@pytest.mark.parametrize("cmd", [["rules"], ["diagnose", EXAMPLE]], ids=lambda c: c[0])
def test_output_file_on_a_full_device_is_one_line_and_the_device_stays(cmd: list[str]) -> None:
    """-o names a device: it is written in place (a rename would replace /dev/full with a
    regular file), and its write error is one line naming -o."""
    done = skewscope([*cmd, "-o", "/dev/full"], capture_output=True)
    assert done.returncode == 2
    assert done.stderr == "skewscope: error: -o /dev/full: cannot write (No space left on device)\n"
    assert Path("/dev/full").is_char_device()


def test_output_to_dev_null_needs_no_force() -> None:
    done = skewscope(["rules", "-o", os.devnull], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert Path(os.devnull).is_char_device()


def test_output_to_a_folder_is_refused(tmp_path: Path) -> None:
    done = skewscope(["rules", "-o", str(tmp_path), "--force"], capture_output=True)
    assert done.returncode == 2
    assert done.stderr == f"skewscope: error: -o {tmp_path}: is a folder, expected a file\n"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_sigterm_during_simulate_out_leaves_no_temporary_folder(
    tmp_path: Path, spawned: list[subprocess.Popen[str]]
) -> None:
    """SIGTERM once the run's temporary folder exists (waited on, not slept for): the finally
    blocks run, nothing is left beside --out, exit 143."""
    scenario = tmp_path / "long.toml"  # the example for an hour: minutes of work, cut short
    scenario.write_text(
        (ROOT / "examples" / "cluster-skew.toml")
        .read_text()
        .replace("duration_s = 60", "duration_s = 3600")
    )
    work = tmp_path / "w"
    work.mkdir()
    out = work / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skewscope.cli",
            "simulate",
            str(scenario),
            "--out",
            str(out),
            "--jobs",
            "1",
        ],
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    spawned.append(proc)
    deadline = time.monotonic() + 120
    while not list(work.glob(".run.*.tmp")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no temporary folder appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip().splitlines()[-1] == "skewscope: terminated"
    assert "Traceback" not in stderr
    assert list(work.iterdir()) == []


def test_watch_json_lines_into_a_closed_pipe_ends_quietly() -> None:
    """watch --json-lines | head -1 after head has gone: the first good run's line meets the
    closed pipe; the loop ends (no endless runs into nothing), exporter and sampler closed."""
    from skewscope.catalogue import LiveClock
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import load_scenario
    from skewscope.sim.writers.live import serve

    with serve(
        simulate(load_scenario("wrong-weights")),
        "vllm",
        live_clock=LiveClock.SCRAPE,
        step_s=1.5,
        grace_s=60.0,
    ) as c:
        read, write = os.pipe()
        os.close(read)
        try:
            done = skewscope(
                [
                    "watch",
                    "--scrape",
                    *c.urls.values(),
                    "--interval",
                    "0.25s",
                    "--window",
                    "1s",
                    "--last",
                    "4s",
                    "--every",
                    "0.5s",
                    "--json-lines",
                    "--runs",
                    "200",
                ],
                stdout=write,
                stderr=subprocess.PIPE,
            )
        finally:
            os.close(write)
    assert done.returncode == CLOSED_PIPE, done.stderr
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr
