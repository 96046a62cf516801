"""A test's ops on its chip's roofline, for the HTML page: arithmetic intensity (FLOP per byte
moved) against achieved throughput (FLOP per second of device time), both on log scales, under
the roofs of the test's hardware profile (``costmodel/profiles.py``): TensorE's peak for each
dtype its ops use, the lane engines' (VectorE, ScalarE: one operation per element and lane per
cycle), and HBM's bandwidth (the slanted roof). A point's area is its op's device time; the
hotspots are labelled; a baseline whose ops differ is drawn beside the current run on the same
axes. Inline SVG: no JavaScript, no network.

The numbers are the summary's (each op's flops, bytes and device time over all its calls), so a
point is where the cost model put the op. An elementwise op (VectorE, ScalarE, GpSimd) does
element operations, not FLOPs: where the run's report says how many (its ``utilisation``'s
``elements``; baseline entries keep none), it is drawn against its own engine's roof at one
operation per element and lane per cycle. Ops with neither (copies, casts, collectives, a
baseline's elementwise ops) are drawn on a bandwidth strip under the chart: the HBM bytes per
second they reach against HBM's peak. So an op that regressed is on the picture; an op that moved
no HBM bytes (fused, kept on chip) is named in a note.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..costmodel.profiles import HardwareProfile, available_hardware, load_hardware
from ..errors import NeuronProfError
from ..formatting import format_share, format_si, format_us
from ..gate.compare import Kind
from ..gate.outcome import TestOutcome
from ..gate.summary import ProfileSummary
from ..safetext import html_text

# Each engine's colour, in every chart of the page (the engine bars and the roofline's points).
ENGINE_COLORS = {"Tensor": "#4e79a7", "Vector": "#f28e2b", "Scalar": "#59a14f",
                 "GpSimd": "#b07aa1", "DMA": "#76b7b2", "Collective": "#e15759",
                 "other": "#bab0ac"}
HOTSPOTS = 5  # ops labelled per panel, by device time (and any op the gate flagged)
NOT_DRAWN_NAMED = 3  # ops without flops named in the note under the chart
_WIDTH, _HEIGHT = 860, 400
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 22, 30, 74  # a panel's margins: tick labels, titles, legend
_GAP = 18  # between two panels
_ROOF, _HBM, _LANE, _GRID, _AXIS = "#1f2328", "#8250df", "#57606a", "#eaeef2", "#57606a"
_BAD = "#d93025"
_CHAR_W = 6.6  # the width of a character of an 11 px label, for placing labels (an estimate)
_Box = tuple[float, float, float, float]  # a label's or a point's extent: left, top, right, bottom
_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8": "fp8"}


@dataclass(frozen=True)
class Point:
    """One op of a summary on the roofline."""

    op: str
    engine: str
    calls: int
    time_us: float
    flops: int
    bytes: int
    bound: str
    dtype: str
    lane: bool = False  # ``flops`` are element operations on a lane engine

    @property
    def unit(self) -> str:
        return "element ops" if self.lane else "FLOP"

    @property
    def bandwidth(self) -> float:
        """HBM bytes per second of device time."""
        return self.bytes / (self.time_us * 1e-6)

    @property
    def intensity(self) -> float:
        """FLOP per byte of HBM traffic."""
        return self.flops / self.bytes

    @property
    def throughput(self) -> float:
        """FLOP per second of device time."""
        return self.flops / (self.time_us * 1e-6)


@dataclass(frozen=True)
class Roof:
    name: str  # "TensorE bf16", "VectorE", ...
    flops_per_s: float
    kind: str  # "tensor" or "lane"


@dataclass(frozen=True)
class Roofs:
    """The ceilings of a hardware profile that a test's points are drawn under."""

    hardware: str
    hbm_bytes_per_s: float
    compute: tuple[Roof, ...]  # TensorE's first (highest first), then the lane engines'

    def attainable(self, point: Point) -> tuple[Roof, float]:
        """The roof that caps ``point``'s engine at its intensity, and that cap in FLOP/s:
        min(its engine's peak, intensity x HBM bandwidth)."""
        roof = self._engine_roof(point)
        return roof, min(roof.flops_per_s, point.intensity * self.hbm_bytes_per_s)

    def _engine_roof(self, point: Point) -> Roof:
        tensor = [r for r in self.compute if r.kind == "tensor"]
        if point.engine == "Tensor":
            short = _DTYPE_SHORT.get(point.dtype, point.dtype)
            return next((r for r in tensor if r.name.endswith(" " + short)), tensor[0])
        lanes = {r.name.split()[0]: r for r in self.compute if r.kind == "lane"}
        name = {"Vector": "VectorE", "Scalar": "ScalarE", "GpSimd": "GpSimd"}.get(point.engine, "")
        return lanes.get(name) or lanes.get("CUDA") or tensor[0]


