"""Options that do not apply to the source read are refused, never silently ignored.

``--step 15s`` beside a profiler folder, or ``--interval`` beside ``--prometheus``, would
otherwise do nothing while the user believes it did something; a serving engineer expects the
tool to say so before any work starts. Every option given on the command line is remembered
(``track``: argparse's default actions replaced by ones that note the option), and ``check``
refuses one that the chosen source does not read with one line naming the option and why
(exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skewscope.errors import UsageError

GIVEN = "_given_options"  # namespace attribute: dests of the options on the command line

SOURCE_NAMES = {
    "profiler": "profiler folders",
    "prometheus": "--prometheus",
    "scrape": "--scrape",
    "gateway": "--gateway-url",
    "report": "saved JSON reports",
}


@dataclass(frozen=True)
class Rule:
    """The sources an option is read for, and what it does (said in the error)."""

    sources: frozenset[str]
    does: str


def rule(sources: str, does: str) -> Rule:
    return Rule(frozenset(sources.split()), does)


_ONLINE_AUTH = "credentials and TLS of the online sources"
RULES: dict[str, Rule] = {
    "step": rule("prometheus", "the query step = window; use --window elsewhere"),
    "selector": rule("prometheus", "label matchers of the PromQL queries"),
    "device_selector": rule("prometheus", "label matchers of device-exporter queries"),
    "duration": rule("scrape", "how long /metrics is sampled"),
    "interval": rule("scrape", "how often /metrics is sampled"),
    "dialect": rule("prometheus scrape", "the metric names of an engine's /metrics"),
    "role_label": rule("prometheus scrape", "the label naming each unit's prefill/decode pool"),
    "device_map": rule("prometheus scrape", "places device-exporter series on units"),
    "start": rule("prometheus profiler", "a scrape samples from now for --duration"),
    "end": rule("prometheus profiler", "a scrape samples from now for --duration"),
    "last": rule("prometheus profiler", "a scrape samples from now for --duration"),
    "scheduler": rule("profiler", "runs the profiler folders' reads on a Dask cluster"),
    "timeout": rule("prometheus scrape gateway", "the deadline of every online request"),
    **{
        dest: rule("prometheus scrape", _ONLINE_AUTH)
        for dest in (
            "token_env",
            "token_file",
            "user",
            "password_env",
            "password_file",
            "ca_file",
            "insecure",
            "cert",
            "key",
        )
    },
}


class _Store(argparse.Action):
    """argparse's ``store``, noting that the option was given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, GIVEN, {*getattr(namespace, GIVEN, ()), self.dest})


class _StoreTrue(_Store):
    """argparse's ``store_true``, noting that the option was given."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: bool = False,
        required: bool = False,
        help: str | None = None,
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, const=True, default=default, required=required, help=help
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, True, option_string)


def track(parser: argparse.ArgumentParser) -> None:
    """Note every ``store`` / ``store_true`` option given to ``parser`` (call before adding
    them)."""
    parser.register("action", None, _Store)
    parser.register("action", "store", _Store)
    parser.register("action", "store_true", _StoreTrue)


def _listed(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def given(args: argparse.Namespace) -> frozenset[str]:
    return frozenset(getattr(args, GIVEN, ()))


def check(
    args: argparse.Namespace,
    sources: set[str],
    command: str,
    rules: Mapping[str, Rule] | None = None,
) -> None:
    """UsageError naming the first option given that none of ``sources`` reads.

    ``rules`` replace the shared ones for a command that reads an option differently (watch's
    --last is the span a scrape keeps too; whatif reads no range).
    """
    table = {**RULES, **(rules or {})}
    read = _listed([SOURCE_NAMES[s] for s in sorted(sources) if s != "gateway"])
    for dest in sorted(given(args) & table.keys()):
        rule = table[dest]
        if rule.sources & sources:
            continue
        flag = "--" + dest.replace("_", "-")
        if not rule.sources:
            raise UsageError(f"{command}: {flag} is not read by {command} ({rule.does})")
        where = _listed([SOURCE_NAMES[s] for s in sorted(rule.sources)])
        raise UsageError(
            f"{command}: {flag} applies to {where} only ({rule.does}); it would "
            f"be ignored with {read}"
        )
