"""Error hierarchy. Every error the user can cause is a SkewscopeError with a one-line message;
the CLI prints it and exits with ``exit_code`` instead of a traceback."""

from __future__ import annotations


class SkewscopeError(Exception):
    """Base class: a one-line, user-facing message."""

    exit_code = 1


class UsageError(SkewscopeError):
    """Bad command-line arguments or combinations."""

    exit_code = 2


class InputError(SkewscopeError):
    """A path is missing, empty or not what was expected."""

    exit_code = 3


class SchemaError(InputError):
    """A file is readable but its header, a column or a cell is not what was expected.

    Messages name the file, the line (1-based, header = line 1) or column, and what was expected.
    """


class SourceError(SkewscopeError):
    """An online source (Prometheus, a /metrics endpoint) failed or answered with an error."""

    exit_code = 4


class SimulationError(SkewscopeError):
    """A scenario file or simulator argument is invalid."""

    exit_code = 5


# --fail-on: the run worked, and its verdict is the one the gate was told to fail on
# (diagnose: imbalanced; compare: not converged, or worse). Kept apart from the error codes.
GATE_EXIT_CODE = 6

MAX_MESSAGE_CHARS = 400


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message fit for a terminal: one line, bounded, no control characters.

    Text quoted from files, servers, labels or folder names can carry newlines, ESC/OSC
    sequences or megabytes; none of that may reach the user's terminal raw.
    """
    cleaned = "".join(
        " " if ch in "\r\n\t" else (ch if ch.isprintable() else f"\\x{ord(ch):02x}")
        for ch in text[: limit * 4]
    )
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
