"""The rows of the two tables that `neuronprof compare` prints and the Markdown summaries show:
per-test totals and per-op changes; what every output says of a test's device memory (its
peak, what is live at it by origin, what would make it fit) and of a failure's largest finding.
One builder each; each renderer says how a verdict reads in
a cell (upper case in text, bold in Markdown) and lays the rows out (``terminal.text_table``,
``markdown.table``), escaping the cells its own way."""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

from ..formatting import format_bytes, format_delta, format_us, relative_change
from ..gate.compare import (MEMORY_KINDS, NOT_COMPARED, TOTAL, Finding, Kind, Status, value_in,
                            value_text)
from ..gate.memory import MemorySummary, fit_suggestions, merged_changes, peak_changes
from ..gate.outcome import TestOutcome, compared_with, op_changes

TOTALS_HEADERS = ["test", "variant", "baseline", "current", "delta", "verdict"]
# Outcomes with no profile of their own: no test ran into a region, or none produced the entry
UNMEASURED = (Status.NOT_PROFILED, Status.NOT_GATED)
OP_HEADERS = ["op", "engine", "module", "old", "new", "delta", "calls", "gate"]

Cell = Callable[[str], object]  # a verdict (or a node id) as one renderer writes it in a cell


# --- a verdict in a word -------------------------------------------------------------------------

DOES_NOT_FIT = "does-not-fit"
ACCEPTED, ALLOWED, NEW = "accepted", "allowed", "new"


def verdict_word(outcome: TestOutcome) -> str:
    """What a test's verdict reads as in every table and on the page's badge: ``does-not-fit``
    (its peak of device memory is above its limit: a verdict of its own, or the limit's finding
    of a recorded test), ``regression``, ``accepted`` (it passes against the base because the
    pull request accepted its changes, with a reason), ``allowed`` (a pass where ops its
    marker's allow= names changed), ``new`` (no baseline yet), else its status (``pass``,
    ``improved``, ``incomparable`` ...)."""
    verdict = outcome.verdict
    status = str(verdict.status)  # however a report spells it ("does not fit")
    if re.sub(r"[^a-z]+", "-", status.lower()) == DOES_NOT_FIT or any(f.kind is Kind.FIT for f in verdict.regressions):
        return DOES_NOT_FIT
    if verdict.failed:
        return Status.REGRESSION.value
    if verdict.accepted:
        return ACCEPTED
    if verdict.status == Status.PASS and verdict.allowed:
        return ALLOWED
    if verdict.status == Status.NO_BASELINE:
        return NEW
    return status


# The words in the order a count line lists them: failures first
WORD_ORDER = (Status.REGRESSION.value, DOES_NOT_FIT, ACCEPTED, Status.IMPROVED.value, ALLOWED,
              Status.PASS.value, NEW, Status.INCOMPARABLE.value, Status.NOT_PROFILED.value,
              Status.NOT_GATED.value, Status.RECORDED.value)


def verdict_counts(outcomes: Iterable[TestOutcome]) -> list[tuple[str, int]]:
    """How many outcomes read as each verdict word, in WORD_ORDER."""
    counts = Counter(verdict_word(o) for o in outcomes)
    return sorted(counts.items(), key=lambda kv: (WORD_ORDER.index(kv[0]) if kv[0] in WORD_ORDER else 99, kv[0]))


def totals_rows(outcomes: Iterable[TestOutcome], verdict: Cell, test: Cell = str,
                memory: bool = False) -> list[list[object]]:
    """A row per test: its total device time before and after, with ``memory`` its peak
    (``peak_cell``), and the gate's verdict in a word (``verdict_word``)."""
    return [[test(o.nodeid), o.current.variant,
             format_us(o.baseline.total_device_time_us) if o.baseline else "-",
             "-" if o.verdict.status in UNMEASURED else format_us(o.current.total_device_time_us),
             format_delta(o.delta),
             *([peak_cell(o)] if memory else []), verdict(verdict_word(o))]
            for o in outcomes]


# --- findings: one row per op ---------------------------------------------------------------------

_TIMED = (Kind.SLOWER, Kind.FASTER, Kind.ALLOWED)


def paired(findings: Sequence[Finding]) -> list[tuple[Finding, Finding | None]]:
    """The findings one row each, in their order, an op's call-count finding (kind "calls")
    beside its time finding (slower, faster, allowed) where it has both: a table shows an op
    once. A calls finding alone keeps its own row."""
    calls = {f.op: f for f in findings if f.kind == Kind.CALLS}
    timed = {f.op for f in findings if f.kind in _TIMED and f.op in calls}
    return [(f, calls[f.op] if f.kind in _TIMED and f.op in timed else None)
            for f in findings if not (f.kind == Kind.CALLS and f.op in timed)]


