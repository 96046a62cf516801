"""A test's device time over its baseline's git history, for the HTML page: the history read once
per baseline directory (``gate/history.py``), and a small inline-SVG line chart per test and
variant, the commit of the last change marked. No JavaScript, no network.

The repository is the project's (found from the project's root, never from a baseline
directory a report names: gate/gitref.py); a directory outside it has no chart. The page is a
view: when there is no repository, git is missing or the history cannot be read, the page has
no charts, and nothing fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..errors import NeuronProfError
from ..formatting import format_us
from ..gate.gitref import find_repository
from ..gate.history import HistoryPoint, history
from ..gate.outcome import TestOutcome
from ..safetext import html_text

# The key of the project's root (pytest's rootdir) among the paths a session output is given
# (outputs/registry.py): where the charts' repository is found.
PROJECT_ROOT = "rootdir"
MAX_TREND_COMMITS = 50  # of each directory's history read for the page: it stays cheap
MAX_TREND_POINTS = 50  # per chart
SHORT_HASH = 10
_W, _H, _PAD_X, _PAD_Y = 320, 64, 8, 8
_LINE, _MARK = "#2f6fdb", "#d93025"

TrendKey = tuple[str, str]  # (baseline key, variant)
Trends = Mapping[TrendKey, Sequence[HistoryPoint]]


def trend_key(outcome: TestOutcome) -> TrendKey:
    return outcome.baseline_key, outcome.current.variant


def session_trends(outcomes: Iterable[TestOutcome], project_root: Path,
                   limit: int = MAX_TREND_COMMITS) -> dict[TrendKey, list[HistoryPoint]]:
    """Each outcome's history points (oldest first, at most MAX_TREND_POINTS), keyed by
    ``trend_key``: one ``history`` per baseline directory, in the repository of
    ``project_root``; {} where there is none to read."""
    wanted = {trend_key(o) for o in outcomes}
    directories = sorted({o.baseline_dir for o in outcomes if o.baseline_dir})
    trends: dict[TrendKey, list[HistoryPoint]] = {}
    if not directories:
        return trends
    try:
        repository = find_repository(project_root)
    except (NeuronProfError, OSError, subprocess.SubprocessError):
        return trends  # not in a git repository, no git: no chart
    for directory in directories:
        try:
            points = history(repository, Path(directory), limit=limit)
        except (NeuronProfError, OSError, ValueError, subprocess.SubprocessError):
            continue  # outside the repository, an unreadable old file: no chart
        for point in points:
            key = (point.nodeid, point.variant)
            if key in wanted:
                trends.setdefault(key, []).append(point)
    return {key: points[-MAX_TREND_POINTS:] for key, points in trends.items()}


def trend_chart(points: Sequence[HistoryPoint]) -> str:
    """A line of the total device time at each commit that changed it, oldest on the left; the
    last change's commit marked with a circle (its short hash, date and subject in its title).
    "" without points."""
    if not points:
        return ""
    values = [p.total_us for p in points]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (_W - 2 * _PAD_X) / max(len(points) - 1, 1)

    def xy(i: int, value: float) -> tuple[float, float]:
        return _PAD_X + i * step, _H - _PAD_Y - (value - low) / span * (_H - 2 * _PAD_Y)

    coords = [xy(i, v) for i, v in enumerate(values)]
    last = points[-1]
    title = (f"Device time at the {len(points)} commits that changed the baseline: "
             f"{format_us(values[0])} -> {format_us(values[-1])}")
    out = [f'<svg class="chart trend-chart" role="img" viewBox="0 0 {_W} {_H}" width="{_W}" '
           f'height="{_H}" xmlns="http://www.w3.org/2000/svg"><title>{html_text(title)}</title>',
           f'<polyline fill="none" stroke="{_LINE}" stroke-width="2" points="'
           + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>']
    for point, (x, y) in zip(points[:-1], coords[:-1]):
        out.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{_LINE}">'
                   f"<title>{_label(point)}</title></circle>")
    x, y = coords[-1]
    out.append(f'<circle class="last-change" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{_MARK}">'
               f"<title>{_label(last)}</title></circle>")
    out.append("</svg>")
    return "".join(out)


def _label(point: HistoryPoint) -> str:
    return html_text(f"{point.commit[:SHORT_HASH]} {point.date} {format_us(point.total_us)}: "
                     f"{point.subject}")
