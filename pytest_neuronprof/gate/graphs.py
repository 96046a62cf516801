"""Compiled graphs as baselines keep them and the gate judges them: which executables a test ran
(``torch.compile(backend="neuron")``, profiler/compiled.py), how many times, and the graph breaks
that split them (``GraphSummary``); the findings a change makes of them (``graph_changes``).

On Trainium the number of graphs matters as much as their time: a graph break splits an
executable (fusion lost across it, an extra launch and a host round trip), and each new graph is
a compiler run of minutes (a new input shape, a guard that fails). So a test fails when a change
adds a break, or compiles a function into more graphs than its baseline did, naming them; fewer
is an improvement. Both are facts of the executables that ran, fixed when each was compiled, so
they do not depend on what ran before the test. Plain data, no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..safetext import clip
from .decode import Decoder

BREAK_OP = "(graph break)"  # the op column of a finding about a break
COMPILED_OP = "(compiled graphs)"  # ... about the graphs a function was compiled into
MAX_NAMED = 3  # inputs named in a reason
MAX_CHARS = 120  # of a break's reason, or an executable's inputs, in a finding


def where_of(key: str) -> str:
    """An executable's function and phase, from its key ("Block.forward (x.py:3) forward [...]
    digest")."""
    return key.split(" [", 1)[0]


def inputs_of(key: str) -> str:
    return key.split(" [", 1)[1].rsplit("] ", 1)[0] if " [" in key else ""


@dataclass(frozen=True)
class GraphSummary:
    """The compiled graphs of a test: the executables that ran (their keys, sorted), how many
    graph executions there were, and the graph breaks that ended a graph, (file:line, Dynamo's
    reason) each, sorted."""

    compiled: tuple[str, ...]
    executions: int
    breaks: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"breaks": [{"at": at, "reason": reason} for at, reason in self.breaks],
                "compiled": list(self.compiled), "executions": self.executions}

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str) -> "GraphSummary":
        check.mapping(where, data)
        check.known_keys(where, data, {"breaks", "compiled", "executions"})
        breaks = []
        for k, item in enumerate(check.items(f"{where}.breaks", data.get("breaks", []))):
            check.mapping(f"{where}.breaks[{k}]", item)
            check.known_keys(f"{where}.breaks[{k}]", item, {"at", "reason"})
            breaks.append((check.string(f"{where}.breaks[{k}].at", item.get("at")),
                           check.string(f"{where}.breaks[{k}].reason", item.get("reason"))))
        compiled = [check.string(f"{where}.compiled[{k}]", key)
                    for k, key in enumerate(check.items(f"{where}.compiled", data.get("compiled")))]
        return cls(tuple(sorted(set(compiled))),
                   check.whole(f"{where}.executions", data.get("executions")),
                   tuple(sorted(set(breaks))))

    def by_function(self) -> dict[str, list[str]]:
        """The executables' keys per function and phase."""
        found: dict[str, list[str]] = {}
        for key in self.compiled:
            found.setdefault(where_of(key), []).append(key)
        return found

    def digest_part(self) -> str:
        """What a reason is bound to (summary.numbers_digest)."""
        return f"graphs={len(self.compiled)}x{self.executions} breaks={list(self.breaks)!r}"


def summarize_graphs(runs: Any, root: str | None = None) -> GraphSummary | None:
    """A region's compiled graph runs (ProfileResult.graphs) as a baseline keeps them; None when
    none ran (the entry then has no ``graphs``, as before compiled graphs were profiled). Files
    in keys and breaks are relative to ``root``, the folder the test's baseline key is relative
    to (the working directory when None), so where pytest was started changes nothing."""
    if not runs:
        return None
    return GraphSummary(tuple(sorted({run.key_at(root) for run in runs})), len(runs),
                        tuple(sorted({tuple(b) for run in runs for b in run.breaks_at(root)})))


@dataclass(frozen=True)
class GraphChange:
    """One change of a test's compiled graphs: a break added or gone (``BREAK_OP``), or a
    function compiled into more or fewer graphs (``COMPILED_OP``)."""

    op: str
    where: str  # the break's file:line, or the function and phase
    baseline: int  # breaks in all, or the function's graphs
    current: int
    reason: str
    worse: bool


def graph_changes(baseline: GraphSummary | None, current: GraphSummary | None) -> list[GraphChange]:
    """What changed between two tests' compiled graphs. An entry without graphs has none (an
    entry recorded before compiled graphs were profiled, or a test that compiles nothing)."""
    if baseline is None and current is None:
        return []
    old = baseline or GraphSummary((), 0)
    new = current or GraphSummary((), 0)
    changes: list[GraphChange] = []
    added = [b for b in new.breaks if b not in old.breaks]
    for at, reason in added:
        changes.append(GraphChange(
            BREAK_OP, at, len(old.breaks), len(new.breaks),
            f"new graph break at {at}: {clip(reason, MAX_CHARS)} (splits a compiled graph: "
            "fusion lost across it, one more launch, a host round trip)", True))
    for at, reason in old.breaks:
        if (at, reason) not in new.breaks:
            changes.append(GraphChange(BREAK_OP, at, len(old.breaks), len(new.breaks),
                                       f"graph break at {at} is gone: {clip(reason, MAX_CHARS)}",
                                       False))
    # the files of the new breaks ("a.py:12 via a.py:30": both)
    broken = {site.rsplit(":", 1)[0] for at, _ in added for site in at.replace(" via ", ", ").split(", ")}
    before, after = old.by_function(), new.by_function()
    for where in sorted(set(before) | set(after)):
        was, now = before.get(where, []), after.get(where, [])
        if len(now) == len(was):
            continue
        if len(now) > len(was) and any(file in where for file in broken):
            continue  # the new break says it: its graphs are the two sides of it
        fresh = [inputs_of(key) for key in now if key not in was][:MAX_NAMED]
        kept = [inputs_of(key) for key in was][:MAX_NAMED]
        if len(now) > len(was):
            reason = (f"{len(now)} graphs, {len(was)} before: new inputs "
                      f"{clip('; '.join(fresh), MAX_CHARS)}"
                      + (f" (before: {clip('; '.join(kept), MAX_CHARS)})" if kept else "")
                      + "; each graph is a compiler run of minutes on Trainium")
            changes.append(GraphChange(COMPILED_OP, where, len(was), len(now), reason, True))
        else:
            changes.append(GraphChange(COMPILED_OP, where, len(was), len(now),
                                       f"{len(now)} graphs, {len(was)} before", False))
    return changes