LANE_ENGINES = ("Vector", "Scalar", "GpSimd")


def points(summary: ProfileSummary, elements: Mapping[str, float] | None = None
           ) -> tuple[list[Point], list[Point]]:
    """(the ops that can be drawn on the roofline: work (flops, or ``elements``' element
    operations for a lane-engine op), bytes and device time all above 0; the others with device
    time, largest first: the bandwidth strip's and the note's)."""
    drawn, left_out = [], []
    for name, op in summary.ranked():
        work, lane = op.flops, False
        if not work and op.engine in LANE_ENGINES and elements and elements.get(name):
            work, lane = int(elements[name]), True
        point = Point(name, op.engine, op.count, op.device_time_us, work, op.bytes, op.bound,
                      op.dtype, lane)
        if work > 0 and op.bytes > 0 and op.device_time_us > 0:
            drawn.append(point)
        elif op.device_time_us > 0:
            left_out.append(point)
    return drawn, left_out


def roofs(hw: HardwareProfile, dtypes: Sequence[str] = ()) -> Roofs:
    """The profile's roofs: TensorE (its arrays together) for each dtype in ``dtypes`` (bf16
    where there is none), the lane engines at one operation per element, HBM's bandwidth. A GPU
    profile's are its tensor cores and CUDA cores."""
    gpu = hw.gpu is not None
    tensor_name = "tensor cores" if gpu else "TensorE"
    rates: dict[str, float] = {}
    for dtype in sorted(set(dtypes) or {"bfloat16"}):
        rates[_DTYPE_SHORT.get(dtype, dtype)] = hw.tensor.flops_per_us(dtype) * hw.tensor.arrays * 1e6
    compute = [Roof(f"{tensor_name} {short}", rate, "tensor")
               for short, rate in sorted(rates.items(), key=lambda item: (-item[1], item[0]))]
    lanes = ([("CUDA cores", hw.vector)] if gpu
             else [("VectorE", hw.vector), ("ScalarE", hw.scalar), ("GpSimd", hw.gpsimd)])
    # the engines' peaks: lanes x clock (the profile's ``efficiency`` is what ops reach of it)
    compute += [Roof(name, engine.lanes * engine.clock_ghz * 1e9, "lane") for name, engine in lanes]
    return Roofs(hw.name, hw.hbm_bytes_per_us * 1e6, tuple(compute))


@functools.lru_cache(maxsize=1)
def _bundled() -> frozenset[str]:
    return frozenset(available_hardware())


def profile_of(summary: ProfileSummary) -> HardwareProfile | None:
    """The hardware profile a summary was made for; None for a measured backend's hardware (a
    CPU model, a GPU's name) or a name no bundled profile has."""
    if summary.hardware not in _bundled():
        return None
    try:
        return load_hardware(summary.hardware)
    except NeuronProfError:
        return None


