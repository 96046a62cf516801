"""`neuronprof` (also `python -m pytest_neuronprof`): compare, show, merge and report baselines
and --neuron-report files outside pytest; write a pull request's comment from a report; check
that a report is the plugin's own of this run; read the baselines' git history; gate a tree
against a git ref with no stored baselines (continuous).

Exit codes: 0 fine, 1 a regression (compare), 3 a test does not fit in device memory
(compare), 2 bad input. Errors a user can cause print one
line to stderr, never a traceback. Verdicts come from ``gate.compare``, the plugin's own gate.

Everything printed, to stdout or stderr, goes through ``safetext.guard_lines`` (``_print``,
``_error``): whatever a file holds, no line it prints starts a workflow command or drives the
terminal. The renderers escape each value for their format first; this is the last guard.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

from ..defaults import DEFAULT_BASELINE_DIR, DEFAULT_HTML_DIR, DEFAULT_MAX_FILE_BYTES
from ..errors import NeuronProfError
from ..safetext import MAX_MESSAGE_CHARS, guard_lines, line_blocks, plain

FORMATS = ("text", "json", "markdown")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def policy_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's overrides of the gate policy (GatePolicy field -> value; None: not
    given), each read by the parser the plugin's options and marker use (values.py). Each entry
    is judged by ``resolve_policy(its backend, these)``, as the plugin would judge it."""
    from ..values import parse_count, parse_fraction, parse_microseconds

    def given(value: str | None, parse: Callable[[str], Any]) -> Any:
        return None if value is None else parse(value)

    return {
        "threshold": given(args.threshold, lambda v: parse_fraction("--threshold", v)),
        "floor_us": given(args.floor_us, lambda v: parse_microseconds("--floor-us", v)),
        "hotspots": given(args.hotspots, lambda v: parse_count("--hotspots", v, 0)),
        "min_share": given(args.min_share, lambda v: parse_fraction("--min-share", v, high=1.0)),
    }


def max_bytes(args: argparse.Namespace) -> int:
    """--max-size: the largest file read (defaults.DEFAULT_MAX_FILE_BYTES unless given)."""
    from ..values import parse_size

    return DEFAULT_MAX_FILE_BYTES if args.max_size is None else parse_size("--max-size", args.max_size)


def _print(text: str | Iterable[str]) -> None:
    """``text`` (a str, or str pieces written as they come) on stdout, ending with a line break."""
    if isinstance(text, str):
        sys.stdout.write(guard_lines(text if text.endswith("\n") else text + "\n"))
        return
    block = ""
    for block in line_blocks(text):  # guarded per block: the same text as guarding the whole
        sys.stdout.write(guard_lines(block))
    if not block.endswith("\n"):  # what the str form adds (also to an empty text)
        sys.stdout.write("\n")


def _error(command: str, message: str) -> None:
    """One line on stderr (``message`` is capped here: a reader's error may quote a whole value)."""
    sys.stderr.write(guard_lines(f"neuronprof {command}: {plain(message, MAX_MESSAGE_CHARS)}") + "\n")


# --- compare ----------------------------------------------------------------------------------

def cmd_compare(args: argparse.Namespace) -> int:
    from .diffing import compare_entries
    from .refs import load_side
    from .render import (compare_chips_json, compare_chips_markdown, compare_chips_text, compare_json,
                         compare_markdown, compare_text)

    overrides = policy_overrides(args)
    limit = max_bytes(args)
    old, new = load_side(args.old, limit, "neuronprof compare"), load_side(args.new, limit, "neuronprof compare")
    comparison = compare_entries(old.entries, new.entries, overrides)
    if args.by == "chip":
        render = {"text": compare_chips_text, "json": compare_chips_json,
                  "markdown": compare_chips_markdown}[args.format]
    else:
        render = {"text": compare_text, "json": compare_json, "markdown": compare_markdown}[args.format]
    _print(render(old, new, comparison))
    problem = comparison.problem()
    if problem:
        _error("compare", f"error: {problem}")
    return comparison.exit_code()


