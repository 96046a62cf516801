"""The command that re-records baselines, as every output names it: with the options that select
each test's variants (``--neuron-backend``, ``--neuron-hardware``, ``--neuron-execution``,
``--neuron-auto-cast``; those at their defaults left out), so that it re-records the entries the
run compared and not the default variant's. A test costed on several chips gets one command that
re-records them all (``--neuron-hardware trn2,h200``); tests whose variants are selected by other
options get a command each."""

from __future__ import annotations

from typing import Iterable, Sequence

from ..defaults import DEFAULT_AUTO_CAST, DEFAULT_BACKEND, DEFAULT_HARDWARE, BACKEND_TABLE
from ..formatting import RECORD_OPTION, record_command, shell_quote
from ..gate.outcome import TestOutcome
from ..safetext import plain
from ..vocabulary import EAGER


def variant_options(outcomes: Sequence[TestOutcome]) -> tuple[str, ...]:
    """The options that select these outcomes' variants (one test's: its chips, in their
    order), each a shell word; () when every one is the default. What the test's marker
    selects itself (``TestOutcome.marker_selects``: its hardware, execution, auto-cast) needs no
    option: the marker's replaces the option's for that test."""
    if not outcomes:
        return ()
    first = outcomes[0].current
    marker = set(outcomes[0].marker_selects)
    options: list[str] = []
    if first.backend != DEFAULT_BACKEND:
        options += ["--neuron-backend", plain(first.backend)]
    facts = BACKEND_TABLE.get(first.backend)
    chips = list(dict.fromkeys(o.current.hardware for o in outcomes if o.current.hardware))
    if ((facts is None or facts.names_chip) and chips and chips != [DEFAULT_HARDWARE]
            and "hardware" not in marker):
        options += ["--neuron-hardware", plain(",".join(chips))]
    if first.execution and first.execution != EAGER and "execution" not in marker:
        options += ["--neuron-execution", plain(first.execution)]
    if (first.execution and first.execution != EAGER and first.auto_cast
            and first.auto_cast != DEFAULT_AUTO_CAST and "auto_cast" not in marker):
        options += ["--neuron-auto-cast", plain(first.auto_cast)]
    return tuple(options)


def _mode(outcome: TestOutcome) -> tuple[str, str, str]:
    """What selects a variant besides the chip."""
    return outcome.current.backend, outcome.current.execution, outcome.current.auto_cast


def _by_test(outcomes: Iterable[TestOutcome]) -> dict[str, list[TestOutcome]]:
    tests: dict[str, list[TestOutcome]] = {}
    for o in outcomes:
        tests.setdefault(o.nodeid, []).append(o)
    return tests


def record_commands(tests: Iterable[TestOutcome], every: Iterable[TestOutcome] | None = None,
                    all_tests: bool = False) -> list[str]:
    """The commands that re-record the tests of ``tests``, each with every variant ``every``
    (default: ``tests``) holds of it; tests that share their options share a command.
    ``all_tests``: no node ids (the whole suite), one command per set of options."""
    tests = list(tests)
    siblings = _by_test(tests if every is None else every)
    groups: dict[tuple[str, ...], dict[str, None]] = {}  # options -> node ids, in order
    for o in tests:
        # the test's chips of this variant's backend, execution and auto-cast, in their order
        same = [s for s in siblings.get(o.nodeid, [o]) if _mode(s) == _mode(o)] or [o]
        groups.setdefault(variant_options(same), {})[o.nodeid] = None
    if not groups:
        return [record_command()]
    return [_command(options, [] if all_tests else list(ids)) for options, ids in groups.items()]


def _command(options: tuple[str, ...], nodeids: list[str]) -> str:
    base = record_command(*nodeids)
    if not options:
        return base
    head, _, ids = base.partition(f" {RECORD_OPTION}")
    return " ".join([f"{head} {RECORD_OPTION}", *_quoted(options)]) + ids


def _quoted(options: tuple[str, ...]) -> list[str]:
    """Option values are profile names and modes (letters, digits, '-', ',', '='): quoted only
    when something else is in them (a hand-edited report's)."""
    return [word if all(c.isalnum() or c in "-,=_." for c in word) else shell_quote(word)
            for word in options]


def record_hint(tests: Iterable[TestOutcome], every: Iterable[TestOutcome] | None = None,
                all_tests: bool = False, joiner: str = "; then ") -> str:
    """``record_commands`` as one text: the commands joined by ``joiner``."""
    return joiner.join(record_commands(tests, every, all_tests))