def merged_reason(time_reason: str, calls_reason: str) -> str:
    """One reason for an op's time and calls: the calls' when it says the time's and more (``(same
    total work)``), else both."""
    if calls_reason == time_reason or not calls_reason:
        return time_reason
    if calls_reason.replace(" (same total work)", "") == time_reason or not time_reason:
        return calls_reason
    return f"{time_reason}; {calls_reason}"


def finding_cells(finding: Finding, calls: Finding | None = None) -> list[str]:
    """``Finding.cells`` of a finding, with its op's call-count finding merged in: ``196.100 us
    (12 calls)`` -> ``802.153 us (96 calls)``, one reason."""
    cells = finding.cells()
    if calls is not None:
        cells[2] = f"{cells[2]} ({_calls(calls.baseline)})"
        cells[3] = f"{cells[3]} ({_calls(calls.current)})"
        cells[6] = merged_reason(cells[6], calls.reason)
    return cells


def _calls(count: float) -> str:
    return f"{int(count)} call{'s' if int(count) != 1 else ''}"


def finding_rows(findings: Sequence[Finding]) -> list[list[str]]:
    """A row per op (``paired``), with Finding.HEADERS' columns: what every findings table shows."""
    return [finding_cells(f, calls) for f, calls in paired(findings)]


def totals_headers(memory: bool) -> list[str]:
    """TOTALS_HEADERS, with a peak column before the verdict when ``memory``."""
    return [*TOTALS_HEADERS[:-1], *([PEAK_HEADER] if memory else []), TOTALS_HEADERS[-1]]


# base -> what the change recorded (accepted, its delta and why), and what this run measured
ACCEPTED_HEADERS = ["op", "base", "accepted", "delta", "this run", "what changed", "reason"]
NO_REASON = "no reason given"


SHORT_COMMIT = 12


def compared_with_text(outcomes: Iterable[TestOutcome], escape: Callable[[object], str]) -> str:
    """What the run was gated against, for the head of every output: "gated against the
    baseline files at origin/main (1a2b3c4d5e6f: the commit's subject)", each value escaped
    with ``escape``; "" for a run gated against the working tree's files."""
    outcomes = list(outcomes)
    base = compared_with(outcomes)
    if base is None:
        return ""
    ref, commit, subject = base
    what = ("gated against the tests re-simulated at" if any(o.base_resimulated for o in outcomes)
            else "gated against the baseline files at")
    return (f"{what} {escape(ref)} ({escape(commit[:SHORT_COMMIT])}"
            + (f": {escape(subject)}" if subject else "") + ")")


def accepted_reason(outcome: TestOutcome) -> str:
    """The reason a pull request gave for its changes of a test's entry, or NO_REASON."""
    return outcome.verdict.accepted_reason or NO_REASON


def accepted_rows(outcome: TestOutcome, reason: bool = True) -> list[list[str]]:
    """A row per change the pull request made to a test's entry (gated against a git ref):
    base -> its own entry, per op, with the reason it gave (``reason``: as a column, for
    tables of several tests; ACCEPTED_HEADERS[:-1] without)."""
    given = [accepted_reason(outcome)] if reason else []
    rows: list[list[str]] = []
    allow = (outcome.current.policy or {}).get("allow", {})
    for finding, calls in paired(outcome.verdict.accepted):  # an op once, its calls beside its time
        op, _, old, new, delta, _, why = finding_cells(finding, calls)
        measured = measured_cell(outcome, finding, allow)
        if calls is not None:
            measured += f" ({measured_cell(outcome, calls, allow)})"
        rows.append([op, old, new, delta, measured, why, *given])
    return rows


def measured_cell(outcome: TestOutcome, finding: Finding, allow: Mapping[str, str]) -> str:
    """What this run measured of an accepted change's number, beside what was accepted: its
    delta from the base where it differs ("83.023 us (+250.5%)"); "-" where a change covers
    several ops (a replacement)."""
    if finding.kind == Kind.POLICY:
        return finding.cells()[3]
    value = value_in(outcome.current, finding, allow)
    if value is None:
        return "-"
    shown = value_text(finding, value)
    if shown == finding.cells()[3] or outcome.verdict.status == Status.INCOMPARABLE:
        return shown
    return f"{shown} ({format_delta(relative_change(finding.baseline, value))})"


