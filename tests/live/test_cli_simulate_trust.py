"""`skewscope simulate` under hostile arguments, scenarios and interruptions: one clean line and
the right exit code, never a traceback; sizes refused before memory is spent; writes whole or
absent; Ctrl-C stops live mode; a silent client cannot pin a server thread."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.sim_fixtures import make_result
from skewscope.cli import main
from skewscope.errors import SimulationError
from skewscope.sim import limits
from skewscope.sim.spec import GroundTruth, Scenario
from skewscope.sim.workload import WorkloadSpec
from skewscope.sim.writers import truth
from skewscope.sim.writers.live import serve

SRC = Path(__file__).resolve().parents[2] / "src"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("skewscope: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--speed", "0"], "--speed"),
        (["--speed", "-2"], "--speed"),
        (["--speed", "nan"], "--speed"),
        (["--speed", "inf"], "--speed"),
        (["--speed", "fast"], "--speed"),
        (["--port", "70000"], "--port"),
        (["--port", "-1"], "--port"),
        (["--port", "65534"], "ports up to 65537"),
        (["--seed", "-1"], "--seed"),
        (["--seed", "1.5"], "--seed"),
        (["--metrics-interval", "nan"], "--metrics-interval"),
        (["--clock", "manual", "--speed", "3"], "--speed"),
        (["--clock", "scrape", "--metrics-interval", "0s"], "--metrics-interval"),
    ],
)
def test_bad_live_arguments_are_one_line_usage_errors(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "balanced", "--serve", *args]) == 2
    assert expected in _one_line_error(capsys)


def test_a_stepped_clock_without_serve_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "balanced", "--out", str(tmp_path / "o"), "--clock", "manual"]) == 2
    assert "add --serve" in _one_line_error(capsys)
    assert not (tmp_path / "o").exists()


def test_port_in_use_names_the_port(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # instance 0 asks for the taken port first (instance k gets port + k)
        assert main(["simulate", "balanced", "--serve", "--port", str(port)]) == 2
    line = _one_line_error(capsys)
    assert f"127.0.0.1:{port}" in line and "choose another port" in line


def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "f"
    f.write_text("mine")
    assert main(["simulate", "balanced", "--out", str(f)]) == 2
    assert "not a folder" in _one_line_error(capsys)
    assert f.read_text() == "mine"


_TRUTH = '[truth]\nverdict = "balanced"\n'


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("[workload]\nrate = inf\n", "workload.rate"),
        ("duration_s = nan\n", "duration_s"),
        ("[cluster.rank]\nspeed = nan\n", "cluster.rank.speed"),
        ("[workload]\ninput = { median = nan }\n", "workload.input.median"),
        ('[gateway]\npolicy = "weighted"\nweights = [1.0, nan, 1.0, 1.0]\n', "gateway.weights"),
        (
            "[workload.burst]\nstart_s = 1\nduration_s = 5\nmultiplier = -inf\n",
            "workload.burst.multiplier",
        ),
        ("seed = -1\n", "seed"),
        ("[cluster]\ninstances = 1000000000\n", "cluster.instances"),
        ("[cluster]\ninstances = 64\ndp_ranks = 64\n", "cluster.instances"),
        ("[workload]\nrate = 1e12\n", "workload.rate"),
        ("duration_s = 1e15\n", "duration_s"),
        ("[cluster.rank]\nblock_size = 100000000\n", "cluster.rank.block_size"),
        ("[cluster.rank]\nfixed_ms = 0.0001\n", "cluster.rank.fixed_ms"),
        (
            "[workload]\ninput = { median = 1e300, max = 9000000000000000000 }\n",
            "workload.input.max",
        ),
        (f"seed = {2**64}\n", "seed"),  # was accepted silently
        (f"seed = {2**63}\n", "seed"),
        (f"duration_s = {10**400}\n", "duration_s"),  # an int no float holds
        (f"[cluster]\ninstances = {10**30}\n", "cluster.instances"),
        ('name = "x\\u001b[31mred"\n', "name"),  # an ESC sequence in a name
        ('summary = "a\\nb"\n', "summary"),
        ('[gateway]\npolicy = "round_robin\\u0007"\n', "gateway.policy"),
    ],
)
def test_bad_or_huge_scenarios_are_refused_naming_the_key(
    body: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = tmp_path / "s.toml"
    sc.write_text(body + _TRUTH)
    assert main(["simulate", str(sc), "--out", str(tmp_path / "o")]) == 5
    line = _one_line_error(capsys)
    assert "s.toml" in line and f"'{key}" in line
    assert not (tmp_path / "o").exists()


def test_limits_are_above_the_shipped_scenarios_and_the_benchmark() -> None:
    from skewscope.sim.scenario import builtin_scenarios

    for sc in builtin_scenarios().values():
        limits.check_limits(sc)  # would raise
    # benchmarks/bench_sim.py: one hour of 8 x 4 ranks at 64 req/s, tables kept
    limits.check_limits(_hour(8, 4, 64.0))
    # issue 14's goal: one hour of 64 x 8 ranks at 512 req/s, admitted when its steps stream
    # (~74 M step rows would be ~11 GiB kept: refused then, naming the key)
    goal = _hour(64, 8, 512.0)
    limits.check_limits(goal, keep_steps=False)
    with pytest.raises(SimulationError, match=r"'cluster\.rank\.fixed_ms'.*GiB"):
        limits.check_limits(goal)


def _hour(instances: int, ranks: int, rate: float) -> Scenario:
    return Scenario(
        name="bench",
        summary="",
        truth=GroundTruth("bench", "balanced", "instance"),
        duration_s=3600.0,
        instances=instances,
        dp_ranks=ranks,
        workload=WorkloadSpec(rate=rate),
    )


def test_non_utf8_scenario_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = tmp_path / "latin1.toml"
    sc.write_bytes('name = "caf\xe9"\n'.encode("latin-1") + _TRUTH.encode())
    assert main(["simulate", str(sc), "--out", str(tmp_path / "o")]) == 5
    assert "latin1.toml: line 1: not UTF-8" in _one_line_error(capsys)


def test_too_many_history_samples_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    om = tmp_path / "h.om"
    assert (
        main(["simulate", "balanced", "--openmetrics", str(om), "--metrics-interval", "1ms"]) == 5
    )
    assert "choose a longer interval" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------- atomic writes
def test_failed_out_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def disk_full(result: object, out: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(truth, "write_truth", disk_full)  # after the profiler folders
    out = tmp_path / "run"
    assert main(["simulate", "balanced", "--out", str(out)]) == 2
    assert "No space left on device" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor a temp folder


def test_interrupted_out_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def ctrl_c(result: object, out: Path) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(truth, "write_truth", ctrl_c)
    assert main(["simulate", "balanced", "--out", str(tmp_path / "run")]) == 130
    assert list(tmp_path.iterdir()) == []


def test_force_replaces_instance_folders_and_keeps_other_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / "inst-0").mkdir(parents=True)
    (out / "inst-0" / "stale.csv").write_text("old")
    (out / "NOTES.txt").write_text("mine")
    assert main(["simulate", "balanced", "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "NOTES.txt",
        "inst-0",
        "inst-1",
        "inst-2",
        "inst-3",
        "truth.json",
    ]
    assert not (out / "inst-0" / "stale.csv").exists()
    assert (out / "inst-0" / "request.csv").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_failed_openmetrics_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope.sim.writers import history

    def half_then_fail(out, *a, **k):  # type: ignore[no-untyped-def]
        out.write(b"# TYPE partial gauge\n")
        raise OSError(28, "No space left on device")

    om = tmp_path / "h.om"
    om.write_text("previous history\n")
    monkeypatch.setattr(history, "write_family", half_then_fail)
    assert main(["simulate", "balanced", "--openmetrics", str(om), "--force"]) == 2
    assert "--openmetrics" in _one_line_error(capsys)
    assert om.read_text() == "previous history\n"
    assert [p.name for p in tmp_path.iterdir()] == ["h.om"]  # no temp file, no spill folder


def test_existing_openmetrics_file_needs_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--openmetrics refuses to overwrite like --out and -o (it used to replace the file)."""
    om = tmp_path / "h.om"
    om.write_text("previous history\n")
    assert main(["simulate", "balanced", "--openmetrics", str(om)]) == 2
    assert _one_line_error(capsys) == (
        f"skewscope: error: --openmetrics {om}: file exists (use --force to overwrite)"
    )
    assert om.read_text() == "previous history\n"
    assert main(["simulate", "balanced", "--openmetrics", str(om), "--force"]) == 0
    assert om.read_text().startswith("# HELP") or om.read_text().startswith("# TYPE")


