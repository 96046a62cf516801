"""GitHub Actions: an ``::error`` annotation per failed test (regressed, or does not fit; shown on
the test's line in the pull request's diff, naming the finding that adds the most device time), a ``::warning`` per profiled test the gate did not compare (no baseline, an
incomparable one, no region entered), and a Markdown summary appended to ``$GITHUB_STEP_SUMMARY``.

Only under Actions (``GITHUB_ACTIONS=true``), only on the xdist controller (the plugin calls this
from its terminal summary, which workers do not write). No pytest import: plain functions.

Values in an annotation come from baseline files: each goes through ``safetext.plain`` (capped,
on one line), and the whole message and its properties through ``escape_data``, which also
makes the legacy ``##[`` inert (the runner matches it anywhere in a line).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ..files import ENCODE_ERRORS, ENCODING
from ..formatting import format_delta, format_us
from ..gate.compare import MEMORY_KINDS, NOT_COMPARED, Kind
from ..gate.outcome import TestOutcome, chip_label, several_variants
from ..safetext import MAX_MESSAGE_CHARS, no_commands, plain
from .markdown import outcomes_markdown
from .terminal import failure_fixes, failure_headline, memory_only, not_compared_fix, short_id

MAX_FINDINGS_IN_MESSAGE = 3  # an annotation is one line; the step summary has the full tables


def in_actions(environ: Mapping[str, str]) -> bool:
    return environ.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """The message part of a workflow command (GitHub's escaping rules, and no ``##[``)."""
    return no_commands(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (file=, title=): ':' and ',' would end it."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workspace_path(file: str, rootdir: Path | None, environ: Mapping[str, str]) -> str:
    """The test file relative to the checkout: annotations only land on paths GitHub knows,
    and pytest's rootdir need not be the repository root."""
    workspace = environ.get("GITHUB_WORKSPACE")
    if rootdir is not None and workspace:
        try:
            return (rootdir / file).resolve().relative_to(Path(workspace).resolve()).as_posix()
        except ValueError:
            pass
    return Path(file).as_posix()


def annotation_message(outcome: TestOutcome, siblings: Sequence[TestOutcome] = ()) -> str:
    """One line: the change on the outcome's variant, its top findings in order of impact, the
    largest first (the memory's are never left out), and the command that re-records the test
    (every chip of it in ``siblings``)."""
    baseline = outcome.baseline
    if memory_only(outcome) or outcome.verdict.does_not_fit:  # (also with no baseline)
        parts = [f"{plain(outcome.nodeid)}: {failure_headline(outcome)}"]
    else:
        assert baseline is not None
        parts = [f"{plain(outcome.nodeid)}: device time {format_delta(outcome.delta)} on "
                 f"{plain(outcome.current.variant)} "
                 f"({format_us(baseline.total_device_time_us)} -> "
                 f"{format_us(outcome.current.total_device_time_us)})"]
    findings = [f for f in outcome.verdict.regressions if f.kind != Kind.TOTAL]
    memory = [f for f in findings if f.kind in MEMORY_KINDS]
    shown = [f for f in findings if f.kind not in MEMORY_KINDS][:MAX_FINDINGS_IN_MESSAGE - len(memory)] + memory
    for f in shown:
        op, where = plain(f.op), f" in {plain(f.module)}" if f.module else ""
        _, _, old, new, delta, threshold, _ = f.cells()  # in bytes for the memory's findings
        if f.kind in (Kind.CALLS, Kind.FIT, Kind.REPLACED):
            parts.append(f"{op}{where}: {plain(f.reason)}")
        else:
            why = f": {plain(f.reason)}" if f.kind == Kind.MEMORY else ""
            parts.append(f"{op}{where} {delta} ({old} -> {new}, threshold {threshold}){why}")
    if len(findings) > len(shown):
        parts.append(f"{len(findings) - len(shown)} more in the job summary")
    parts += failure_fixes(outcome, siblings, "if intended")
    return "; ".join(parts)


MAX_TITLE_ID_CHARS = 80  # an annotation's title: the test's name, shortened in the middle


def _test_name(outcome: TestOutcome, chips: bool = False) -> str:
    """The test's name without its file and class: cut at the last ``::`` before its
    parameters, which may hold ``::`` themselves (``test_odd_ids[x/y::z]``); with its chip
    when the run has several."""
    base, bracket, params = outcome.nodeid.partition("[")
    name = base.rsplit("::", 1)[-1] + bracket + params
    return plain(short_id(name, MAX_TITLE_ID_CHARS)) + (f" on {plain(chip_label(outcome))}" if chips else "")


def _file_property(file: str) -> str:
    """The test's file in an annotation: escaped as every value (``plain``: a control character
    or a surrogate as its escape) but never cut, which would name another file."""
    return escape_property(plain(file, len(file)))


def annotation(outcome: TestOutcome, file: str, siblings: Sequence[TestOutcome] = ()) -> str:
    line = max(outcome.location[1], 1)
    what = ("does not fit in device memory" if outcome.verdict.does_not_fit
            else "device-memory regression" if memory_only(outcome) else "device-time regression")
    title = f"{what}: {_test_name(outcome, several_variants(siblings))}"
    return (f"::error file={_file_property(file)},line={line},title={escape_property(title)}"
            f"::{escape_data(annotation_message(outcome, siblings))}")


def warning(outcome: TestOutcome, file: str, siblings: Sequence[TestOutcome] = ()) -> str:
    """A test the gate did not compare: passing, and so easy to miss."""
    line = max(outcome.location[1], 1)
    title = f"device time not compared: {_test_name(outcome, several_variants(siblings))}"
    message = (f"{plain(outcome.nodeid)}: {plain(outcome.verdict.message, MAX_MESSAGE_CHARS)}; "
               f"{not_compared_fix(outcome, siblings)}")
    return (f"::warning file={_file_property(file)},line={line},title={escape_property(title)}"
            f"::{escape_data(message)}")


def annotation_lines(outcomes: Iterable[TestOutcome], rootdir: Path | None = None,
                environ: Mapping[str, str] | None = None) -> list[str]:
    """An ::error per regressed test, then a ::warning per test that was not compared."""
    env = os.environ if environ is None else environ
    ordered = sorted(outcomes, key=lambda o: o.nodeid)
    tests: dict[str, list[TestOutcome]] = {}
    for o in ordered:
        tests.setdefault(o.nodeid, []).append(o)
    return ([annotation(o, workspace_path(o.location[0], rootdir, env), tests[o.nodeid])
             for o in ordered if o.verdict.failed]  # a recorded test that does not fit too
            + [warning(o, workspace_path(o.location[0], rootdir, env), tests[o.nodeid])
               for o in ordered if o.verdict.status in NOT_COMPARED])


MAX_SUMMARY_ROWS = 200  # GitHub refuses step summaries over 1 MiB


def step_summary(outcomes: Sequence[TestOutcome]) -> str:
    return outcomes_markdown(outcomes, "Neuron device-time profile (pytest-neuronprof)",
                             limit=MAX_SUMMARY_ROWS)


def publish(outcomes: Sequence[TestOutcome], write_line: Callable[[str], object],
            rootdir: Path | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Under Actions: print the annotations with ``write_line`` and append the step summary.
    Elsewhere: nothing."""
    env = os.environ if environ is None else environ
    if not in_actions(env):
        return
    for line in annotation_lines(outcomes, rootdir, env):
        write_line(line)
    path = env.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        # other steps append to it too; encoded as every file of the project is (files.py)
        with open(path, "a", encoding=ENCODING, errors=ENCODE_ERRORS) as handle:
            handle.write(step_summary(outcomes) + "\n")
    except OSError as exc:
        write_line(f"::warning::{escape_data(f'pytest-neuronprof: cannot append to GITHUB_STEP_SUMMARY {path}: {exc}')}")
