"""Comparing two sets of summaries (two baseline directories, two reports) test by test.

The verdict of each test is ``gate.judge``'s, the plugin's own, under the policy the plugin
would apply to it: the command line's settings on top of the entry's backend defaults
(``gate.policy.resolve_policy``: a directory may hold several), the marker arguments NEW's entry
was recorded with (baseline schema 7) and the memory limit of NEW's chip. NEW's entry is the
change's own, as against a git ref: a regression its reason was given for (bound to exactly its
numbers, or a schema-5 reason new against OLD) is accepted with that reason, and a marker it
loosened against OLD's needs one. This module only pairs entries up. Pure: no I/O (but the
hardware profiles' memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..defaults import DEFAULT_BACKEND
from ..gate.compare import GatePolicy, Status, with_memory_limit
from ..gate.judge import judge
from ..gate.policy import marker_layer, resolve_policy
from ..gate.outcome import TestOutcome
from .inputs import Entry

# Exit codes of `neuronprof compare`: 0 nothing failed; 1 a regression; 3 a test does not fit in
# its memory (whatever else regressed: a new baseline would not change that); 2 bad input (first).
OK, REGRESSED, BAD_INPUT, DOES_NOT_FIT = 0, 1, 2, 3


@dataclass
class Comparison:
    outcomes: list[TestOutcome]  # tests on both sides, plus tests only in NEW (no-baseline)
    only_old: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, variant)
    # the policy each backend's entries were judged by (the default backend's when there are none)
    policies: dict[str, GatePolicy] = field(default_factory=dict)

    @property
    def regressions(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if o.verdict.status == Status.REGRESSION]

    @property
    def does_not_fit(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if o.verdict.status == Status.DOES_NOT_FIT]

    @property
    def incomparable(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if o.verdict.status == Status.INCOMPARABLE]

    @property
    def compared(self) -> list[TestOutcome]:
        """Entries judged: in both, and comparable."""
        return [o for o in self.outcomes if o.compared]

    def problem(self) -> str | None:
        """Why the inputs could not be compared (exit 2), or None."""
        bad = self.incomparable
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            return f"{bad[0].nodeid} [{bad[0].current.variant}] is not comparable{more}: {bad[0].verdict.message}"
        if not any(o.baseline is not None for o in self.outcomes) and self.outcomes and self.only_old:
            old = sorted({variant for _, variant in self.only_old})
            new = sorted({o.current.variant for o in self.outcomes})
            if set(old) & set(new):
                return "OLD and NEW have no test in common: are they baselines of the same suite?"
            return (f"OLD and NEW have no variant in common (numbers are only compared on the same "
                    f"backend, hardware, execution and auto-cast): OLD has {', '.join(old)}, "
                    f"NEW has {', '.join(new)}")
        return None

    def exit_code(self) -> int:
        if self.problem() is not None:
            return BAD_INPUT
        return DOES_NOT_FIT if self.does_not_fit else REGRESSED if self.regressions else OK


def compare_entries(old: Mapping[str, Mapping[str, Entry]], new: Mapping[str, Mapping[str, Entry]],
                    overrides: Mapping[str, Any]) -> Comparison:
    """``overrides``: the command line's (GatePolicy field -> value; None: not given), applied on
    top of each entry's backend defaults as the plugin's options are."""
    outcomes: list[TestOutcome] = []
    only_old: list[tuple[str, str]] = []
    policies: dict[str, GatePolicy] = {}
    for nodeid in sorted(set(old) | set(new)):
        olds, news = old.get(nodeid, {}), new.get(nodeid, {})
        for variant in sorted(set(olds) | set(news)):
            before, after = olds.get(variant), news.get(variant)
            if after is None:
                only_old.append((nodeid, variant))
                continue
            location = after.location or (before.location if before else None) \
                or (nodeid.split("::", 1)[0], 0)
            backend, hardware = after.summary.backend, after.summary.hardware
            if backend not in policies:
                policies[backend] = resolve_policy(backend, overrides)

            def policy_for(marker: Any, backend: str = backend, hardware: str = hardware) -> GatePolicy:
                return with_memory_limit(resolve_policy(backend, overrides, marker_layer(marker or {})),
                                         hardware, backend)

            # NEW's entry is the change's own: a regression its reason was given for is accepted,
            # shown with the reason, and a marker it loosened needs one (gate/judge.py, as
            # against a git ref)
            old_summary = before.summary if before is not None else None
            verdict = judge(after.summary, old_summary, policy_for,
                            own=after.summary if after.summary.reason else None,
                            missing=f"not in OLD for {variant}")
            outcomes.append(TestOutcome(nodeid, location, verdict, after.summary, old_summary))
    if not policies:  # nothing in NEW: say what the default backend's entries would get
        policies[DEFAULT_BACKEND] = resolve_policy(DEFAULT_BACKEND, overrides)
    return Comparison(outcomes, only_old, policies)