# ---------------------------------------------------------------------------- live mode
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    return env


@contextlib.contextmanager
def _serving(*args: str) -> Iterator[subprocess.Popen[str]]:
    """``skewscope simulate ARGS`` as a process, killed on the way out if it still runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "skewscope.cli", "simulate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def _ctrl_c(proc: subprocess.Popen[str], timeout_s: float) -> None:
    """A real SIGINT, as a user's Ctrl-C: exit 0 and a line, no traceback."""
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "interrupted" in err


def test_ctrl_c_stops_serve_cleanly() -> None:
    """A real process and a real SIGINT, as a user's Ctrl-C (it used to be ignored)."""
    with _serving("balanced", "--serve") as proc:
        first: list[str] = []
        reader = threading.Thread(
            target=lambda: first.append(proc.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(60)
        assert first and first[0].startswith("serving inst-0 at http://127.0.0.1:"), first
        _ctrl_c(proc, timeout_s=10)


def test_serve_on_a_manual_clock_moves_by_the_control_endpoint() -> None:
    """``simulate --serve --clock manual`` as a test drives it from outside: the replay stays
    at its start until ``POST /sim/advance`` moves it, and every answer says when it is."""
    import httpx

    with _serving("balanced", "--serve", "--clock", "manual") as proc:
        lines: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if line.startswith("advance simulated time:"):
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(60)
        assert lines and lines[-1].startswith("advance simulated time: POST http://127.0.0.1:"), (
            lines
        )
        urls = [ln.split(" at ", 1)[1] for ln in lines if ln.startswith("serving ")]
        control = lines[-1].split()[4]
        assert control == urls[0].replace("/metrics", "/sim/advance")
        start = float(httpx.get(urls[1], timeout=10).headers["X-Skewscope-Sim-Time"])
        assert float(httpx.get(urls[1], timeout=10).headers["X-Skewscope-Sim-Time"]) == start
        moved = httpx.post(control, json={"seconds": 12.5}, timeout=10).json()
        assert moved["sim_time"] == start + 12.5 and moved["clock"] == "manual"
        for url in urls:
            assert float(httpx.get(url, timeout=10).headers["X-Skewscope-Sim-Time"]) == (
                start + 12.5
            )
        _ctrl_c(proc, timeout_s=30)


def test_silent_client_is_disconnected_after_the_read_timeout() -> None:
    result = make_result(n_requests=30, duration_s=20.0)
    with serve(result, "vllm", speed=1.0, grace_s=5.0, read_timeout_s=0.3) as cluster:
        port = int(cluster.urls["inst-0"].rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            # sends nothing: the server closes its side (recv -> b"") instead of waiting forever
            assert idle.recv(1024) == b""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as partial:
            partial.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finishes the headers
            assert partial.recv(1024) == b""


# ------------------------------------------------------------------------------ progress
def test_simulation_progress_is_periodic_lines_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope import progress

    clock = iter(range(0, 10**9, 100))  # every update is "long after" the last line
    monkeypatch.setattr(progress.time, "monotonic", lambda: float(next(clock)))
    sc = tmp_path / "busy.toml"
    sc.write_text("duration_s = 60\n[workload]\nrate = 80\n" + _TRUTH)  # ~4,800 arrivals
    assert main(["simulate", str(sc), "--openmetrics", str(tmp_path / "h.om")]) == 0
    err = capsys.readouterr().err
    done = [
        float(m.replace(",", ""))
        for m in re.findall(r"^skewscope: simulating busy: ([\d,]+) of 60 simulated s$", err, re.M)
    ]
    assert len(done) >= 2 and done == sorted(done) and done[-1] > 0
    assert "\r" not in err and "\x1b" not in err  # plain lines, no bar


def test_serve_progress_follows_the_replay_until_it_stops() -> None:
    import io

    from skewscope.cli.simulate import wait_with_progress
    from skewscope.progress import Progress

    result = make_result(n_requests=30, duration_s=20.0)
    buf = io.StringIO()
    with serve(result, "vllm", speed=40.0, grace_s=0.2) as cluster:
        progress = Progress(
            "replaying at 40x",
            result.end_s - result.start_s,
            "simulated s",
            every_s=0.0,
            out=buf,
            tty=False,
        )
        wait_with_progress(cluster, progress, slice_s=0.05)  # returns when the watchdog stops it
        assert cluster.stopped
    lines = buf.getvalue().splitlines()
    assert len(lines) >= 3 and all(ln.startswith("skewscope: replaying at 40x: ") for ln in lines)


@pytest.mark.parametrize("tty", [False, True])
def test_progress_escapes_a_hostile_scenario_name(tty: bool) -> None:
    import io

    from skewscope.progress import Progress

    buf = io.StringIO()
    t = Progress(
        "simulating evil\x1b]0;pwned\x07[/]", 10.0, "simulated s", every_s=0.0, out=buf, tty=tty
    )
    t.update(5.0)
    t.close()
    assert "\x1b]0" not in buf.getvalue() and "\x07" not in buf.getvalue()