def roofline_html(outcome: TestOutcome, hotspots: int = HOTSPOTS) -> str:
    """The roofline of a test's section (an SVG and its notes), "" where there is none to draw:
    no bundled profile for its hardware."""
    hw = profile_of(outcome.current)
    if hw is None:
        return ""
    elements = outcome.utilisation.elements if outcome.utilisation is not None else None
    current, left_out = points(outcome.current, elements)
    baseline = outcome.comparable_baseline
    old: list[Point] = []
    old_left: list[Point] = []
    if baseline is not None and baseline.hardware == outcome.current.hardware:
        old, old_left = points(baseline)
        if _same(old + old_left, [p for side in points(outcome.current) for p in side]):
            old = old_left = []  # nothing moved (the entries' numbers): one panel
    parts = []
    flagged = {op for f in outcome.verdict.regressions if f.kind is not Kind.TOTAL
               for op in (f.op.split(" + ") if f.kind is Kind.REPLACED else (f.op,))}
    if current or old:
        dtypes = [p.dtype for p in current + old if p.engine == "Tensor" and p.dtype]
        panels: list[tuple[str, Sequence[Point], set[str]]] = [("baseline", old, set())] if old else []
        panels.append(("current", current, flagged))
        parts.append(roofline_svg(panels, roofs(hw, dtypes), outcome.nodeid, hotspots))
    else:
        parts.append('<p class="note roofline-none">No op of this test does arithmetic the cost '
                     "model counts (FLOPs, or a lane engine's element operations in the run's "
                     "report): nothing to place on the roofline.</p>")
    rows = [(name, [p for p in pts if p.bytes > 0]) for name, pts in
            ((("baseline", old_left),) if old or old_left else ()) + (("current", left_out),)]
    if any(pts for _, pts in rows):
        parts.append(bandwidth_svg(rows, hw.hbm_bytes_per_us * 1e6, flagged, outcome.nodeid))
    on_chip = [p for p in left_out if p.bytes <= 0]
    if on_chip:
        parts.append(_on_chip_note(on_chip, outcome.current))
    return "\n".join(parts)


def _same(a: Sequence[Point], b: Sequence[Point]) -> bool:
    def key(p: Point) -> tuple[str, int, int, float]:
        return p.op, p.flops, p.bytes, round(p.time_us, 4)
    return sorted(map(key, a)) == sorted(map(key, b))


def _on_chip_note(left_out: Sequence[Point], summary: ProfileSummary) -> str:
    """The ops on neither picture: device time but no HBM bytes (fused, kept on chip)."""
    total = sum(p.time_us for p in left_out)
    share = total / summary.total_device_time_us if summary.total_device_time_us else 0.0
    named = [f"{p.op} {format_us(p.time_us)}" for p in left_out[:NOT_DRAWN_NAMED]]
    more = f" and {len(left_out) - len(named)} more" if len(left_out) > len(named) else ""
    return (f'<p class="note roofline-left-out">Not drawn: {len(left_out)} '
            f"op{'s' if len(left_out) != 1 else ''} that moved no HBM bytes (fused, or kept on chip; "
            f"{format_us(total)}, {format_share(share)} of the device time): "
            f"{html_text('; '.join(named))}{more}.</p>")


_STRIP_ROW = 34  # a row of the bandwidth strip


