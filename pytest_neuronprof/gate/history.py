"""A test's device time over the history of its baseline files (``neuronprof history``): each
commit that changed an entry, with its date and subject, read from git without a checkout.

``git log`` names the commits that touched the baseline directory (newest first, following
the first parent, so that a merged branch's own commits do not interleave); each file is read
as it is at each of them (gate/gitref.py's reading, with its limits; a file whose git object
was read at an earlier commit is not read again), and a point is kept where the entry's
numbers differ from the previous commit's. Points are oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from .gitref import NoBaselinesAtRef, RefBaselineStore, Repository, resolve_commit
from .summary import ProfileSummary

MAX_COMMITS = 500  # of history read by default: a few years of a busy directory


@dataclass(frozen=True)
class HistoryPoint:
    """One test's entry (one variant) as a commit left it."""

    commit: str
    date: str  # the commit's date, YYYY-MM-DD
    subject: str
    nodeid: str
    variant: str
    total_us: float
    op_us: float | None  # the op asked for (None: not asked for, or absent at that commit)
    peak_bytes: int | None
    reason: str = ""  # the entry's reason ("" none): why the numbers were accepted
    since: bool = False  # the entry as it is at ``--since``'s commit: where the changes start from
    # The commit that gave ``reason``, where a later commit than this point's gave it for these
    # numbers (the two-commit flow: a re-record, then the reason); "" when this commit did
    reason_commit: str = ""


HISTORY = "neuronprof history"  # what errors name


def _commits(repository: Repository, prefix: str, since: str | None, limit: int) -> list[tuple[str, str, str]]:
    """(hash, date, subject) of the commits that changed ``prefix``, newest first."""
    # No signature check, textconv or external diff: nothing configured runs (gate/gitref.py).
    args = ["log", "--no-show-signature", "--no-textconv", "--no-ext-diff", "--first-parent",
            f"--max-count={limit}", "--date=short", "--format=%H%x00%ad%x00%s%x00"]
    if since:
        args.append(f"{resolve_commit(repository, since, option=f'{HISTORY} --since')}..HEAD")
    args += ["--", prefix]
    fields = repository.git(*args, option=HISTORY).stdout.decode("utf-8", "replace").split("\x00")
    return [(fields[i].strip(), fields[i + 1], fields[i + 2])
            for i in range(0, len(fields) - 2, 3) if fields[i].strip()]


def history(repository: Repository, directory: Path, test: str | None = None, op: str | None = None,
            since: str | None = None, limit: int = MAX_COMMITS) -> list[HistoryPoint]:
    """Every change of the entries under ``directory`` (of tests whose id contains ``test``) in
    ``repository`` (found from the project's root, never from the directory: gate/gitref.py),
    oldest first; ``op``: also that op's device time; ``since``: commits after that ref only.
    ConfigError when the directory is outside the repository or ``since`` is unknown."""
    prefix = str(repository.relative(directory, option=HISTORY))
    points: list[HistoryPoint] = []
    last: dict[tuple[str, str], tuple[float, float | None, int | None]] = {}
    parsed: dict[str, dict[str, dict[str, ProfileSummary]]] = {}  # git object -> its entries
    commits = list(reversed(_commits(repository, prefix, since, limit)))
    if since:  # the entries as they are at --since, so that the first change has a delta
        start = resolve_commit(repository, since, option=f"{HISTORY} --since")
        commits.insert(0, _describe(repository, start))
    at: dict[tuple[str, str], int] = {}  # the index in ``points`` of each entry's last point
    for index, (commit, date, subject) in enumerate(commits):
        for nodeid, variant, summary in _entries(repository, directory, commit, test, parsed):
            op_us = summary.ops[op].device_time_us if op and op in summary.ops else None
            peak = summary.memory.peak_bytes if summary.memory is not None else None
            numbers = (round(summary.total_device_time_us, 4), op_us, peak)
            key = (nodeid, variant)
            if last.get(key) == numbers:
                # the same numbers: a reason given for them later (a re-record, then the
                # reason) is theirs, shown on the point of the commit that changed them
                point = points[at[key]]
                if summary.reason and summary.reason != point.reason and (
                        summary.reason_given_for_these_numbers is not False):
                    points[at[key]] = replace(point, reason=summary.reason, reason_commit=commit)
                continue
            last[key] = numbers
            at[key] = len(points)
            points.append(HistoryPoint(commit, date, subject, nodeid, variant,
                                       summary.total_device_time_us, op_us, peak, summary.reason,
                                       since=bool(since) and index == 0))
    return points


def _describe(repository: Repository, commit: str) -> tuple[str, str, str]:
    """(hash, date, subject) of one commit."""
    text = repository.git("log", "-1", "--no-show-signature", "--date=short", "--format=%H%x00%ad%x00%s",
                          commit, option=HISTORY).stdout.decode("utf-8", "replace")
    fields = (text.rstrip("\n").split("\x00") + ["", ""])[:3]
    return fields[0].strip(), fields[1], fields[2]


def _entries(repository: Repository, directory: Path, commit: str, test: str | None,
             parsed: dict[str, dict[str, dict[str, ProfileSummary]]]) -> Iterator[tuple[str, str, ProfileSummary]]:
    """The entries of the files at ``commit``; a file whose git object ``parsed`` holds (the
    same bytes at an earlier commit: a commit changes few of the files) is not read again."""
    try:
        store = RefBaselineStore(directory, commit, repository, commit=commit)
    except NoBaselinesAtRef:  # the commit removed them all
        return
    for path in store.files():
        blob = store.blob(path)
        entries = parsed.get(blob) if blob is not None else None
        if entries is None:
            entries = store.read_file(path)
            if blob is not None:
                parsed[blob] = entries
        for nodeid, variants in sorted(entries.items()):
            if test and test not in nodeid:
                continue
            for variant, summary in sorted(variants.items()):
                yield nodeid, variant, summary
