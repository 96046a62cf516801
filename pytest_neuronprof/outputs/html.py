"""A self-contained HTML page of a session's outcomes: an overview, then one section per profiled
test in the overview's order (failures first, then changes accepted in this change, then the rest
by name) with its badge (its verdict, or what kind of pass: accepted, allowed, new), an
inline-SVG bar chart of the top ops (baseline vs current), the device time per engine, its ops on
the chip's roofline (``roofline_chart.py``), its baseline's history (``trends.py``), and relative
links to the Chrome traces. Inline CSS and SVG only: no scripts, no external assets,
so the page opens from a CI artifact or a file:// URL as it is.

Every value from the outcomes (names read from baseline and report files) goes into the page
through ``safetext.html_text``: escaped, capped, control characters visible."""

from __future__ import annotations

import errno
import os
import re
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import quote

from ..errors import ConfigError
from ..files import atomic_write_text, os_reason, show_path
from ..formatting import format_delta, format_share, format_us, relative_change
from ..gate.compare import NOT_COMPARED, Finding, Kind, Status
from ..gate.outcome import TestOutcome, chip_label, op_changes, several_variants
from ..gate.history import HistoryPoint
from ..gate.summary import ProfileSummary
from ..safetext import MAX_MESSAGE_CHARS, html_text
from ..vocabulary import ENGINES
from .json_report import report_key
from .markdown import counts_line
from .rows import (ACCEPTED_HEADERS, DOES_NOT_FIT, PEAK_HEADER, TENSOR_HEADERS, TENSORS_TITLE,
                   accepted_reason, accepted_rows, compared_with_text, finding_rows, has_memory,
                   memory_line, peak_cell, tensor_rows, verdict_word)
from .why import change_line, metric_rows, recommendation_text, utilisation_line
from .terminal import uncosted_text
from .trace_files import FLAG as TRACE_FLAG
from .trace_files import trace_path, trace_stem
from .roofline_chart import ENGINE_COLORS, roofline_html
from .trends import PROJECT_ROOT, Trends, session_trends, trend_chart, trend_key

TOP_OPS = 10
PAGE_NAME = "index.html"
_BASE, _CUR, _BAD, _GOOD = "#9aa5b1", "#2f6fdb", "#d93025", "#188038"
_FIT, _ACCEPTED, _ALLOWED, _NEW, _AMBER = "#8c1d18", "#8250df", "#1b7c83", "#bc4c00", "#9a6700"
_STATUS_COLOR = {Status.PASS: _CUR, Status.REGRESSION: _BAD, Status.IMPROVED: _GOOD,
                 Status.RECORDED: "#57606a", **dict.fromkeys(NOT_COMPARED, _AMBER)}
# Each verdict's colour: its section's left border and its badge (the CSS rules for them are
# made from this table, one per status), and a flagged op's bar in the chart. A verdict this
# table does not name (a newer one) gets amber, or does-not-fit's colour.
STATUS_COLORS: dict[str, str] = {
    status: _STATUS_COLOR.get(status, _FIT if re.sub(r"[^a-z]+", "-", status) == DOES_NOT_FIT else _AMBER)
    for status in Status}
# The badges that say what kind of a verdict a test has beyond its status: a pass whose
# regression the pull request accepted (with a reason) is not an unchanged test's pass.
BADGE_COLORS: dict[str, str] = {"accepted": _ACCEPTED, "allowed": _ALLOWED, "new": _NEW,
                                DOES_NOT_FIT: _FIT}
BADGE_TITLES = {
    "accepted": "passes: the changes this pull request made to the baseline were accepted, with its reason",
    "allowed": "passes: ops named in the marker's allow= changed",
    "new": "no baseline yet: record one with --neuron-baseline",
    DOES_NOT_FIT: "the peak of device memory does not fit the device or the test's memory_limit",
    "regression": "slower than the baseline allows", "improved": "faster than the baseline: re-record it",
    "pass": "within the thresholds of the baseline",
}
_WIDTH, _LABEL_W, _VALUE_W = 860, 240, 150
_DOT = " \u00b7 "