def cmd_show(args: argparse.Namespace) -> int:
    from .refs import load_side
    from .render import show

    _print(show(load_side(args.path, max_bytes(args), "neuronprof show"), args.format))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from ..files import show_path
    from .merge import merge_baselines

    result = merge_baselines(Path(args.out), [Path(p) for p in args.inputs], args.prefer, max_bytes(args))
    for line in result.resolved:
        _error("merge", line)
    written = ", ".join(show_path(p) for p in result.written) or "none (all unchanged)"
    _print(f"merged {result.entries} baseline entries from {len(args.inputs)} inputs into "
           f"{args.out}; files changed: {written}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..outputs.html import write_html
    from .inputs import REPORT, InputError, load

    loaded = load(args.report, max_bytes(args))
    if loaded.kind != REPORT:
        raise InputError(f"{args.report} is a baseline file or directory; `neuronprof report` "
                         "takes a --neuron-report file (use `neuronprof show` for baselines)")
    trace_dir = Path(args.trace_dir) if args.trace_dir else None
    if trace_dir is not None and not trace_dir.is_dir():
        raise InputError(f"--trace-dir {trace_dir}: no such directory")
    # the page the plugin writes; its trend charts read the working directory's repository (or
    # --repo's), never one a path in the report names
    page = write_html(Path(args.output), loaded.outcomes, trace_dir, Path(args.repo or "."))
    _print(f"wrote {page}")
    return 0


def cmd_comment(args: argparse.Namespace) -> int:
    from ..files import atomic_write_text
    from ..outputs.comment import comment_body
    from .inputs import REPORT, InputError, load

    loaded = load(args.report, max_bytes(args))
    if loaded.kind != REPORT:
        raise InputError(f"{args.report} is a baseline file or directory; `neuronprof comment` "
                         "takes a --neuron-report file")
    body = comment_body(loaded.outcomes)  # what --neuron-comment writes, from a (merged) report
    if args.output is None:
        _print(body)
        return 0
    atomic_write_text(Path(args.output), body)
    _print(f"wrote {args.output}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from ..gate.gitref import find_repository
    from ..gate.history import HISTORY, history
    from .render import history_json, history_text

    # The repository is the working directory's (or --repo's), never found from --dir: a
    # baseline directory can hold a repository's layout as committed files (gate/gitref.py).
    repository = find_repository(Path(args.repo or "."), option=HISTORY)
    points = history(repository, Path(args.dir), args.test, args.op, args.since)
    _print(history_json(points, args.op) if args.format == "json" else history_text(points, args.op))
    return 0


def cmd_continuous(args: argparse.Namespace) -> int:
    from .continuous import continuous

    pytest_args = list(args.pytest_args)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    return continuous(args.base, args.head, pytest_args, lambda line: _error("continuous", line))


def cmd_check_report(args: argparse.Namespace) -> int:
    from .check_report import ReportFailed, check_report

    try:
        _print(check_report(Path(args.report), args.base, max_bytes(args), Path(args.repo or ".")))
    except ReportFailed as exc:
        _error("check-report", str(exc))
        return 1
    return 0


REPO_HELP = ("the git repository to read (default: the one holding the working directory; "
             "never one found from a baseline directory)")


def build_parser() -> argparse.ArgumentParser:
    from .refs import SIDE_HELP
    from ..defaults import per_backend
    from ..formatting import format_fraction
    from ..gate.compare import GatePolicy

    parser = _Parser(prog="neuronprof", description="Compare, show, merge and report "
                     "pytest-neuronprof baselines and --neuron-report files.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    compare = sub.add_parser(
        "compare", help="per-test, per-op differences between two baseline directories or reports",
        description="Compare OLD with NEW using the plugin's gate, each entry under the policy "
                    "the plugin gives its backend and the marker arguments NEW's entry was "
                    "recorded with (ops=, allow=, threshold=, ...; baseline schema 7); a "
                    "regression NEW's entry gives a reason for is accepted, and so is a marker "
                    "that gates less than OLD's. Exit 0: no regression, 1: a regression without a valid reason, 3: a "
                    "test does not fit in device memory, 2: bad or incomparable input.")
    compare.add_argument("old", metavar="OLD", help=SIDE_HELP)
    compare.add_argument("new", metavar="NEW", help="the same kinds of input, recorded later "
                         "(e.g. `neuronprof compare main baselines`)")
    defaults = GatePolicy()

    def percent(value: float) -> str:  # argparse %-formats help texts
        return format_fraction(value).replace("%", "%%")

    compare.add_argument("--threshold", metavar="T", help="relative increase that regresses, 0.1 "
                         "or 10%% (default: the entry's backend's, as in the plugin: "
                         f"{per_backend(lambda facts: percent(facts.threshold))})")
    compare.add_argument("--floor-us", metavar="US", help="an increase must also exceed this "
                         f"(default {defaults.floor_us:g})")
    compare.add_argument("--hotspots", metavar="N",
                         help=f"how many top ops are gated (default {defaults.hotspots})")
    compare.add_argument("--min-share", metavar="S", help="ops with at least this share are "
                         f"gated too (default {percent(defaults.min_share)})")
    compare.add_argument("--format", choices=FORMATS, default="text")
    compare.add_argument("--by", choices=("test", "chip"), default="test",
                         help="test (default): a row per test and variant, with per-op changes; "
                         "chip: the chips side by side, a row per test and a column per chip "
                         "(hardware profile) with the change of its total device time there, and "
                         "a line per test such as 'this change costs +12.0%% on trn2 and +3.0%% on "
                         "h200' (reports or baselines of runs with --neuron-hardware trn2,h200). "
                         "The verdict and exit code are the same either way")
    compare.set_defaults(run=cmd_compare)

    show = sub.add_parser("show", help="tables of a baseline directory or file, or of a report")
    show.add_argument("path", metavar="PATH", help=SIDE_HELP)
    show.add_argument("--format", choices=FORMATS, default="text")
    show.set_defaults(run=cmd_show)

    merge = sub.add_parser(
        "merge", help="combine baseline directories of sharded CI jobs into OUT",
        description="Merge the baselines of IN... into OUT (entries already in OUT are kept "
                    "unless an input has the same test and variant). The same test and variant "
                    "with different numbers in two inputs is refused unless --prefer says which wins.")
    merge.add_argument("out", metavar="OUT")
    merge.add_argument("inputs", metavar="IN", nargs="+")
    merge.add_argument("--prefer", choices=("first", "last"),
                       help="on a conflict keep the entry of the first or of the last input")
    merge.set_defaults(run=cmd_merge)

    report = sub.add_parser("report", help="a self-contained HTML page of a --neuron-report file")
    report.add_argument("report", metavar="REPORT.json")
    report.add_argument("-o", "--output", metavar="DIR", default=DEFAULT_HTML_DIR,
                        help=f"directory to write index.html into (default: {DEFAULT_HTML_DIR})")
    report.add_argument("--trace-dir", metavar="DIR",
                        help="the --neuron-trace-dir of that run, to link each test's trace")
    report.add_argument("--repo", metavar="DIR", help=REPO_HELP + " (for the trend charts; a "
                        "baseline directory the report names outside it has none)")
    report.set_defaults(run=cmd_report)

    comment = sub.add_parser(
        "comment", help="the Markdown body of a pull-request comment from a --neuron-report file",
        description="Write what --neuron-comment writes, from a --neuron-report file (a sharded "
                    "job's merged report): a hidden marker as its first line, regressions, changes "
                    "accepted in this change, improvements, tests not compared, per-op tables "
                    "folded; at most 65,536 characters.")
    comment.add_argument("report", metavar="REPORT.json")
    comment.add_argument("-o", "--output", metavar="FILE", help="write it here (default: stdout)")
    comment.set_defaults(run=cmd_comment)

    hist = sub.add_parser(
        "history", help="device time at each commit that changed a test's baseline",
        description="Read the baseline files' git history (first parent, newest 500 commits) and "
                    "print, per test and variant, the device time at each commit that changed it, "
                    "with the commit, its date and subject and the change from the previous one.")
    hist.add_argument("test", metavar="TEST", nargs="?", help="only tests whose id contains this")
    hist.add_argument("--op", metavar="OP", help="also this op's device time (e.g. aten::mm)")
    hist.add_argument("--since", metavar="REF", help="only commits after this branch, tag or commit")
    hist.add_argument("--dir", metavar="DIR", default=DEFAULT_BASELINE_DIR,
                      help=f"the baseline directory (default: {DEFAULT_BASELINE_DIR})")
    hist.add_argument("--format", choices=("text", "json"), default="text")
    hist.add_argument("--repo", metavar="DIR", help=REPO_HELP)
    hist.set_defaults(run=cmd_history)

    cont = sub.add_parser(
        "continuous", help="gate the working tree (or HEAD) against BASE, re-simulated, no stored baselines",
        description="Run the marked tests at BASE in a temporary git worktree, recording into a "
                    "temporary directory, then gate the working tree (or HEAD, in a second "
                    "worktree) against it. Pytest arguments go after --. Exit code: the gated "
                    "run's (0 pass, 1 a regression); 2 bad input or BASE could not be recorded.")
    cont.add_argument("base", metavar="BASE", help="branch, tag or commit to gate against")
    cont.add_argument("head", metavar="HEAD", nargs="?",
                      help="branch, tag or commit to gate (default: the working tree)")
    cont.add_argument("pytest_args", metavar="-- PYTEST ARGS", nargs=argparse.REMAINDER,
                      help="arguments for both pytest runs, after --")
    cont.set_defaults(run=cmd_continuous)
    check = sub.add_parser(
        "check-report", help="check that a file is the plugin's own --neuron-report of this run",
        description="Exit 0 when REPORT.json is the JSON report this pytest-neuronprof wrote in "
                    "this CI run (NEURONPROF_RUN_ID, or GitHub Actions' run id and attempt, when "
                    "set) and, with --base, that every test in it was gated against REF at the "
                    "commit REF names now; exit 1 when that report holds a failed test (whatever "
                    "pytest's exit status said); exit 2, saying what is wrong, otherwise (no file, "
                    "another tool's file, a report of another run or version). A CI job runs it "
                    "after pytest, so that a configuration that turned the gate off cannot pass.")
    check.add_argument("report", metavar="REPORT.json")
    check.add_argument("--base", metavar="REF", help="the ref the run was gated against "
                       "(--neuron-baseline-ref), e.g. origin/main")
    check.add_argument("--repo", metavar="DIR", help=REPO_HELP + " (to resolve --base)")
    check.set_defaults(run=cmd_check_report)
    for command in (compare, show, merge, report, comment, check):
        command.add_argument("--max-size", metavar="SIZE", help="refuse input files larger than this, "
                             f"e.g. 512MB or 1GiB (default: {DEFAULT_MAX_FILE_BYTES // 2**20}MiB)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] | None = None
    if argv[:1] == ["continuous"] and "--" in argv:
        # argparse would take `-k` of `continuous BASE -- -k x` for HEAD: pytest's arguments are
        # split off first, everything after the first --.
        split = argv.index("--")
        argv, rest = argv[:split], argv[split + 1:]
    args = build_parser().parse_args(argv)
    if rest is not None:
        args.pytest_args = [*args.pytest_args, *rest]
    try:
        return int(args.run(args))
    except NeuronProfError as exc:
        _error(args.command, f"error: {exc}")
        return 2
    except BrokenPipeError:  # `neuronprof show ... | head`
        return 0
    except OSError as exc:  # e.g. an output directory that cannot be created
        where = f" {exc.filename}:" if exc.filename else ""
        _error(args.command, f"error:{where} {exc.strerror or exc}")
        return 2
