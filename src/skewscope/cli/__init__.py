"""Command line. ``main(argv) -> int`` so tests call it in process.

Each command is a module of this package with ``register(sub)`` (adds its subparser and sets
``run``) and ``run(args) -> int``; a new command is one module and one name in ``COMMANDS``.
Every SkewscopeError becomes one clean line on stderr and its exit code. Heavy imports (polars,
the simulator) happen inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from skewscope import __version__
from skewscope.clock import SYSTEM_CLOCK, Clock, using
from skewscope.errors import SkewscopeError, UsageError

COMMANDS: tuple[str, ...] = (
    "diagnose",
    "compare",
    "simulate",
    "watch",
    "history",
    "whatif",
    "rules",
    "dashboard",
    "mixin",
    "backtest",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or ``only`` that command's: a run of one command parses its
    options only, and the others' modules (the simulator's for whatif) need not be imported."""
    p = argparse.ArgumentParser(
        prog="skewscope",
        description="Find and explain load skew across LLM inference instances and DP ranks.",
    )
    p.add_argument("--version", action="version", version=f"skewscope {__version__}")
    # the metavar names every command also when only one is built (usage lines stay the same)
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"skewscope.cli.{name}").register(sub)
    return p


def main(argv: Sequence[str] | None = None, clock: Clock | None = None) -> int:
    """Run one command; every way it can end is an exit code here (cli/streams.py): a
    SkewscopeError one line and its code, Ctrl-C 130, SIGTERM 143 (SIGHUP 129), a closed
    stdout pipe 141 quietly, a stream that cannot be written (a full disk) one line and 2.
    ``clock`` is the time the command reads (``--last``, watch's runs); the system's by
    default."""
    from skewscope.cli import streams

    try:
        with streams.guarded(), using(clock or SYSTEM_CLOCK):
            return _run(argv)
    except streams.StreamFailed as e:
        streams.silence(e.name)
        if e.closed_pipe:
            return streams.CLOSED_PIPE_EXIT
        if e.name == "stdout":
            streams.say(f"skewscope: error: stdout: cannot write ({e.error.strerror or e.error})")
        return UsageError.exit_code
    except KeyboardInterrupt:
        streams.say("skewscope: interrupted")
        return 130
    except streams.Terminated as e:
        streams.say("skewscope: terminated")
        return e.exit_code


def _run(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or argparse's own usage error
        return int(e.code or 0)
    try:
        from skewscope.cli.common import check_option_sizes

        check_option_sizes(args)
        return int(args.run(args))
    except SkewscopeError as e:
        from skewscope.sources.auth import quoted  # masks any secret a message still quotes

        print(f"skewscope: error: {quoted(e)}", file=sys.stderr)
        return e.exit_code
