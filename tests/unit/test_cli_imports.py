"""A run of one command builds that command's parser only, with the same usage and help, and
imports nothing of the others (whatif's parser imports the simulator); a diagnose loads its
analysis on a thread while the queries are answered or the profiler folders read."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skewscope.cli import COMMANDS, build_parser, common, readers


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


def test_one_command_imports_only_its_own_parser() -> None:
    out = _run(
        "import sys\nfrom skewscope.cli import main\n"
        "main(['diagnose', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('skewscope.')))"
    )
    assert "skewscope.cli.diagnose" in out
    assert "skewscope.cli.whatif" not in out and "skewscope.sim" not in out


def test_one_command_parser_has_the_same_usage_and_help() -> None:
    for name in COMMANDS:
        whole, one = build_parser(), build_parser(name)
        assert one.format_usage() == whole.format_usage()  # what an unknown option prints
        sub_whole = whole._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
        sub_one = one._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
        assert sub_one.format_help() == sub_whole.format_help()


def test_warm_imports_loads_on_a_thread_and_leaves_failures_to_the_caller() -> None:
    thread = common.warm_imports("skewscope.no_such_module", "json")
    assert isinstance(thread, threading.Thread)
    thread.join(timeout=30)
    assert not thread.is_alive()
    out = _run(
        "import sys\nfrom skewscope.cli import common\n"
        "common.warm_imports('skewscope.report.markdown').join()\n"
        "print('skewscope.report.markdown' in sys.modules)"
    )
    assert out.strip() == "True"


def test_collector_paused_restores_the_collector_state() -> None:
    import gc

    assert gc.isenabled()
    with common.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    try:
        with common.collector_paused():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.isenabled()
    gc.disable()
    try:
        with common.collector_paused():
            pass
        assert not gc.isenabled()  # it was off: left off
    finally:
        gc.enable()


def test_cycles_made_while_paused_are_collected_afterwards() -> None:
    import gc
    import weakref

    class Node:
        pass

    with common.collector_paused():
        node = Node()
        node.self = node  # type: ignore[attr-defined]
        alive = weakref.ref(node)
        del node
    assert alive() is not None  # a cycle: reference counting alone does not free it
    assert gc.get_freeze_count() == 0  # nothing is left frozen for good
    gc.collect()
    assert alive() is None


def test_online_diagnose_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from skewscope.cli import main
    from skewscope.errors import SourceError

    seen: list[bool] = []

    def load(args: object, window: object) -> None:
        seen.append(gc.isenabled())
        raise SourceError("stop here")

    monkeypatch.setattr(readers, "load_prometheus_evidence", load)
    code = main(["diagnose", "--prometheus", "http://127.0.0.1:9", "--last", "1h"])
    assert code == 4 and seen == [False]
    assert gc.isenabled()


def test_offline_diagnose_imports_its_analysis_on_the_import_thread(tmp_path: Path) -> None:
    """The analysis (numpy and all) is imported by the import thread, started before the
    profiler folders are read, not by the main thread after them."""
    example = Path(__file__).resolve().parents[1].parent / "examples" / "cluster-skew"
    out = _run(
        "import sys, threading\n"
        "seen = {}\n"
        "class Spy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'skewscope.analysis.diagnose':\n"
        "            seen[name] = threading.current_thread().name\n"
        "sys.meta_path.insert(0, Spy())\n"
        "from skewscope.cli import main\n"
        f"code = main(['diagnose', {str(example)!r}, '--format', 'json',\n"
        f"             '-o', {str(tmp_path / 'r.json')!r}])\n"
        "print(code, seen)"
    )
    assert out.split(" ", 1) == ["0", "{'skewscope.analysis.diagnose': 'skewscope-imports'}\n"]
