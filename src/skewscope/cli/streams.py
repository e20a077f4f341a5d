"""The process boundary every command shares: its standard streams and SIGTERM.

A reader that goes away (``skewscope rules | head -1``) or a full disk behind a redirected
stdout (``> /dev/full``) fails a write anywhere a command prints: in ``print``, in rich, in
``json.dump``, or in the interpreter's last flush after ``main`` returns. ``guarded`` wraps
``sys.stdout``/``sys.stderr`` for the run so that every such failure becomes one
``StreamFailed``, a BaseException (no ``except Exception`` on the way swallows it), which
``main`` ends the run with: a closed pipe quietly with 128 + SIGPIPE as the shell would report
it, any other write error as one line naming the stream, exit 2. SIGTERM and SIGHUP become
``Terminated`` (also a BaseException) so the ``finally`` blocks of the atomic writes run and
remove their temporary files and a worker pool terminates its workers (``workers.process_pool``),
as Ctrl-C's KeyboardInterrupt does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, TextIO

CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE  # 141: what a shell reports for a process SIGPIPE ended
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # a service manager's stop, a closed terminal


class StreamFailed(BaseException):
    """A write to stdout or stderr failed (``name`` is "stdout" or "stderr")."""

    def __init__(self, name: str, error: OSError) -> None:
        super().__init__(name, error)
        self.name, self.error = name, error

    @property
    def closed_pipe(self) -> bool:
        return isinstance(self.error, BrokenPipeError) or self.error.errno == errno.EPIPE


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: unwind (running every ``finally``) and exit 128 + it."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _Guarded:
    """A text stream whose write and flush failures raise ``StreamFailed``; everything else
    (isatty, fileno, encoding ...) is the wrapped stream's."""

    def __init__(self, inner: TextIO, name: str) -> None:
        self._inner, self._name = inner, name

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except OSError as e:
            raise StreamFailed(self._name, e) from None

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except OSError as e:
            raise StreamFailed(self._name, e) from None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """sys.stdout and sys.stderr guarded, and SIGTERM/SIGHUP raising ``Terminated``, for a run
    (the previous streams and handler come back after it). The streams are flushed inside the
    block, so a write error of the last buffered text is raised here too."""
    saved = sys.stdout, sys.stderr
    sys.stdout = _Guarded(sys.stdout, "stdout")
    sys.stderr = _Guarded(sys.stderr, "stderr")
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, _terminate) for s in ENDING_SIGNALS}
    try:
        yield
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdout, sys.stderr = saved
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _terminate(signum: int, frame: FrameType | None) -> None:
    """Raise once: a second signal while the run unwinds (workers being reaped) is ignored,
    so it cannot cut the clean-up short (SIGKILL still ends the process)."""
    for sig in ENDING_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def silence(name: str) -> None:
    """Point the failed stream's descriptor at /dev/null, so that the text still buffered in
    it is not written again at the interpreter's exit (which would print "Exception ignored"
    and exit 120). Only the process' real stream is touched (not a test's capture)."""
    stream = sys.__stdout__ if name == "stdout" else sys.__stderr__
    current = sys.stdout if name == "stdout" else sys.stderr
    if stream is None or current is not stream:
        return
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def say(text: str) -> None:
    """One line on stderr that may itself find stderr closed or full (then nothing is said)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, StreamFailed):
        silence("stderr")