def op_rows(outcome: TestOutcome, verdict: Cell) -> list[list[object]]:
    """A row per op whose time or calls changed, largest change first; ``verdict`` writes what
    the gate flagged it ("regression", "improved", "allowed"; "" when nothing)."""
    return [[c.op, c.engine, c.module or "-", format_us(c.old_us) if c.old_count else "-",
             format_us(c.new_us) if c.new_count else "-", format_delta(c.delta), c.calls,
             verdict(c.flag)]
            for c in op_changes(outcome)]


# --- device memory ----------------------------------------------------------------------------

PEAK_HEADER = "peak"  # the column of a test's peak device memory in the totals tables
TENSOR_HEADERS = ["op", "module", "shape", "dtype", "count", "bytes", "at baseline peak"]
TENSORS_TITLE = "live at the peak, by what made it (new or larger first)"
MAX_TENSOR_ROWS = 10  # groups listed in a failure; the entry keeps up to 50


def has_memory(outcomes: Iterable[TestOutcome]) -> bool:
    """Some outcome measured its device memory (the simulated backend): the tables then have a
    peak column; measured backends, which never do, keep their layout."""
    return any(o.current.memory is not None for o in outcomes)


def peak_delta(outcome: TestOutcome) -> float | None:
    """Relative change of the peak, where both sides measured it and the test was compared
    (as ``TestOutcome.delta`` for the time); None otherwise."""
    baseline, new = outcome.baseline, outcome.current.memory
    if baseline is None or outcome.verdict.status in NOT_COMPARED:
        return None
    old = baseline.memory
    if old is None or new is None or not old.peak_bytes:
        return None
    return relative_change(old.peak_bytes, new.peak_bytes)


def peak_cell(outcome: TestOutcome) -> str:
    """``1.2 GiB (+25.0%)``: the peak, and its change where there is one; "-" when unknown."""
    memory = outcome.current.memory
    if memory is None:
        return "-"
    delta = peak_delta(outcome)
    return format_bytes(memory.peak_bytes) + (f" ({format_delta(delta)})" if delta is not None else "")


def memory_line(memory: MemorySummary) -> str:
    """``peak 1.2 GiB (resident 512 MiB, allocated 768 MiB); SBUF peak 20 MiB, spilled 3 MiB``
    (SBUF in graph execution only)."""
    line = (f"peak {format_bytes(memory.peak_bytes)} (resident {format_bytes(memory.resident_bytes)}, "
            f"allocated {format_bytes(memory.allocated_bytes)})")
    sbuf = [f"{label} {format_bytes(value)}" for label, value in
            (("SBUF peak", memory.sbuf_peak_bytes), ("spilled", memory.spilled_bytes)) if value is not None]
    return line + ("; " + ", ".join(sbuf) if sbuf else "")


def memory_finding(outcome: TestOutcome) -> bool:
    """The gate flagged the test's device memory: its peak grew, or it does not fit."""
    return any(f.kind in MEMORY_KINDS for f in outcome.verdict.regressions)


def tensor_rows(outcome: TestOutcome) -> list[list[object]]:
    """A row per group of tensors live at the peak (by origin: the op and module that made them,
    their shape and dtype), those new or larger than at the baseline's peak first, then the
    largest, at most MAX_TENSOR_ROWS: its count and bytes, and what the baseline's peak had of
    it (``GroupChange.cell``: "yes", "new", "was 2"; "-" when the baseline does not say, as with
    no baseline, or the five tensors a schema-5 entry kept)."""
    memory = outcome.current.memory
    if memory is None:
        return []
    baseline = outcome.comparable_baseline
    changes = merged_changes(peak_changes(baseline.memory if baseline is not None else None, memory))
    # groups that differ only in their module are one row, with their total and their modules
    return [[m.first.group.op, m.modules() or "-" if len(m.changes) > 1 else m.first.group.module or "-",
             f"[{','.join(map(str, m.first.group.shape))}]", m.first.group.dtype, str(m.count),
             format_bytes(m.bytes), m.first.cell()]
            for m in changes[:MAX_TENSOR_ROWS]]


