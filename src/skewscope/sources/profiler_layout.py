"""Where the msServiceProfiler CSVs of each instance are: spec parsing and folder discovery.

The profiler writes no instance identity into its CSVs, so an instance is a folder: the user
points at one output folder per instance (``NAME=PATH`` or ``PATH``) or at a folder holding one
sub-folder per instance. ``msserviceprofiler parse --output-path OUT`` often nests the CSVs one
level down (``OUT/<something>/request.csv``), so both depths are accepted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skewscope.errors import InputError

# File kinds the reader understands, by file name.
PROFILER_FILES: tuple[str, ...] = (
    "request.csv",
    "batch.csv",
    "kvcache.csv",
    "forward.csv",
    "request_status.csv",
)


@dataclass(frozen=True)
class InstanceFiles:
    """One instance: its name and the profiler CSVs found for it (file name -> path)."""

    name: str
    folder: Path
    files: dict[str, Path]


def _entries(folder: Path) -> tuple[dict[str, Path], list[Path]]:
    """One listing of ``folder``: its profiler CSVs (any entry of that name: a directory or a
    broken link named request.csv is reported by the reader, not silently skipped) and its
    sub-folders, sorted. One ``scandir`` per folder: a fleet of 10,000 instance folders is
    listed with 10,000 calls, not a stat of every expected file name in each."""
    csvs: set[str] = set()
    subs: list[str] = []
    with os.scandir(folder) as it:
        for entry in it:
            if entry.name in _KNOWN:
                csvs.add(entry.name)
            elif _is_dir(entry):
                subs.append(entry.name)
    return (
        {f: folder / f for f in PROFILER_FILES if f in csvs},
        [folder / name for name in sorted(subs)],
    )


_KNOWN = frozenset(PROFILER_FILES)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


# Sub-folder names that are a run's output folder, not an instance: the profiler's MMDD-HHMM
# run folders, timestamps, and the usual ``--output-path`` names.
OUTPUT_FOLDER = re.compile(r"^[\d_.\-]+$|^(out|output|outputs|csv|result|results|analysis)$", re.I)


def _nested(subs: list[Path]) -> list[tuple[Path, dict[str, Path], list[Path]]]:
    """Each sub-folder with its CSVs and sub-folders (one listing each)."""
    return [(sub, *_entries(sub)) for sub in subs]


def _instance_csvs(csvs: dict[str, Path], subs: list[Path]) -> dict[str, Path] | None:
    """CSVs of a folder (listed as ``csvs``, ``subs``) read as one instance: directly in it,
    else in its one output sub-folder.

    One sub-folder with CSVs is an instance of a folder of instances (``run/inst-0/*.csv``)
    unless its name looks like an output folder (``inst-0/0423-0852/*.csv``).
    """
    if csvs:
        return csvs
    nested = [(sub, c) for sub, c, _ in _nested(subs) if c]
    if len(nested) == 1 and OUTPUT_FOLDER.match(nested[0][0].name):
        return nested[0][1]
    return None


def _split_spec(spec: str) -> tuple[str | None, Path]:
    """``NAME=PATH`` -> (NAME, PATH); a bare PATH (even one containing '=' that exists) -> PATH."""
    if "=" in spec and not _exists(Path(spec)):
        name, _, path = spec.partition("=")
        if not name or not path:
            raise InputError(f"profiler spec {spec!r}: expected PATH or NAME=PATH")
        return name, Path(path)
    return None, Path(spec)


def _exists(path: Path) -> bool:
    """``path.exists()``, False too for a name the OS refuses (too long: ENAMETOOLONG)."""
    try:
        return path.exists()
    except OSError:
        return False


def discover(spec: str) -> list[InstanceFiles]:
    """Instances named by one spec; raises InputError when the path holds no profiler CSV."""
    name, path = _split_spec(spec)
    if not _exists(path):
        raise InputError(f"{path}: no such folder")
    if not path.is_dir():
        raise InputError(f"{path}: not a folder (expected a msServiceProfiler output folder)")
    csvs, subs = _entries(path)
    if csvs:
        return [InstanceFiles(name or path.resolve().name, path, csvs)]
    listed = _nested(subs)  # each sub-folder listed once, for both readings of the path
    nested = [(sub, c) for sub, c, _ in listed if c]
    if len(nested) == 1 and OUTPUT_FOLDER.match(nested[0][0].name):
        return [InstanceFiles(name or path.resolve().name, path, nested[0][1])]
    found = [
        InstanceFiles(sub.name, sub, found_csvs)
        for sub, sub_csvs, sub_subs in listed
        if (found_csvs := _instance_csvs(sub_csvs, sub_subs)) is not None
    ]
    if not found:
        expected = ", ".join(PROFILER_FILES)
        raise InputError(
            f"{path}: no msServiceProfiler CSV found in it or its sub-folders (expected {expected})"
        )
    if name is not None and len(found) == 1:
        found = [InstanceFiles(name, found[0].folder, found[0].files)]
    elif name is not None:  # NAME=PATH over a folder of instances: prefix the sub-folder names
        found = [InstanceFiles(f"{name}-{i.name}", i.folder, i.files) for i in found]
    return found


def discover_all(specs: Sequence[str]) -> list[InstanceFiles]:
    """Instances of all specs, in order; instance names must be unique."""
    if not specs:
        raise InputError("no profiler folder given")
    instances = [inst for spec in specs for inst in discover(spec)]
    seen: dict[str, Path] = {}
    for inst in instances:
        if inst.name in seen:
            raise InputError(
                f"instance name {inst.name!r} used by both {seen[inst.name]} and {inst.folder};"
                " name them with NAME=PATH"
            )
        seen[inst.name] = inst.folder
    return instances