def bandwidth_svg(rows: Sequence[tuple[str, Sequence[Point]]], hbm_bytes_per_s: float,
                  flagged: set[str], nodeid: str, hotspots: int = HOTSPOTS) -> str:
    """The ops with no work on the roofline (copies, casts, collectives, a baseline's
    elementwise ops) on a strip per side: the HBM bytes per second each reaches (log scale)
    against HBM's peak, a point's area its device time, the gate's flagged ops ringed red."""
    pts = [p for _, side in rows for p in side]
    rates = [p.bandwidth for p in pts] + [hbm_bytes_per_s]
    lo = math.floor(math.log10(min(rates) / 1.5))
    hi = math.ceil(math.log10(max(rates) * 1.5))
    lo = min(lo, hi - 2)
    height = _TOP + _STRIP_ROW * len(rows) + 40
    x0, x1 = float(_LEFT), float(_WIDTH - _RIGHT)

    def px(rate: float) -> float:
        return x0 + (math.log10(rate) - lo) / (hi - lo) * (x1 - x0)

    longest = max([p.time_us for p in pts] + [1e-9])
    out = [f'<svg class="chart bandwidth-chart" role="img" viewBox="0 0 {_WIDTH} {height}" '
           f'width="{_WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>HBM bandwidth of the ops of {html_text(nodeid)} that do no arithmetic on the "
           "roofline</title>",
           f'<text class="panel-title" x="{x0}" y="{_TOP - 12}" font-weight="600">Ops without FLOPs: '
           "HBM bytes per second of device time</text>"]
    bottom = _TOP + _STRIP_ROW * len(rows)
    for e in range(lo, hi + 1):
        x = px(10.0 ** e)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{bottom}" stroke="{_GRID}"/>'
                   f'<text class="tick x" x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" '
                   f'font-size="11">{_rate(10.0 ** e, "B/s")}</text>')
    peak = px(hbm_bytes_per_s)
    out.append(f'<line class="roof hbm" x1="{peak:.1f}" y1="{_TOP - 4}" x2="{peak:.1f}" y2="{bottom}" '
               f'stroke="{_HBM}" stroke-width="2"><title>HBM: {_rate(hbm_bytes_per_s, "B/s")}</title></line>'
               f'<text class="roof-label hbm" x="{peak - 4:.1f}" y="{_TOP - 6}" text-anchor="end" '
               f'font-size="11" fill="{_HBM}">HBM {_rate(hbm_bytes_per_s, "B/s")}</text>')
    for i, (name, side) in enumerate(rows):
        y = _TOP + _STRIP_ROW * i + _STRIP_ROW / 2
        out.append(f'<g class="strip {html_text(name)}"><text x="{x0 - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end" font-size="11">{html_text(name)}</text>')
        labelled = {p.op for p in sorted(side, key=lambda p: -p.time_us)[:hotspots]} | (flagged & {p.op for p in side})
        for p in sorted(side, key=lambda p: -p.time_us):
            x, r = px(p.bandwidth), 3 + 8 * math.sqrt(p.time_us / longest)
            stroke = (f'stroke="{_BAD}" stroke-width="2.5"' if p.op in flagged else 'stroke="#fff" stroke-width="1"')
            title = (f"{p.op} ({p.engine}): {p.calls} call{'s' if p.calls != 1 else ''}, "
                     f"{format_us(p.time_us)}, {format_si(p.bytes, 'B')}; {_rate(p.bandwidth, 'B/s')}, "
                     f"{format_share(p.bandwidth / hbm_bytes_per_s)} of HBM's peak; bound: {p.bound or 'unknown'}")
            out.append(f'<circle class="op-point bandwidth{" flagged" if p.op in flagged else ""}" cx="{x:.1f}" '
                       f'cy="{y:.1f}" r="{r:.1f}" fill="{ENGINE_COLORS.get(p.engine, ENGINE_COLORS["other"])}" '
                       f'fill-opacity="0.8" {stroke}><title>{html_text(title)}</title></circle>')
        for k, p in enumerate(p for p in side if p.op in labelled):
            text = p.op[len("aten::"):] if p.op.startswith("aten::") else p.op
            out.append(f'<text class="op-label" x="{px(p.bandwidth) + 10:.1f}" '
                       f'y="{y - 6 + 12 * (k % 2):.1f}" font-size="10">{html_text(text[:28])}</text>')
        out.append("</g>")
    out.append(f'<text x="{x0}" y="{height - 8}" font-size="11" fill="{_LANE}">point area: device time; '
               "red ring: flagged by the gate; a baseline's elementwise ops are here: entries keep no "
               "element counts</text></svg>")
    return "".join(out)


class _Axes:
    """Log-log axes shared by the panels of one chart."""

    def __init__(self, pts: Sequence[Point], rf: Roofs) -> None:
        bw = rf.hbm_bytes_per_s
        peaks = [r.flops_per_s for r in rf.compute]
        intensities = [p.intensity for p in pts] + [max(peaks) / bw, min(peaks) / bw]
        rates = [p.throughput for p in pts] + peaks
        self.x_lo = math.floor(math.log10(min(intensities) / 1.5))
        self.x_hi = math.ceil(math.log10(max(intensities) * 3))
        self.y_hi = math.ceil(math.log10(max(rates) * 1.25))  # a point above its roof stays in
        self.y_lo = math.floor(math.log10(min(rates) / 1.5))
        if self.x_hi - self.x_lo < 3:
            self.x_lo = self.x_hi - 3
        if self.y_hi - self.y_lo < 3:
            self.y_lo = self.y_hi - 3
        self.y_lo = max(self.y_lo, self.y_hi - 9)  # nine decades at most: lower points sit on the floor

    def frame(self, x0: float, width: float, height: float) -> "_Frame":
        return _Frame(self, x0 + _LEFT, _TOP, width - _LEFT - _RIGHT, height - _TOP - _BOTTOM)


