"""The outputs of a pytest session, one entry each: the option that turns it on (its flag and help;
the ini twin follows from the flag), whether its path is a file or a folder (checked before any
test runs), and what writes it: per test, at the session's end, or in the terminal summary. The
plugin reads this list and nothing else to declare and read their options
(``plugin/options.py``), check, write and report them (``plugin/preflight.py``,
``plugin/session.py``), so a new output is its module in ``outputs/`` plus one entry in
SESSION_OUTPUTS.

Baseline files are not an output here: recording them is the gate's job, not a view of it.

Loading this list loads no output: each entry's functions import their module when first called
(a session that writes nothing, most of them, never loads the HTML page's, the comment's or
GitHub's code, nor what they import).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from ..gate.outcome import TestOutcome

# --neuron-trace-dir, as outputs/trace_files.py's FLAG (which tests/test_session_outputs.py holds
# it to): declared here so that the option exists without loading the module.
TRACE_FLAG = "--neuron-trace-dir"


# The outputs' functions, each importing its module when called.

def _write_report(path: Path, outcomes: Sequence[TestOutcome], paths: Mapping[str, Path]) -> None:
    from .json_report import write_report

    write_report(path, outcomes, paths)


def _trace_path(folder: Path, nodeid: str) -> Path:
    from .trace_files import trace_path

    return trace_path(folder, nodeid)


def _write_trace(result: Any, path: Path) -> None:
    from .trace_files import write_trace

    write_trace(result, path)


def _write_page(directory: Path, outcomes: Sequence[TestOutcome], paths: Mapping[str, Path]) -> None:
    from .html import write_session_page

    write_session_page(directory, outcomes, paths)


def _write_comment(path: Path, outcomes: Sequence[TestOutcome], paths: Mapping[str, Path]) -> None:
    from .comment import write_comment

    write_comment(path, outcomes, paths)


def _publish(outcomes: Sequence[TestOutcome], write_line: Callable[[str], object],
             rootdir: Path) -> None:
    from .github import publish

    publish(outcomes, write_line, rootdir)


# What each kind of hook is given. ``paths``: every enabled output's path, by its flag (the
# HTML page links to the traces), and the project's root under trends.PROJECT_ROOT (where the
# page's trend charts find the git repository).
WriteSession = Callable[[Path, Sequence["TestOutcome"], Mapping[str, Path]], object]
WriteTest = Callable[[Any, Path], object]  # (the test's ProfileResult, its file)
Summarize = Callable[[Sequence["TestOutcome"], Callable[[str], object], Path], object]


@dataclass(frozen=True)
class SessionOutput:
    """One output. ``flag`` is None for an output that no option turns on (it decides for
    itself, as GitHub's from the environment); it then has only a ``summary``. An output with a
    flag gets its option and ini twin (a path: an option's relative to the working directory, an
    ini value's to the ini file's folder) and its path in ``Options.output_paths[flag]``."""

    name: str  # what a message calls one file of it: "trace"
    flag: str | None = None  # the option that turns it on
    help: str = ""  # that option's help (and its ini twin's), as `pytest --help` shows it
    folder: bool = False  # the path is a folder (created and probed), else a file (its folder is)
    write: WriteSession | None = None  # at the session's end, once
    test_file: Callable[[Path, str], Path] | None = None  # per test: (folder, node id) -> its file
    write_test: WriteTest | None = None  # per test: an OSError is a warning, not a lost verdict
    summary: Summarize | None = None  # in the terminal summary: (outcomes, write_line, rootdir)

    @property
    def ini(self) -> str:
        """The ini twin of ``flag``: --neuron-report is neuron_report."""
        return (self.flag or "").lstrip("-").replace("-", "_")


TRACES = SessionOutput("trace", TRACE_FLAG,
                       "write a Chrome trace per profiled test into this directory", folder=True,
                       test_file=_trace_path, write_test=_write_trace)
SESSION_OUTPUTS: tuple[SessionOutput, ...] = (
    # In this order: `pytest --help` lists their options (after the others), preflight checks
    # them, the session end writes them, the summary says them.
    SessionOutput("JSON report", "--neuron-report", "write a JSON report of the session here",
                  write=_write_report),
    TRACES,
    SessionOutput("HTML page", "--neuron-html",
                  "write a self-contained HTML page of the session (index.html) into this directory",
                  folder=True, write=_write_page),
    SessionOutput("pull-request comment", "--neuron-comment",
                  "write the Markdown body of a pull-request comment here (its first line is the "
                  "hidden marker <!-- pytest-neuronprof --> that finds the comment again)",
                  write=_write_comment),
    SessionOutput("GitHub Actions annotations", summary=_publish),
)
