"""A test's device time over its baseline's git history, for the HTML page: the history read once
per baseline directory (``gate/history.py``), and an inline-SVG line chart per test and variant:
the commits that changed its baseline on a labelled axis (date and short hash, the subject on
hover), each with its value, the last change ringed, then this run's total as the last point with
its change from the baseline marked. No JavaScript, no network.

The repository is the project's (found from the project's root, never from a baseline
directory a report names: gate/gitref.py); a directory outside it has no chart. The page is a
view: when there is no repository, git is missing or the history cannot be read, the page has
no charts, and nothing fails.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import NeuronProfError
from ..formatting import format_delta, format_us, relative_change
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
SHORT_COMMIT = 7  # under a point of the chart
_W, _H = 860, 230
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 130, 22, 66  # the plot's margins: value ticks, "this run", dates
_INSET = 36  # the first and last points, in from the plot's edges (room for their labels)
_LINE, _NOW, _MUTED, _GRID = "#57606a", "#2f6fdb", "#57606a", "#eaeef2"

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


def trend_chart(points: Sequence[HistoryPoint], current_us: float | None = None,
                baseline_us: float | None = None, current_color: str = _NOW) -> str:
    """A line of the total device time at each commit that changed the baseline, oldest on the
    left, on a labelled axis of the commits (date and short hash; hover a point for its
    subject), with the values; the last change's commit ringed; then this run's total as the
    last point (``current_us``, in ``current_color``: its verdict's), and the change from the
    baseline it was gated against (``baseline_us``) marked beside it. "" without points."""
    if not points:
        return ""
    history = [p.total_us for p in points]
    values = history + [v for v in (current_us, baseline_us) if v is not None]
    low, high = _domain(values)
    slots = len(points) + (current_us is not None)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    step = (plot_w - 2 * _INSET) / max(slots - 1, 1)

    def x_of(i: int) -> float:
        return _LEFT + _INSET + (i * step if slots > 1 else (plot_w - 2 * _INSET) / 2)

    def y_of(value: float) -> float:
        return _TOP + plot_h - (value - low) / (high - low) * plot_h

    title = (f"Device time at the {len(points)} commit{'s' if len(points) != 1 else ''} that "
             f"changed the baseline: {format_us(history[0])} -> {format_us(history[-1])}"
             + (f"; this run {format_us(current_us)}" if current_us is not None else ""))
    out = [f'<svg class="chart trend-chart" role="img" viewBox="0 0 {_W} {_H}" width="{_W}" '
           f'height="{_H}" xmlns="http://www.w3.org/2000/svg"><title>{html_text(title)}</title>']
    out += _axes(low, high, y_of, plot_w)
    labels = _tick_indices(len(points))
    for i, point in enumerate(points):
        if i in labels:
            x = x_of(i)
            out.append(f'<text class="tick x" x="{x:.1f}" y="{_TOP + plot_h + 16}" text-anchor="middle" '
                       f'font-size="11">{html_text(point.date)}</text>'
                       f'<text class="tick x commit" x="{x:.1f}" y="{_TOP + plot_h + 30}" '
                       f'text-anchor="middle" font-size="10" fill="{_MUTED}">'
                       f"{html_text(point.commit[:SHORT_COMMIT])}</text>")
    coords = [(x_of(i), y_of(v)) for i, v in enumerate(history)]
    if len(coords) > 1:
        out.append(f'<polyline fill="none" stroke="{_LINE}" stroke-width="2" points="'
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>')
    valued = _value_indices(history)
    ys = [y for _, y in coords] + ([y_of(current_us)] if current_us is not None else [])
    for i, (point, (x, y)) in enumerate(zip(points, coords)):
        last = i == len(points) - 1
        if last:
            out.append(f'<circle class="last-change" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#fff" '
                       f'stroke="{_LINE}" stroke-width="2.5"><title>{_label(point)}</title></circle>')
        else:
            out.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{_LINE}">'
                       f"<title>{_label(point)}</title></circle>")
        if i in valued:
            # above the point, or below where both neighbours are above it (the line's way)
            neighbours = [ys[j] for j in (i - 1, i + 1) if 0 <= j < len(ys)]
            below = bool(neighbours) and all(n < y - 1 for n in neighbours)
            if i == len(points) - 1 and current_us is not None:
                below = ys[-1] < y - 1  # this run's dashed line goes up from here
            out.append(f'<text class="value" x="{x:.1f}" y="{y + 19 if below else y - 9:.1f}" '
                       f'text-anchor="middle" font-size="11">{html_text(_compact_us(point.total_us))}</text>')
    if current_us is not None:
        out += _current(coords[-1], (x_of(slots - 1), y_of(current_us)), current_us, baseline_us,
                        y_of, current_color)
    out.append(f'<text class="axis-title x" x="{_LEFT + plot_w / 2:.1f}" y="{_H - 6}" '
               f'text-anchor="middle" font-size="11" fill="{_MUTED}">the commits that changed this '
               "test's baseline, oldest first (date, commit; hover a point for its subject)"
               + (", then this run" if current_us is not None else "") + "</text>")
    out.append("</svg>")
    return "".join(out)


def _domain(values: Sequence[float]) -> tuple[float, float]:
    """The value axis: the values with a margin, from 0 where they are close to it; a tenth
    either side of a single value."""
    low, high = min(values), max(values)
    span = high - low
    if span <= abs(high) * 1e-9:
        margin = abs(high) * 0.1 or 1.0
        return max(low - margin, 0.0), high + margin
    low, high = low - span * 0.3, high + span * 0.2  # room for a value written under its point
    return (0.0 if low < span * 0.5 else low), high


def _nice_step(span: float) -> float:
    raw = span / 4
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _axes(low: float, high: float, y_of: Callable[[float], float], plot_w: float) -> list[str]:
    step = _nice_step(high - low)
    out = [f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" '
           f'stroke="{_MUTED}"/>',
           f'<line class="axis" x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_LEFT + plot_w}" '
           f'y2="{_H - _BOTTOM}" stroke="{_MUTED}"/>']
    tick = math.ceil(low / step - 1e-9) * step
    while tick <= high + 1e-9:
        y = y_of(tick)
        out.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + plot_w}" y2="{y:.1f}" '
                   f'stroke="{_GRID}"/><text class="tick y" x="{_LEFT - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end" font-size="11">{html_text(_compact_us(tick))}</text>')
        tick += step
    cy = _TOP + (_H - _TOP - _BOTTOM) / 2
    out.append(f'<text class="axis-title y" x="14" y="{cy:.1f}" text-anchor="middle" font-size="11" '
               f'fill="{_MUTED}" transform="rotate(-90 14 {cy:.1f})">device time</text>')
    return out


def _current(last: tuple[float, float], at: tuple[float, float], current_us: float,
             baseline_us: float | None, y_of: Callable[[float], float], color: str) -> list[str]:
    """This run: a dashed step from the last change to its point, its value, and the change
    from the baseline it was gated against as a bracket beside it."""
    (lx, ly), (x, y) = last, at
    out = [f'<line class="to-current" x1="{lx:.1f}" y1="{ly:.1f}" x2="{x:.1f}" y2="{y:.1f}" '
           f'stroke="{color}" stroke-width="2" stroke-dasharray="5 4"/>']
    change = ""
    if baseline_us is not None:
        by = y_of(baseline_us)
        delta = relative_change(baseline_us, current_us) if baseline_us else None
        change = (" (unchanged)" if current_us == baseline_us
                  else f" ({format_delta(delta)} on the baseline)" if delta is not None else "")
        bx = x + 14
        if abs(by - y) >= 2:  # a bracket from the baseline's level to this run's
            out.append(f'<path class="change" d="M{bx - 4:.1f},{by:.1f}H{bx:.1f}V{y:.1f}H{bx - 4:.1f}" '
                       f'fill="none" stroke="{color}" stroke-width="1.5"><title>'
                       f"{html_text(f'baseline {format_us(baseline_us)} -> this run {format_us(current_us)}')}"
                       "</title></path>")
        if delta is not None and current_us != baseline_us:  # too small for a bracket: still said
            out.append(f'<text class="change-label" x="{bx + 5:.1f}" y="{(by + y) / 2 + 4:.1f}" '
                       f'font-size="11" font-weight="600" fill="{color}">{html_text(format_delta(delta))}</text>')
    out.append(f'<circle class="current" cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{color}"><title>'
               f"{html_text(f'this run: {format_us(current_us)}{change}')}</title></circle>")
    out.append(f'<text class="value current" x="{x:.1f}" y="{y - 11:.1f}" text-anchor="middle" '
               f'font-size="11" font-weight="600">{html_text(_compact_us(current_us))}</text>')
    out.append(f'<text class="tick x" x="{x:.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle" '
               f'font-size="11" font-weight="600">this run</text>')
    return out


def _tick_indices(count: int, most: int = 8) -> set[int]:
    """Which of ``count`` commits get a date under them: all of few, else ``most`` spread evenly
    (the first and the last among them)."""
    if count <= most:
        return set(range(count))
    return {round(i * (count - 1) / (most - 1)) for i in range(most)}


def _value_indices(values: Sequence[float], most: int = 10) -> set[int]:
    """Which points get their value written: all of few; else the first, the last, the lowest
    and the highest."""
    if len(values) <= most:
        return set(range(len(values)))
    return {0, len(values) - 1, values.index(min(values)), values.index(max(values))}


def _compact_us(value: float) -> str:
    """A time for a chart's label: four significant digits, in us, ms or s."""
    for factor, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "us")):
        if abs(value) >= factor or unit == "us":
            return f"{value / factor:.4g} {unit}"
    return f"{value:g} us"  # pragma: no cover


def _label(point: HistoryPoint) -> str:
    return html_text(f"{point.commit[:SHORT_HASH]} {point.date} {format_us(point.total_us)}: "
                     f"{point.subject}")