@dataclass(frozen=True)
class _Frame:
    axes: _Axes
    x: float  # the plot area's left, top, width, height
    y: float
    w: float
    h: float

    def px(self, intensity: float) -> float:
        a = self.axes
        return self.x + (math.log10(intensity) - a.x_lo) / (a.x_hi - a.x_lo) * self.w

    def py(self, flops_per_s: float) -> float:
        a = self.axes
        value = max(math.log10(flops_per_s), a.y_lo)
        return self.y + self.h - (value - a.y_lo) / (a.y_hi - a.y_lo) * self.h


def _tick(exponent: int, unit: str) -> str:
    value = 10.0 ** exponent
    if unit == "FLOP/s":
        for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if value >= factor:
                return f"{value / factor:g} {prefix}"
        return f"{value:g}"
    return f"{value / 1e3:g}k" if value >= 1e4 else f"{value:g}"


def _rate(value: float, unit: str = "FLOP/s") -> str:
    """A peak or a rate to three significant digits: 1.58e14 -> '158 TFLOP/s'."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def roofline_svg(panels: Sequence[tuple[str, Sequence[Point], set[str]]], rf: Roofs, nodeid: str,
                 hotspots: int = HOTSPOTS) -> str:
    """One SVG of one or two panels (name, points, ops the gate flagged) on shared axes."""
    axes = _Axes([p for _, pts, _ in panels for p in pts], rf)
    longest = max([p.time_us for _, pts, _ in panels for p in pts] + [1e-9])
    width = (_WIDTH - _GAP * (len(panels) - 1)) / len(panels)
    out = [f'<svg class="chart roofline-chart" role="img" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
           f'width="{_WIDTH}" height="{_HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>Roofline of {html_text(nodeid)} on {html_text(rf.hardware)}: arithmetic intensity "
           "against achieved throughput, point area by device time</title>"]
    for i, (name, pts, flagged) in enumerate(panels):
        frame = axes.frame(i * (width + _GAP), width, _HEIGHT)
        out.append(f'<g class="panel {html_text(name)}">')
        out += _grid(frame)
        circles = [(p, frame.px(p.intensity), frame.py(p.throughput), 3 + 11 * math.sqrt(p.time_us / longest))
                   for p in sorted(pts, key=lambda p: -p.time_us)]  # the largest first, small ones on top
        placed: list[_Box] = []  # labels drawn so far, which later ones keep clear of
        out += _roofs(frame, rf, [(x - r, y - r, x + r, y + r) for _, x, y, r in circles], placed)
        out.append(f'<text class="panel-title" x="{frame.x}" y="{_TOP - 12}" font-weight="600">'
                   f"{html_text(name)}: {len(pts)} op{'s' if len(pts) != 1 else ''} with FLOPs or "
                   "element ops</text>")
        out += _points(frame, circles, rf, flagged, hotspots, placed)
        out.append("</g>")
    out += _legend([p for _, pts, _ in panels for p in pts])
    out.append("</svg>")
    return "".join(out)


def _grid(frame: _Frame) -> list[str]:
    a = frame.axes
    x1, y1 = frame.x + frame.w, frame.y + frame.h
    out = [f'<rect x="{frame.x:.1f}" y="{frame.y:.1f}" width="{frame.w:.1f}" height="{frame.h:.1f}" '
           f'fill="none" stroke="{_AXIS}" stroke-width="1"/>']
    x_step = 1 if a.x_hi - a.x_lo <= 7 else 2
    for e in range(a.x_lo, a.x_hi + 1):
        x = frame.px(10.0 ** e)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{frame.y:.1f}" x2="{x:.1f}" y2="{y1:.1f}" '
                   f'stroke="{_GRID}"/>')
        if (e - a.x_lo) % x_step == 0:
            out.append(f'<text class="tick x" x="{x:.1f}" y="{y1 + 14:.1f}" text-anchor="middle" '
                       f'font-size="11">{_tick(e, "FLOP/B")}</text>')
    y_step = 1 if a.y_hi - a.y_lo <= 7 else 2
    for e in range(a.y_lo, a.y_hi + 1):
        y = frame.py(10.0 ** e)
        out.append(f'<line class="grid" x1="{frame.x:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" '
                   f'stroke="{_GRID}"/>')
        if (a.y_hi - e) % y_step == 0:
            out.append(f'<text class="tick y" x="{frame.x - 5:.1f}" y="{y + 4:.1f}" text-anchor="end" '
                       f'font-size="11">{_tick(e, "FLOP/s")}</text>')
    out.append(f'<text class="axis-title x" x="{frame.x + frame.w / 2:.1f}" y="{y1 + 30:.1f}" '
               'text-anchor="middle" font-size="11">arithmetic intensity (FLOP per byte of HBM '
               "traffic)</text>")
    cx, cy = frame.x - 46, frame.y + frame.h / 2
    out.append(f'<text class="axis-title y" x="{cx:.1f}" y="{cy:.1f}" text-anchor="middle" '
               f'font-size="11" transform="rotate(-90 {cx:.1f} {cy:.1f})">achieved FLOP/s (lane engines: '
               "element ops/s)</text>")
    return out


def _roofs(frame: _Frame, rf: Roofs, points: Sequence[_Box], placed: list[_Box]) -> list[str]:
    """The compute roofs (horizontal, from where HBM's roof meets them) and HBM's slanted roof up
    to the highest compute roof; each labelled with its peak, above its line (below where that
    is out of the plot or taken), at the right end, else where the label misses the points."""
    a = frame.axes
    bw = rf.hbm_bytes_per_s
    right = frame.x + frame.w
    out = []
    for roof in rf.compute:
        ridge = roof.flops_per_s / bw
        x0, y = frame.px(max(ridge, 10.0 ** a.x_lo)), frame.py(roof.flops_per_s)
        first = roof is rf.compute[0]  # the highest: the roof proper, solid
        color = _ROOF if roof.kind == "tensor" else _LANE
        dash = "" if first else ' stroke-dasharray="5 3"'
        out.append(f'<line class="roof {roof.kind}" x1="{x0:.1f}" y1="{y:.1f}" x2="{right:.1f}" '
                   f'y2="{y:.1f}" stroke="{color}" stroke-width="{2 if first else 1.3}"{dash}><title>'
                   f"{html_text(roof.name)}: {_rate(roof.flops_per_s)} peak</title></line>")
        text = f"{roof.name} {_rate(roof.flops_per_s)}"
        width = len(text) * _CHAR_W
        # right ends of the label: at the line's end above it or below, just before the line
        # starts (leading into it), then elsewhere along it
        spots = [(right - 4, y - 4), (right - 4, y + 12), (x0 - 6, y + 4)] + [
            (x, ly) for ly in (y - 4, y + 12) for x in ((x0 + right + width) / 2, x0 + width + 4)]
        boxes = [(x - width, ly - 10, x, ly + 2) for x, ly in spots]
        fits = [b for b in boxes if b[0] >= frame.x + 2 and b[2] <= right - 2 and b[1] >= frame.y
                and b[3] <= frame.y + frame.h and (b[0] >= x0 or b[2] <= x0 - 4)]
        box = next((b for b in fits if _clear(b, placed) and _clear(b, points)),
                   next((b for b in fits if _clear(b, placed)), fits[0] if fits else boxes[0]))
        placed += [box, (x0, y - 1.5, right, y + 1.5)]  # op labels keep off the label and the line
        out.append(f'<text class="roof-label" x="{box[2]:.1f}" y="{box[3] - 2:.1f}" text-anchor="end" '
                   f'font-size="11" fill="{color}">{html_text(text)}</text>')
    top = rf.compute[0].flops_per_s
    lo = max(10.0 ** a.x_lo, 10.0 ** a.y_lo / bw)
    hi = top / bw
    if hi > lo:
        x0, y0, x1, y1 = frame.px(lo), frame.py(lo * bw), frame.px(hi), frame.py(top)
        out.append(f'<line class="roof hbm" x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" '
                   f'stroke="{_HBM}" stroke-width="2"><title>HBM: {_rate(bw, "B/s")}</title></line>')
        # the label along the slanted roof, a third of the way up, just above it
        angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
        lx, ly = x0 + (x1 - x0) * 0.3, y0 + (y1 - y0) * 0.3
        out.append(f'<text class="roof-label hbm" x="{lx:.1f}" y="{ly - 5:.1f}" font-size="11" '
                   f'fill="{_HBM}" transform="rotate({angle:.1f} {lx:.1f} {ly:.1f})">'
                   f"HBM {_rate(bw, 'B/s')}</text>")
    return out


def _clear(box: _Box, others: Sequence[_Box]) -> bool:
    return all(box[2] <= o[0] or box[0] >= o[2] or box[3] <= o[1] or box[1] >= o[3] for o in others)


def _points(frame: _Frame, circles: Sequence[tuple[Point, float, float, float]], rf: Roofs,
            flagged: set[str], hotspots: int, placed: list[_Box]) -> list[str]:
    out = []
    ranked = sorted(circles, key=lambda c: -c[0].time_us)
    labelled = {c[0].op for c in ranked[:hotspots]} | (flagged & {c[0].op for c in circles})
    for p, x, y, r in circles:
        roof, cap = rf.attainable(p)
        stroke = (f'stroke="{_BAD}" stroke-width="2.5"' if p.op in flagged
                  else 'stroke="#fff" stroke-width="1"')
        title = (f"{p.op} ({p.engine}, {p.dtype or 'dtype unknown'}): {p.calls} call"
                 f"{'s' if p.calls != 1 else ''}, {format_us(p.time_us)}, {format_si(p.flops, p.unit)}, "
                 f"{format_si(p.bytes, 'B')}; {p.intensity:.3g} {p.unit}/B, "
                 f"{_rate(p.throughput, p.unit + '/s' if p.lane else 'FLOP/s')}, "
                 f"{format_share(p.throughput / cap)} of what the {roof.name} and HBM roofs allow "
                 f"there; bound: {p.bound or 'unknown'}")
        out.append(f'<circle class="op-point{" flagged" if p.op in flagged else ""}" cx="{x:.1f}" '
                   f'cy="{y:.1f}" r="{r:.1f}" fill="{ENGINE_COLORS.get(p.engine, ENGINE_COLORS["other"])}" '
                   f'fill-opacity="0.8" {stroke}><title>{html_text(title)}</title></circle>')
    for p, x, y, r in circles:  # the labels over every point
        if p.op in labelled:
            out.append(_label(frame, p.op, x, y, r, placed))
    return out


def _label(frame: _Frame, op: str, x: float, y: float, r: float, placed: list[_Box]) -> str:
    """An op's name beside its point: to the right, left, above or below, the first place that
    stays in the plot and misses the labels already placed."""
    text = op[len("aten::"):] if op.startswith("aten::") else op
    text = text if len(text) <= 28 else text[:27] + "\u2026"
    w, h = len(text) * _CHAR_W, 12.0
    candidates = [(x + r + 3, y + 4, "start"), (x - r - 3, y + 4, "end"),
                  (x, y - r - 4, "middle"), (x, y + r + 12, "middle")]
    for dy in (14, -14, 28, -28):
        candidates += [(x + r + 3, y + 4 + dy, "start"), (x - r - 3, y + 4 + dy, "end")]

    def box(cx: float, cy: float, anchor: str) -> _Box:
        left = cx if anchor == "start" else cx - w if anchor == "end" else cx - w / 2
        return left, cy - h + 2, left + w, cy + 2

    def inside(b: _Box) -> bool:
        return b[0] >= frame.x + 2 and b[2] <= frame.x + frame.w - 2 and b[1] >= frame.y and b[3] <= frame.y + frame.h

    fits = [c for c in candidates if inside(box(*c))]
    cx, cy, anchor = next((c for c in fits if _clear(box(*c), placed)), fits[0] if fits else candidates[0])
    placed.append(box(cx, cy, anchor))
    return (f'<text class="op-label" x="{cx:.1f}" y="{cy:.1f}" text-anchor="{anchor}" font-size="11">'
            f"{html_text(text)}</text>")


def _legend(pts: Sequence[Point]) -> list[str]:
    engines = [e for e in ENGINE_COLORS if any(p.engine == e for p in pts)]
    y = _HEIGHT - 12
    out = []
    x = float(_LEFT)
    for engine in engines:
        out.append(f'<circle cx="{x + 5:.1f}" cy="{y - 4}" r="5" fill="{ENGINE_COLORS[engine]}"/>'
                   f'<text x="{x + 14:.1f}" y="{y}" font-size="11">{engine}</text>')
        x += 24 + len(engine) * _CHAR_W
    out.append(f'<text x="{x + 6:.1f}" y="{y}" font-size="11" fill="{_LANE}">point area: device time; '
               "red ring: flagged by the gate; hover a point for its numbers</text>")
    return out