def tensors_left(outcome: TestOutcome) -> str:
    """What ``tensor_rows`` left out, "and 12 more groups at the peak, 96 MiB", and where the
    baseline kept only its five largest tensors (schema 5), that it cannot say more ("" when
    neither)."""
    memory = outcome.current.memory
    baseline = outcome.comparable_baseline
    rows = (merged_changes(peak_changes(baseline.memory if baseline is not None else None, memory))
            if memory is not None else [])
    left = rows[MAX_TENSOR_ROWS:]
    said = []
    if left:
        said.append(f"and {len(left)} more group{'s' if len(left) != 1 else ''} at the peak, "
                    f"{format_bytes(sum(m.bytes for m in left))}")
    baseline = outcome.comparable_baseline
    old = baseline.memory if baseline is not None else None
    if memory is not None and old is not None and old.at_peak and not old.live:
        said.append(f"the baseline kept only the {len(old.at_peak)} largest tensors at its peak "
                    "(schema 5): re-record it to compare all that is live at the peak")
    return "; ".join(said)


# --- a failure in a line -----------------------------------------------------------------------

def largest_finding(outcome: TestOutcome) -> Finding | None:
    """The regression that adds the most device time (findings come ordered by impact, the total
    first): what a failure's first line names; None when only the total or the memory failed."""
    for f in outcome.verdict.regressions:
        if f.kind not in (Kind.TOTAL, Kind.POLICY) and f.kind not in MEMORY_KINDS and f.op != TOTAL:
            return f
    return None


def impact_phrase(finding: Finding) -> str:
    """A finding in a few words, with the time it adds: ``aten::bmm new, +14.906 us``,
    ``aten::mm +3.000 us (+30.0%)``, ``aten::add 14 -> 18 calls``, ``aten::sdpa replaced by 3
    new ops, +21.868 us`` (names unescaped: each output escapes the phrase its own way)."""
    op = finding.op
    if finding.kind == Kind.REPLACED:
        return f"{op} {finding.reason.partition(': ')[0]}"
    if finding.kind == Kind.NEW:
        return f"{op} new, +{format_us(finding.current)}"
    if finding.kind == Kind.CALLS:
        return f"{op} {int(finding.baseline)} -> {int(finding.current)} calls"
    change = finding.current - finding.baseline
    sign = "+" if change >= 0 else "-"
    return f"{op} {sign}{format_us(abs(change))} ({format_delta(finding.delta)})"


def fit_text(outcome: TestOutcome) -> str:
    """What would make a test that does not fit fit, in a paragraph ("" when it fits): the same
    tensors in bfloat16, a chip with more memory per core, a memory_limit of at least its peak;
    re-recording does not change its limit (names unescaped)."""
    memory = outcome.current.memory
    over = [f for f in outcome.verdict.regressions if f.kind == Kind.FIT]
    if memory is None or not over:
        return ""
    limit = int(over[0].baseline)
    label = over[0].reason.rpartition(", ")[2] or format_bytes(limit)  # "24 GiB per NeuronCore"
    ranks = max((op.ranks for op in outcome.current.ops.values() if op.collective), default=0)
    hints = fit_suggestions(memory, outcome.current.hardware, limit, ranks)
    ways = []
    if hints.narrow_peak is not None:
        fits = "fits" if hints.narrow_peak <= limit else "still does not fit"
        ways.append(f"in bfloat16 (model.to(torch.bfloat16)) its peak would be about "
                    f"{format_bytes(hints.narrow_peak)}, which {fits} (float32 is "
                    f"{format_bytes(hints.wide_bytes)} of what is live at the peak)")
    if hints.tensor_parallel is not None:
        degree, share = hints.tensor_parallel
        if degree:
            ways.append(f"shard it further: its collectives run over {ranks} rank"
                        f"{'s' if ranks != 1 else ''}, and at a tensor-parallel degree of {degree} "
                        f"each NeuronCore's share of the peak would be about {format_bytes(share)} "
                        "(if the tensors at the peak shard with it), which fits")
        else:
            ways.append(f"sharding it over every NeuronCore of one {outcome.current.hardware} "
                        f"instance would still leave each about {format_bytes(share)}")
    if hints.chips:
        (first, first_label), *others = hints.chips
        chips = "".join(f', or hardware="{name}" ({memory_label})' for name, memory_label in others)
        ways.append(f'cost it on a chip with room for it: @pytest.mark.neuron_profile(hardware="{first}") '
                    f"({first_label}){chips}")
    ways.append(f"set a limit of at least its peak: @pytest.mark.neuron_profile("
                f'memory_limit="{hints.limit}")')
    return (f"It does not fit in {label} (peak {format_bytes(memory.peak_bytes)}): "
            + "; or ".join(ways) + ". Re-recording its baseline does not change its limit.")