def _css_class(status: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(status))


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;
max-width:960px;padding:0 16px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:0 0 6px;word-break:break-all}
h3{font-size:13px;margin:14px 0 6px;color:#57606a;text-transform:uppercase;letter-spacing:.04em}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table{border-collapse:collapse;margin:4px 0 8px;font-size:13px}
th,td{border-bottom:1px solid #d0d7de;padding:3px 10px 3px 0;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;padding-left:10px}
section.test{border:1px solid #d0d7de;border-left:6px solid;border-radius:6px;
padding:14px 18px;margin:18px 0}
.verdict{display:inline-block;border-radius:10px;padding:0 9px;font-size:12px;font-weight:600;
color:#fff;vertical-align:middle;margin-left:6px}
.meta,.note{color:#57606a;font-size:13px;margin:2px 0}
.message{background:#fff8c5;padding:4px 8px;border-radius:4px}
svg text{font:12px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;fill:#1f2328}
svg{display:block;max-width:100%;height:auto}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
""" + "".join(f"section.test.{kind}{{border-left-color:{color}}}.verdict.{kind}{{background:{color}}}\n"
              for kind, color in {**{_css_class(s): c for s, c in STATUS_COLORS.items()},
                                  **BADGE_COLORS}.items())


def badge(outcome: TestOutcome) -> str:
    """What a test's badge says (and its CSS class): its verdict in a word, as every table says
    it (``rows.verdict_word``: does-not-fit, regression, accepted, improved, allowed, new, ...)."""
    return _css_class(verdict_word(outcome))


def badge_color(outcome: TestOutcome) -> str:
    kind = badge(outcome)
    return BADGE_COLORS.get(kind) or STATUS_COLORS.get(kind, _AMBER)


def _badge_html(outcome: TestOutcome) -> str:
    kind = badge(outcome)
    title = BADGE_TITLES.get(kind, str(outcome.verdict.status))
    return (f'<span class="verdict {kind}" title="{html_text(title)}">'
            f"{html_text(kind.replace('-', ' ') if kind == DOES_NOT_FIT else kind)}</span>")


def page_order(outcomes: Sequence[TestOutcome]) -> list[TestOutcome]:
    """The overview's and the sections' order: failed tests first (does not fit, regression),
    then those with changes accepted in this change, then improved ones, then the rest (the
    pull-request comment's order); by node id (then chip, as given) within each."""
    def rank(o: TestOutcome) -> int:
        kind = badge(o)
        return (0 if kind in (DOES_NOT_FIT, Status.REGRESSION) else 1 if kind == "accepted"
                else 2 if kind == Status.IMPROVED else 3)
    return sorted(sorted(outcomes, key=lambda o: o.nodeid), key=rank)


def _id(nodeid: str, chip: str = "") -> str:
    """The anchor of a test's section: unique per test (the trace file's hash), readable; and
    per chip where the run has several."""
    return "t-" + trace_stem(nodeid) + (f"-{re.sub(r'[^A-Za-z0-9_-]', '-', chip)}" if chip else "")


def _short(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def engine_times(summary: ProfileSummary | None) -> dict[str, float]:
    """Device time per engine, in ENGINES order (then Collective, where used); anything else
    under "other"."""
    times = dict.fromkeys(ENGINES, 0.0)
    for op in (summary.ops.values() if summary else ()):
        key = op.engine if op.engine in ENGINE_COLORS else "other"
        times[key] = times.get(key, 0.0) + op.device_time_us
    return times


def ops_chart(outcome: TestOutcome, top: int = TOP_OPS) -> str:
    """Horizontal bars per op: baseline (grey) above current (blue; red if the gate flagged it a
    regression, green if an improvement)."""
    changes = sorted(op_changes(outcome, changed_only=False),
                     key=lambda c: (-max(c.old_us, c.new_us), c.op))[:top]
    has_base = outcome.comparable_baseline is not None  # no bars against an incomparable one
    bar_h, row_h, top_pad = 11, 30 if has_base else 18, 24
    height = top_pad + row_h * max(len(changes), 1) + 6
    scale = (_WIDTH - _LABEL_W - _VALUE_W) / max([max(c.old_us, c.new_us) for c in changes] + [1e-9])
    out = [f'<svg class="chart ops-chart" role="img" viewBox="0 0 {_WIDTH} {height}" '
           f'width="{_WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>Top ops by device time: {html_text(outcome.nodeid)}</title>"]
    legend = [("current", _CUR)] + ([("baseline", _BASE)] if has_base else [])
    for i, (name, color) in enumerate(legend):
        x = _LABEL_W + i * 110
        out.append(f'<rect x="{x}" y="4" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 15}" y="13">{name}</text>')
    for i, c in enumerate(changes):
        y = top_pad + i * row_h
        color = STATUS_COLORS.get(c.flag, _CUR)  # flagged: "regression", "improved" (or "allowed")
        out.append(f'<g class="op"><title>{html_text(c.op)} ({html_text(c.engine)}, '
                   f'{html_text(c.module or "-")}): {format_us(c.old_us)} -> {format_us(c.new_us)}</title>')
        out.append(f'<text x="{_LABEL_W - 8}" y="{y + bar_h}" text-anchor="end">{html_text(_short(c.op))}</text>')
        bars = [(c.new_us, color, "current")] + ([(c.old_us, _BASE, "baseline")] if has_base else [])
        for j, (value, fill, kind) in enumerate(bars):
            by = y + j * (bar_h + 2)
            width = max(value * scale, 1.0 if value > 0 else 0.0)
            label = format_us(value) + (f" ({format_delta(c.delta)})" if kind == "current" and has_base
                                        and c.old_us != c.new_us else "")
            out.append(f'<rect class="bar {kind}" x="{_LABEL_W}" y="{by}" width="{width:.1f}" '
                       f'height="{bar_h}" fill="{fill}"/>'
                       f'<text x="{_LABEL_W + width + 5:.1f}" y="{by + bar_h - 1}" '
                       f'font-size="11">{html_text(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def engine_chart(outcome: TestOutcome) -> str:
    """One stacked bar per side, segments per engine, lengths on a common scale."""
    sides = [("current", engine_times(outcome.current), outcome.current.total_device_time_us)]
    baseline = outcome.comparable_baseline
    if baseline is not None:
        sides.append(("baseline", engine_times(baseline), baseline.total_device_time_us))
    bar_h, row_h = 18, 26
    height = row_h * len(sides) + 26
    scale = (_WIDTH - _LABEL_W - _VALUE_W) / max([sum(t.values()) for _, t, _ in sides] + [1e-9])
    out = [f'<svg class="chart engine-chart" role="img" viewBox="0 0 {_WIDTH} {height}" '
           f'width="{_WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>Device time per engine: {html_text(outcome.nodeid)}</title>"]
    for i, (name, times, total) in enumerate(sides):
        y, x = i * row_h + 2, float(_LABEL_W)
        out.append(f'<text x="{_LABEL_W - 8}" y="{y + 13}" text-anchor="end">{name}</text>')
        for engine, value in times.items():
            if value <= 0:
                continue
            width = value * scale
            out.append(f'<rect class="segment" x="{x:.1f}" y="{y}" width="{width:.1f}" height="{bar_h}" '
                       f'fill="{ENGINE_COLORS[engine]}"><title>{engine}: {format_us(value)}</title></rect>')
            x += width
        out.append(f'<text x="{x + 5:.1f}" y="{y + 13}" font-size="11">{format_us(total)}</text>')
    y = row_h * len(sides) + 8
    shown = [engine for engine in ENGINE_COLORS if engine in ENGINES or any(
        times.get(engine) for _, times, _ in sides)]
    for i, engine in enumerate(shown):
        lx = _LABEL_W + i * 90
        out.append(f'<rect x="{lx}" y="{y}" width="10" height="10" fill="{ENGINE_COLORS[engine]}"/>'
                   f'<text x="{lx + 15}" y="{y + 9}">{engine}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(f'<{tag}{" class=num" if i in numeric else ""}>{html_text(v)}</{tag}>'
                       for i, v in enumerate(values))
    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table><thead><tr>{cells('th', headers)}</tr></thead><tbody>{body}</tbody></table>"


def engine_table(outcome: TestOutcome) -> str:
    baseline = outcome.comparable_baseline
    old, new = engine_times(baseline), engine_times(outcome.current)
    total = sum(new.values()) or 1.0
    rows = []
    for engine in new:
        if engine == "other" and not (old.get(engine) or new.get(engine)):
            continue
        before = old.get(engine, 0.0)
        delta = None if baseline is None or not before else relative_change(before, new[engine])
        rows.append([engine, format_us(before) if baseline else "-", format_us(new[engine]),
                     format_delta(delta), f"{new[engine] / total:.1%}"])
    return _table(["engine", "baseline", "current", "delta", "share"], rows, numeric=(1, 2, 3, 4))


def _findings(outcome: TestOutcome) -> str:
    parts = []
    for attr, heading in (("regressions", "Regressions"), ("accepted", "Accepted in this change"),
                          ("improvements", "Improvements"), ("allowed", "Allowed changes")):
        findings = getattr(outcome.verdict, attr)
        if findings and attr == "accepted":  # the pull request's own changes, with its reason
            parts.append(f"<h3>{heading}</h3>" + f'<p class="accepted-reason">reason: '
                         f"{html_text(accepted_reason(outcome), MAX_MESSAGE_CHARS)}</p>"
                         + _table(ACCEPTED_HEADERS[:-1], accepted_rows(outcome, reason=False),
                                  numeric=(1, 2, 3, 4)))
        elif findings:
            parts.append(f"<h3>{heading}</h3>" + _table(
                Finding.HEADERS, finding_rows(findings), numeric=(2, 3, 4, 5)))
    return "".join(parts)


def why_html(outcome: TestOutcome) -> str:
    """Why it is slow, by Neuron Explorer's Summary: what changed in utilisation (a failure),
    the run's metrics and the recommendations that apply, each with its source; "" on measured
    backends (no utilisation) and in reports written before them."""
    found = outcome.utilisation
    parts = []
    change = change_line(outcome) if outcome.verdict.failed else ""
    if found is None and not change:
        return ""
    parts.append("<h3>Why it is slow (Neuron Explorer's Summary)</h3>")
    if change:
        parts.append(f'<p class="utilisation-change message">utilisation: {html_text(change)}</p>')
    if found is not None:
        parts.append(f'<p class="meta utilisation">{html_text(utilisation_line(found))}</p>')
        parts.append('<details class="metrics"><summary>The metrics, by Explorer\'s names</summary>'
                     + _table(["metric", "value", "what it is"], metric_rows(found), numeric=(1,))
                     + "</details>")
    total = outcome.current.total_device_time_us
    items = "".join(f'<li class="recommendation" data-rule="{html_text(r.rule)}">'
                    f"{html_text(recommendation_text(r, total), MAX_RECOMMENDATION_CHARS)}</li>"
                    for r in outcome.recommendations)
    if items:
        parts.append(f'<h3>Recommendations</h3><ol class="recommendations">{items}</ol>')
    elif found is not None:
        parts.append('<p class="note recommendations-none">No recommendation applies: none of '
                     "Explorer's rules holds for this test.</p>")
    return "\n".join(parts)


MAX_RECOMMENDATION_CHARS = 1000  # op and module names from a report file are in it


def memory_html(outcome: TestOutcome) -> str:
    """A test's device memory: its peak and the baseline's, and the largest tensors at the
    peak (which the baseline's peak did not have: "new"); "" when it was not measured."""
    memory = outcome.current.memory
    if memory is None:
        return ""
    baseline = outcome.comparable_baseline
    old = baseline.memory if baseline is not None else None
    parts = [f'<h3>Device memory: peak {html_text(peak_cell(outcome))}</h3>',
             f'<p class="meta memory">current: {html_text(memory_line(memory))}</p>']
    if old is not None:
        parts.append(f'<p class="meta memory">baseline: {html_text(memory_line(old))}</p>')
    rows = tensor_rows(outcome)
    if rows:
        parts += [f"<h3>{html_text(TENSORS_TITLE)}</h3>",
                  _table(TENSOR_HEADERS, [[str(c) for c in row] for row in rows], numeric=(4,))]
    return "\n".join(parts)


def section_html(outcome: TestOutcome, trace_href: str | None = None, chips: bool = False,
                 trend: Sequence[HistoryPoint] = ()) -> str:
    """A test's section; ``chips``: the run has several, the heading names this one's;
    ``trend``: its baseline's history (a chart when there is some)."""
    status = outcome.verdict.status
    kind = badge(outcome)
    chip = chip_label(outcome) if chips else ""
    file, line = outcome.location
    totals = format_us(outcome.current.total_device_time_us)
    if outcome.baseline is not None:
        totals = (f"{format_us(outcome.baseline.total_device_time_us)} \u2192 {totals} "
                  f"({format_delta(outcome.delta)})")
    parts = [
        f'<section class="test {kind}" id="{_id(outcome.nodeid, chip)}" data-verdict="{html_text(status)}" '
        f'data-badge="{kind}">',
        f'<h2><code>{html_text(outcome.nodeid)}</code>{f" on {html_text(chip)}" if chip else ""} '
        f"{_badge_html(outcome)}</h2>",
        f'<p class="meta">{html_text(outcome.current.variant)} \u00b7 cost model '
        f"{html_text(outcome.current.cost_model_version)} \u00b7 torch {html_text(outcome.current.torch_version)}"
        f" \u00b7 <code>{html_text(file)}{f':{line}' if line else ''}</code> \u00b7 device time "
        f"{html_text(totals)}</p>",
    ]
    if outcome.verdict.message:
        parts.append(f'<p class="message">{html_text(outcome.verdict.message, MAX_MESSAGE_CHARS)}</p>')
    parts.append(_findings(outcome))
    uncosted = uncosted_text(outcome.current, html_text)
    if uncosted:
        parts.append(f'<p class="uncosted message">{uncosted}</p>')
    parts.append(memory_html(outcome))
    parts.append(why_html(outcome))
    heading = ("Top ops: current vs baseline" if outcome.comparable_baseline
               else "Top ops (baseline not comparable)" if outcome.baseline else "Top ops (no baseline)")
    parts += [f"<h3>{heading}</h3>", ops_chart(outcome)]
    n_ops = len(set(outcome.current.ops) | set(outcome.baseline.ops if outcome.baseline else ()))
    if n_ops > TOP_OPS:
        parts.append(f'<p class="note">The top {TOP_OPS} of {n_ops} ops by device time.</p>')
    parts.append("<h3>Device time per engine</h3>")
    if outcome.utilisation is not None:  # beside the engines' active time, which differs
        parts.append("<p class=\"note\">Each op's whole device time (its launch and transfers "
                     "included) on the engine it runs on; the active percentages above count only "
                     "the time each engine has an instruction.</p>")
    parts += [engine_chart(outcome), engine_table(outcome)]
    roofline = roofline_html(outcome)
    if roofline:
        parts += [f"<h3>Roofline on {html_text(outcome.current.hardware)}</h3>", roofline]
    if trend:
        baseline = outcome.comparable_baseline
        parts += ["<h3>Device time over the baseline's history</h3>",
                  trend_chart(trend, outcome.current.total_device_time_us,
                              baseline.total_device_time_us if baseline is not None else None,
                              badge_color(outcome))]
    if trace_href:  # a link is URL-quoted by trace_links, and never cut
        parts.append(f'<p class="trace"><a href="{html_text(trace_href, len(trace_href))}">Chrome trace</a> '
                     '<span class="note">(open it in <a href="https://ui.perfetto.dev">ui.perfetto.dev</a>: '
                     "Open trace file)</span></p>")
    parts.append("</section>")
    return "\n".join(parts)


def render_page(outcomes: Sequence[TestOutcome], trace_links: Mapping[str, str] | None = None,
                trends: Trends | None = None, trace_folder: str = ".") -> str:
    """``trace_folder``: where the traces are, relative to the page ("." beside it)."""
    outcomes = page_order(outcomes)
    links = trace_links or {}
    trends = trends or {}
    chips = several_variants(outcomes)
    several = _several(outcomes)
    memory = has_memory(outcomes)  # a peak column where some test measured its memory

    def chip(o: TestOutcome) -> str:
        return chip_label(o) if chips else ""

    overview = "".join(
        f'<tr><td><a href="#{_id(o.nodeid, chip(o))}"><code>{html_text(o.nodeid)}</code></a></td>'
        + (f"<td>{html_text(chip(o))}</td>" if chips else "") +
        f"<td class=num>{format_us(o.current.total_device_time_us)}</td>"
        f"<td class=num>{format_delta(o.delta)}</td>"
        + (f"<td class=num>{html_text(peak_cell(o))}</td>" if memory else "") +
        f"<td class=num>{format_share(o.current.uncosted_share()) if o.current.uncosted() else '-'}</td>"
        f"<td>{_badge_html(o)}</td></tr>"
        for o in outcomes)
    counts = re.sub(r"\*\*(.*?)\*\*", r"<strong>\1</strong>", html_text(counts_line(outcomes)))
    head = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>pytest-neuronprof: device-time report</title>", f"<style>{_CSS}</style></head><body>",
        "<header><h1>Device-time profile</h1>",
        f'<p class="meta">pytest-neuronprof{_DOT}'
        f'<span class="counts">{counts}</span></p>',
    ]
    base = compared_with_text(outcomes, html_text)
    if base:
        head.append(f'<p class="meta base">{base[:1].upper() + base[1:]}</p>')
    if links:
        where = ("next to this page" if trace_folder in ("", ".")
                 else f"in <code>{html_text(trace_folder)}</code> (relative to this page)")
        head.append(f'<p class="note traces">Trace links are Chrome trace files {where}; open them in '
                    '<a href="https://ui.perfetto.dev">ui.perfetto.dev</a> (Open trace file) or '
                    "chrome://tracing.</p>")
    if outcomes:
        head.append("<table class=overview><thead><tr><th>test</th>"
                    + ("<th>chip</th>" if chips else "") + "<th class=num>device time</th>"
                    "<th class=num>delta</th>" + (f"<th class=num>{PEAK_HEADER}</th>" if memory else "")
                    + "<th class=num>uncosted</th><th>verdict</th></tr></thead>"
                    f"<tbody>{overview}</tbody></table>")
    else:
        head.append("<p>No profiled test ran.</p>")
    head.append("</header><main>")
    body = [section_html(o, links.get(trace_key(o, several[o.nodeid] > 1)), chips, trends.get(trend_key(o), ()))
            for o in outcomes]
    return "\n".join(head + body + ["</main></body></html>"]) + "\n"


def trace_key(outcome: TestOutcome, several: bool) -> str:
    """What names an outcome's trace file: its node id; with its variant where the test has
    several (``several``: each chip's trace is written, named so, ``plugin/session.py``), whether
    or not the run's other tests have."""
    return report_key(outcome, several)


def _several(outcomes: Sequence[TestOutcome]) -> Counter[str]:
    """How many outcomes each test has (those of a base's entry no test produced aside)."""
    return Counter(o.nodeid for o in outcomes if o.verdict.status != Status.NOT_GATED)


def trace_folder(trace_dir: Path | None, page_dir: Path) -> str:
    """Where the traces are, relative to the page (POSIX), "." beside it."""
    if trace_dir is None:
        return "."
    return Path(os.path.relpath(trace_dir.resolve(), page_dir.resolve())).as_posix()


def trace_links(outcomes: Sequence[TestOutcome], trace_dir: Path | None, page_dir: Path) -> dict[str, str]:
    """Relative links from the page to the traces that exist, so the folders can move together;
    keyed by ``trace_key``."""
    if trace_dir is None:
        return {}
    links = {}
    several = _several(outcomes)
    for o in outcomes:
        key = trace_key(o, several[o.nodeid] > 1)
        path = trace_path(trace_dir, key)
        if path.is_file():
            rel = os.path.relpath(path.resolve(), page_dir.resolve())
            links[key] = quote(Path(rel).as_posix())
    return links


def write_html(directory: Path, outcomes: Sequence[TestOutcome], trace_dir: Path | None = None,
               project_root: Path | None = None) -> Path:
    """Write ``directory/index.html``; returns its path. ``project_root``: where the project's
    git repository is (pytest's rootdir, a command's working directory), for a chart per test of
    its baseline's git history; None: no charts."""
    page = directory / PAGE_NAME
    text = render_page(outcomes, trace_links(outcomes, trace_dir, directory),
                       session_trends(outcomes, project_root) if project_root is not None else None,
                       trace_folder(trace_dir, directory))
    try:
        atomic_write_text(page, text)
    except OSError as exc:
        # Only a file where the folder should be (or above it) calls for another path; a full
        # disk or a read-only folder is said as it is (the hint sent users to a directory they
        # had already given).
        hint = ("; give --neuron-html (or `neuronprof report -o`) a directory"
                if exc.errno in (errno.EEXIST, errno.ENOTDIR) else "")
        raise ConfigError(f"cannot write the HTML page {show_path(page)}: {os_reason(exc)}{hint}") from None
    return page



def write_session_page(directory: Path, outcomes: Sequence[TestOutcome], paths: Mapping[str, Path]) -> None:
    """--neuron-html at the session's end (its entry in ``outputs/registry.py``), linking the
    traces of --neuron-trace-dir when there are some."""
    write_html(directory, outcomes, paths.get(TRACE_FLAG), paths.get(PROJECT_ROOT))
