"""The HTML page as issue 29 asks for it: sections in the overview's order, a badge for each
kind of verdict, trend charts with axes, values, commits and this run, a roofline per test; and
the whole page in a real browser (Debian's chromium), with a screenshot under build/."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import report_page_scenario as scenario
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.gate.compare import Finding, GatePolicy, Kind, Status, Verdict, compare
from pytest_neuronprof.gate.history import HistoryPoint
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import html, roofline_chart, trends

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "build" / "report-page.png"  # the workflow uploads it (artifact report-page)


class Svg(HTMLParser):
    """The elements of one SVG: each with its attributes and the text (or <title>) it holds."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[dict[str, Any]] = []
        self._open: list[dict[str, Any]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = {"tag": tag, **{k: v or "" for k, v in attrs}, "text": "", "title": ""}
        self.elements.append(element)
        self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop()["tag"] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if not self._open:
            return
        if self._open[-1]["tag"] == "title" and len(self._open) > 1:
            self._open[-2]["title"] += data
        else:
            self._open[-1]["text"] += data

    def find(self, tag: str, cls: str = "") -> list[dict[str, Any]]:
        return [e for e in self.elements if e["tag"] == tag and (not cls or cls in e.get("class", "").split())]


def svgs(page: str, cls: str) -> list[str]:
    return re.findall(rf'<svg class="chart {cls}".*?</svg>', page, re.S)


def sections(page: str) -> list[tuple[str, str]]:
    """(node id, badge) of each section, in the page's order."""
    return [(nodeid, badge) for badge, nodeid in re.findall(
        r'<section class="test [^"]*" id="[^"]*" data-verdict="[^"]*" data-badge="([^"]*)">\n'
        r"<h2><code>([^<]*)</code>", page)]


def overview(page: str) -> list[tuple[str, str]]:
    """(node id, badge) of each row of the overview table."""
    table = page[page.index("<table class=overview>"):page.index("</table>")]
    return [(nodeid, badge) for nodeid, badge in re.findall(
        r'<tr><td><a href="#[^"]*"><code>([^<]*)</code></a>.*?<span class="verdict ([^"]*)"', table)]


# --- item 5: order and badges ------------------------------------------------------------------

def test_sections_come_in_the_overviews_order_failures_then_accepted_then_by_name():
    page = html.render_page(scenario.outcomes())
    rows = overview(page)
    assert sections(page) == rows
    assert rows == [
        (scenario.TOO_BIG, "does-not-fit"), (scenario.REGRESSED, "regression"),
        (scenario.ACCEPTED, "accepted"),
        (scenario.UNCHANGED, "pass"), (scenario.CHIPS, "pass"), (scenario.CHIPS, "pass"),
        (scenario.NEW.replace("<", "&lt;"), "new")]
    # a test on two chips: a section per chip, in the overview's order (trn2, then h200)
    assert page.index(f'<code>{scenario.CHIPS}</code> on trn2') < page.index(f'<code>{scenario.CHIPS}</code> on h200')


def outcome(verdict: Verdict, total: float = 100.0, baseline: float | None = 100.0) -> TestOutcome:
    def summary(us: float) -> ProfileSummary:
        return ProfileSummary("simulated", "trn2", "1", "2.13", us,
                              {"aten::mm": OpSummary(1, us, "Tensor", 10**9, 10**6, 1.0, "m", dtype="bfloat16")})
    return TestOutcome("t.py::t", ("t.py", 1), verdict, summary(total),
                       summary(baseline) if baseline is not None else None)


def test_accepted_allowed_new_and_does_not_fit_have_badges_of_their_own():
    slower = Finding(Kind.SLOWER, "aten::mm", "m", 100.0, 143.9, 0.1, "hotspot grew")
    allowed = Finding(Kind.ALLOWED, "aten::mm", "m", 100.0, 120.0, 0.1, "allowed")
    fit = Finding(Kind.FIT, "(peak memory)", "", 25 << 30, 24 << 30, 0.0, "does not fit on trn2")
    cases = {
        "pass": outcome(Verdict(Status.PASS)),
        "accepted": outcome(Verdict(Status.PASS, accepted=(slower,), accepted_reason="bigger, see #12"), 143.9),
        "allowed": outcome(Verdict(Status.PASS, allowed=(allowed,)), 120.0),
        "new": outcome(Verdict(Status.NO_BASELINE, message="no baseline"), baseline=None),
        "does-not-fit": outcome(Verdict(Status.REGRESSION, regressions=(fit,)), baseline=None),
        "regression": outcome(Verdict(Status.REGRESSION, regressions=(slower,)), 143.9),
        "improved": outcome(Verdict(Status.IMPROVED), 80.0),
        "incomparable": outcome(Verdict(Status.INCOMPARABLE, message="torch changed")),
    }
    colours = {}
    for kind, o in cases.items():
        assert html.badge(o) == kind
        section = html.section_html(o)
        label = "does not fit" if kind == "does-not-fit" else kind
        assert re.search(rf'<span class="verdict {kind}" title="[^"]+">{label}</span>', section), kind
        assert section.startswith(f'<section class="test {kind}" ')
        colours[kind] = html.badge_color(o)
        # its colour is the CSS rule of its class, for the badge and the section's border
        assert f".verdict.{kind}{{background:{colours[kind]}}}" in html._CSS
        assert f"section.test.{kind}{{border-left-color:{colours[kind]}}}" in html._CSS
    # an accepted +43.9 % regression does not look like an unchanged test
    assert len(set(colours.values())) == len(colours)
    # the gate's "does not fit" verdict, however it is spelled, gets the same badge
    for spelling in ("does not fit", "does-not-fit"):
        o = outcome(Verdict(Status.REGRESSION), baseline=None)
        object.__setattr__(o.verdict, "status", spelling)
        assert html.badge(o) == "does-not-fit"
    # a recorded test above its memory limit (recorded, and failed)
    recorded = outcome(Verdict(Status.RECORDED, regressions=(fit,)), baseline=None)
    assert html.badge(recorded) == "does-not-fit"


# --- item 5: the trend chart -------------------------------------------------------------------

def point(i: int, us: float) -> HistoryPoint:
    return HistoryPoint(f"{i:x}" * 40, f"2025-03-0{i}", f"change {i} <b>", "t.py::t", "simulated:trn2", us, None, None)


def test_a_trend_of_one_commit_draws_it_and_this_run_with_the_change_marked():
    chart = trends.trend_chart([point(1, 100.0)], 143.9, 100.0, "#d93025")
    svg = Svg(chart)
    # the commit: its date and short hash under it, its value, its subject on hover
    ticks = [e["text"] for e in svg.find("text", "tick")]
    assert "2025-03-01" in ticks and "1111111" in ticks and "this run" in ticks
    (last,) = svg.find("circle", "last-change")
    assert last["title"] == f"{'1' * 10} 2025-03-01 100.000 us: change 1 &lt;b&gt;".replace("&lt;", "<").replace("&gt;", ">")
    values = [e["text"] for e in svg.find("text", "value")]
    assert values == ["100 us", "143.9 us"]
    # this run: the last point, right of the commit and higher (more time), in the verdict's colour
    (now,) = svg.find("circle", "current")
    assert float(now["cx"]) > float(last["cx"]) and float(now["cy"]) < float(last["cy"])
    assert now["fill"] == "#d93025" and "this run: 143.900 us (+43.9% on the baseline)" in now["title"]
    # the change marked: a bracket from the baseline's level to this run's, labelled
    (change,) = svg.find("path", "change")
    start, end = map(float, re.fullmatch(r"M[\d.]+,([\d.]+)H[\d.]+V([\d.]+)H[\d.]+", change["d"]).groups())
    assert start == pytest.approx(float(last["cy"]), abs=0.11)  # the baseline: the last commit's
    assert end == pytest.approx(float(now["cy"]), abs=0.11)
    assert [e["text"] for e in svg.find("text", "change-label")] == ["+43.9%"]
    # a value axis with ticks in time units, and titled axes
    y_ticks = [e["text"] for e in svg.find("text", "tick") if "y" in e["class"].split()]
    assert len(y_ticks) >= 3 and all(t.endswith(" us") for t in y_ticks)
    assert {e["text"] for e in svg.find("text", "axis-title")} >= {"device time"}
    assert any("commits that changed this test's baseline" in e["text"] for e in svg.find("text", "axis-title"))


def test_a_long_history_labels_some_commits_and_the_extreme_values():
    history = [point(i % 9 + 1, 100.0 + (i % 5) * 10 + (50 if i == 7 else 0)) for i in range(30)]
    svg = Svg(trends.trend_chart(history, 120.0, 110.0))
    dates = [e for e in svg.find("text", "tick") if e["text"].startswith("2025-")]
    assert 2 <= len(dates) <= 8  # not thirty labels on top of each other
    xs = [float(e["x"]) for e in dates]
    assert xs == sorted(xs) and xs[0] < 200 and xs[-1] > 600  # spread over the axis
    values = [e["text"] for e in svg.find("text", "value")]
    assert "170 us" in values and "100 us" in values and "120 us" in values  # highest, lowest, this run
    assert len(svg.find("circle", "point")) == 29 and len(svg.find("circle", "last-change")) == 1


def test_the_page_draws_this_runs_point_on_the_tests_trend():
    page = html.render_page(scenario.outcomes(), None, scenario.trends())
    (chart,) = svgs(page, "trend-chart")
    regressed = page[page.index(f"<h2><code>{scenario.REGRESSED}</code>"):]
    assert chart in regressed[:regressed.index("</section>")]
    (now,) = Svg(chart).find("circle", "current")
    assert now["fill"] == html.STATUS_COLORS[Status.REGRESSION]
    assert "this run: 260." in now["title"] and "on the baseline)" in now["title"]


# --- item 6: the roofline ----------------------------------------------------------------------

def log_axis(svg: Svg, axis: str) -> tuple[float, float]:
    """(pixels per decade, pixel of 10**0) of a panel's axis, from its tick labels."""
    units = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    ticks = []
    for e in svg.find("text", "tick"):
        if axis not in e["class"].split():
            continue
        number, _, prefix = e["text"].partition(" ")
        value = float(number.rstrip("k")) * (1e3 if number.endswith("k") else 1) * units.get(prefix, 1)
        ticks.append((math.log10(value), float(e["x"] if axis == "x" else e["y"]) - (0 if axis == "x" else 4)))
    ticks = sorted(set(ticks))
    (e0, p0), (e1, p1) = ticks[0], ticks[-1]
    per_decade = (p1 - p0) / (e1 - e0)
    return per_decade, p0 - e0 * per_decade


def test_each_op_with_flops_sits_at_its_intensity_and_throughput_under_the_chips_roofs():
    base = scenario.profile()
    o = TestOutcome("t.py::t", ("t.py", 1), compare(base, base, GatePolicy()), base, base)
    text = roofline_chart.roofline_html(o)
    (chart,) = svgs(text, "roofline-chart")
    svg = Svg(chart)
    assert len(svg.find("g", "panel")) == 1  # nothing moved: one panel
    x_scale, x_zero = log_axis(svg, "x")
    y_scale, y_zero = log_axis(svg, "y")
    drawn = {e["title"].split(" (")[0]: e for e in svg.find("circle", "op-point")}
    with_flops = {name for name, op in base.ops.items() if op.flops and op.bytes and op.device_time_us}
    assert set(drawn) == with_flops and "aten::addmm" in drawn
    for name, e in drawn.items():
        op = base.ops[name]
        assert float(e["cx"]) == pytest.approx(x_zero + x_scale * math.log10(op.flops / op.bytes), abs=0.3)
        throughput = op.flops / (op.device_time_us * 1e-6)
        assert float(e["cy"]) == pytest.approx(y_zero + y_scale * math.log10(throughput), abs=0.3)
    # the longer op is the larger point
    by_time = sorted(drawn, key=lambda n: base.ops[n].device_time_us)
    assert [float(drawn[n]["r"]) for n in by_time] == sorted(float(drawn[n]["r"]) for n in by_time)
    # the roofs of trn2: TensorE bf16 over the logical core's arrays, VectorE and ScalarE, HBM
    hw = load_hardware("trn2")
    tensor_peak = hw.tensor.tflops["bfloat16"] * hw.tensor.arrays * 1e12
    labels = [e["text"] for e in svg.find("text", "roof-label")]
    assert labels == [f"TensorE bf16 {tensor_peak / 1e12:.3g} TFLOP/s",
                      f"VectorE {hw.vector.lanes * hw.vector.clock_ghz:.3g} GFLOP/s",
                      f"ScalarE {hw.scalar.lanes * hw.scalar.clock_ghz:.3g} GFLOP/s",
                      f"GpSimd {hw.gpsimd.lanes * hw.gpsimd.clock_ghz:.3g} GFLOP/s",
                      f"HBM {hw.hbm_gbps:.3g} GB/s"]
    (tensor_roof,) = svg.find("line", "tensor")
    assert float(tensor_roof["y1"]) == pytest.approx(y_zero + y_scale * math.log10(tensor_peak), abs=0.3)
    (hbm,) = svg.find("line", "hbm")
    for x, y in ((hbm["x1"], hbm["y1"]), (hbm["x2"], hbm["y2"])):  # on throughput = intensity x bandwidth
        intensity = 10 ** ((float(x) - x_zero) / x_scale)
        assert float(y) == pytest.approx(y_zero + y_scale * math.log10(intensity * hw.hbm_gbps * 1e9), abs=0.5)
    assert float(hbm["y2"]) == pytest.approx(float(tensor_roof["y1"]), abs=0.2)  # up to the ridge
    # the hotspots are labelled (without the aten:: prefix)
    assert "addmm" in [e["text"] for e in svg.find("text", "op-label")]
    # the ops without flops (the summary alone keeps no element counts) are on the bandwidth
    # strip, each at the HBM bytes per second it reaches
    (strip,) = svgs(text, "bandwidth-chart")
    bandwidth = Svg(strip)
    on_strip = {e["title"].split(" (")[0]: e for e in bandwidth.find("circle", "op-point")}
    no_flops = {n for n, op in base.ops.items() if not op.flops and op.bytes and op.device_time_us}
    assert set(on_strip) == no_flops and "aten::native_layer_norm" in on_strip
    ticks = [(math.log10(_bytes_per_s(e["text"])), float(e["x"])) for e in bandwidth.find("text", "tick")]
    (e0, x0), (e1, x1) = ticks[0], ticks[-1]
    for name, e in on_strip.items():
        op = base.ops[name]
        rate = op.bytes / (op.device_time_us * 1e-6)
        assert float(e["cx"]) == pytest.approx(x0 + (math.log10(rate) - e0) * (x1 - x0) / (e1 - e0), abs=0.3)
    (peak,) = bandwidth.find("line", "hbm")
    assert float(peak["x1"]) == pytest.approx(x0 + (math.log10(hw.hbm_gbps * 1e9) - e0) * (x1 - x0) / (e1 - e0), abs=0.3)


def _bytes_per_s(label: str) -> float:
    number, _, unit = label.partition(" ")
    return float(number) * {"B/s": 1, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}[unit]


def test_an_elementwise_op_sits_under_its_own_engines_roof_where_the_report_counts_its_elements():
    """The run's report keeps each lane-engine op's element operations (``utilisation.elements``):
    with them a layer norm is drawn against VectorE's roof, at elements per byte and per second."""
    base = scenario.profile()
    found = scenario.why()["utilisation"]
    o = TestOutcome("t.py::t", ("t.py", 1), compare(base, base, GatePolicy()), base, base, utilisation=found)
    text = roofline_chart.roofline_html(o)
    svg = Svg(svgs(text, "roofline-chart")[0])
    drawn = {e["title"].split(" (")[0]: e for e in svg.find("circle", "op-point")}
    norm = base.ops["aten::native_layer_norm"]
    elements = found.elements["aten::native_layer_norm"]
    assert "aten::native_layer_norm" in drawn and "element ops" in drawn["aten::native_layer_norm"]["title"]
    x_scale, x_zero = log_axis(svg, "x")
    y_scale, y_zero = log_axis(svg, "y")
    assert float(drawn["aten::native_layer_norm"]["cx"]) == pytest.approx(
        x_zero + x_scale * math.log10(elements / norm.bytes), abs=0.3)
    assert float(drawn["aten::native_layer_norm"]["cy"]) == pytest.approx(
        y_zero + y_scale * math.log10(elements / (norm.device_time_us * 1e-6)), abs=0.3)
    # every op of this block has work now: no bandwidth strip (the copies of the eager
    # attention's are on one: the browser test's regressed section)
    assert svgs(text, "bandwidth-chart") == []
    assert set(drawn) == {name for name, op in base.ops.items() if op.bytes and op.device_time_us}


def test_a_baseline_whose_ops_moved_is_drawn_beside_the_current_run_on_the_same_axes():
    base, slow = scenario.profile(), scenario.profile(eager=True)
    o = TestOutcome("t.py::t", ("t.py", 1), compare(base, slow, GatePolicy()), slow, base)
    (chart,) = svgs(roofline_chart.roofline_html(o), "roofline-chart")
    svg = Svg(chart)
    assert [e["class"] for e in svg.find("g", "panel")] == ["panel baseline", "panel current"]
    titles = [e["text"] for e in svg.find("text", "panel-title")]
    assert titles[0].startswith("baseline: ") and titles[1].startswith("current: ")
    points = svg.find("circle", "op-point")
    names = [e["title"].split(" (")[0] for e in points]
    assert "aten::_scaled_dot_product_flash_attention" in names  # the baseline's fused attention
    assert "aten::bmm" in names  # the eager attention's products, flagged by the gate
    (flagged,) = [e for e in points if "flagged" in e["class"].split()]
    assert flagged["title"].startswith("aten::bmm ") and flagged["stroke"] == "#d93025"
    # the same axes: addmm, unchanged, at the same height in both panels
    addmm = [e for e in points if e["title"].startswith("aten::addmm ")]
    assert len(addmm) == 2 and addmm[0]["cy"] == addmm[1]["cy"] and float(addmm[1]["cx"]) > 430


def test_a_gpu_profile_has_tensor_and_cuda_core_roofs_and_a_measured_cpu_none():
    h200 = scenario.profile("h200")
    o = TestOutcome("t.py::t", ("t.py", 1), Verdict(Status.NO_BASELINE), h200, None)
    labels = [e["text"] for e in Svg(roofline_chart.roofline_html(o)).find("text", "roof-label")]
    hw = load_hardware("h200")
    assert labels[0] == f"tensor cores bf16 {hw.tensor.tflops['bfloat16']:.3g} TFLOP/s"
    assert labels[1].startswith("CUDA cores ") and labels[2] == f"HBM {hw.hbm_gbps / 1e3:.3g} TB/s"
    cpu = replace(h200, backend="cpu", hardware="Intel(R) Xeon(R) 8 threads")
    assert roofline_chart.roofline_html(TestOutcome("t.py::t", ("t.py", 1), Verdict(Status.NO_BASELINE), cpu, None)) == ""


def test_a_test_with_no_flops_says_so_instead_of_an_empty_chart():
    summary = ProfileSummary("simulated", "trn2", "1", "2.13", 12.5,
                             {"aten::add": OpSummary(1, 10.0, "Vector", 0, 4096, 0.8, "m"),
                              "aten::mul": OpSummary(1, 2.5, "Vector", 0, 0, 0.2, "m")})
    text = roofline_chart.roofline_html(TestOutcome("t.py::t", ("t.py", 1), Verdict(Status.NO_BASELINE), summary, None))
    assert svgs(text, "roofline-chart") == [] and "nothing to place on the roofline" in text
    (strip,) = svgs(text, "bandwidth-chart")  # the copy's bytes per second, on the strip
    assert [e["title"].split(" (")[0] for e in Svg(strip).find("circle", "op-point")] == ["aten::add"]
    # an op that moved no HBM bytes (fused, on chip) is named
    assert "1 op that moved no HBM bytes (fused, or kept on chip; 2.500 us, 20% of the device time): aten::mul" in text


def test_every_section_of_a_simulated_run_has_its_roofline():
    page = html.render_page(scenario.outcomes(), None, scenario.trends())
    assert len(svgs(page, "roofline-chart")) == 7
    assert page.count("<h3>Roofline on trn2</h3>") == 6 and page.count("<h3>Roofline on h200</h3>") == 1


# --- item 7: in a real browser -----------------------------------------------------------------

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]
# Added to a copy of the page (the page has no script): measures the laid-out page and writes the
# numbers into the DOM, which --dump-dom prints.
PROBE = """<pre id="probe"></pre><script>
const out = {sections: [], svgs: [], overflow: [], rows: [],
             pageOverflow: document.documentElement.scrollWidth - window.innerWidth};
for (const s of document.querySelectorAll("section.test"))
  out.sections.push([s.querySelector("h2 code").textContent, s.dataset.badge,
                     getComputedStyle(s.querySelector(".verdict")).backgroundColor,
                     s.querySelectorAll("li.recommendation").length,
                     s.querySelector("p.utilisation") ? s.querySelector("p.utilisation").getBoundingClientRect().height : 0,
                     s.querySelector("p.utilisation-change") ? s.querySelector("p.utilisation-change").textContent : "",
                     s.querySelector("details.metrics") ? s.querySelectorAll("details.metrics tr").length : 0,
                     Array.from(s.querySelectorAll("li.recommendation")).map(li => [li.dataset.rule,
                       Math.round(li.getBoundingClientRect().height)])]);
for (const r of document.querySelectorAll("table.overview tbody tr"))
  out.rows.push(r.querySelector("code").textContent);
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal;
  out.svgs.push([svg.getAttribute("class"), Math.round(box.width), Math.round(box.height),
                 svg.querySelectorAll("circle").length]);
  const scale = vb.width / box.width;  // CSS pixels to the chart's own units
  for (const t of svg.querySelectorAll("text")) {
    const r = t.getBoundingClientRect();  // rotated labels too, as drawn
    const x0 = (r.left - box.left) * scale, x1 = (r.right - box.left) * scale;
    const y0 = (r.top - box.top) * scale, y1 = (r.bottom - box.top) * scale;
    if (x0 < -0.5 || x1 > vb.width + 0.5 || y0 < -0.5 || y1 > vb.height + 0.5)
      out.overflow.push([t.textContent, Math.round(x0), Math.round(y0), Math.round(x1), Math.round(y1)]);
  }
}
document.getElementById("probe").textContent = JSON.stringify(out);
</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        return subprocess.run([CHROMIUM or "chromium", *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(stderr: str) -> list[str]:
    """What the page logged to the console, or failed to load (chromium's own lines about
    D-Bus or the GPU are not the page's)."""
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line or "Uncaught" in line or "Failed to load resource" in line
            or "net::ERR_" in line]


@pytest.mark.slow  # starts a browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs a browser: Debian's chromium package "
                    "(apt-get install chromium; .ci/run installs it), not found on PATH")
def test_the_page_in_headless_chromium(tmp_path):
    page = html.write_html(tmp_path / "page", scenario.outcomes())
    text = html.render_page(scenario.outcomes(), None, scenario.trends())  # with a trend
    page.write_text(text, encoding="utf-8")
    probed = page.with_name("probed.html")
    probed.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    done = chromium("--enable-logging=stderr", "--v=0", "--window-size=1280,2400", "--dump-dom",
                    probed.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_errors(done.stderr) == []
    result = json.loads(done.stdout.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0]
                        .replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    names = [s[0] for s in result["sections"]]
    assert names == result["rows"] and len(names) == 7  # the sections in the overview's order
    assert [s[1] for s in result["sections"]] == [
        "does-not-fit", "regression", "accepted", "pass", "pass", "pass", "new"]
    colours = {badge: colour for _, badge, colour, *_ in result["sections"]}
    assert len(set(colours.values())) == len(colours)  # accepted is not pass's blue
    # why it is slow: every section's utilisation line, laid out, with its metrics table (12
    # metrics and a header row) and its recommendations; the regression's change of utilisation
    for name, badge, _, advice, line_px, change, metric_rows, items in result["sections"]:
        assert line_px > 10 and metric_rows == 13, name
        assert advice == len(items) >= 1 and all(px > 10 for _, px in items), name
    regressed = next(s for s in result["sections"] if s[1] == "regression")
    assert regressed[5].startswith("utilisation: MFU ") and " -> " in regressed[5]
    assert "small_dma" in [rule for rule, _ in regressed[7]]  # the eager attention's strided clone
    assert all(not s[5] for s in result["sections"] if s[1] != "regression")
    kinds = [cls for cls, _, _, _ in result["svgs"]]
    assert kinds.count("chart roofline-chart") == 7 and kinds.count("chart trend-chart") == 1
    # the ops of each with no work on the roofline, on its bandwidth strip (the report's element
    # counts put the elementwise ops on the roofline: the strip is left to copies, where there are)
    # (here: the two sections whose baseline moved, whose baseline panel's elementwise ops the
    # entry keeps no element counts of)
    assert kinds.count("chart bandwidth-chart") == 2
    for cls, width, height, circles in result["svgs"]:
        assert width > 600 and height > 40, (cls, width, height)  # laid out, not collapsed
        if cls in ("chart roofline-chart", "chart trend-chart", "chart bandwidth-chart"):
            assert height > 80 and circles >= 2, (cls, height, circles)
    assert result["overflow"] == [], json.dumps(result["overflow"])  # no label outside its chart
    assert result["pageOverflow"] <= 0  # no horizontal scrolling at 1280 px

    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    shot = chromium("--window-size=1280,2400", f"--screenshot={SCREENSHOT}", page.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and SCREENSHOT.stat().st_size > 50_000


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install chromium)")
def test_the_console_check_sees_a_pages_errors(tmp_path):
    """The check above would see an error: a page whose script throws and whose image is not
    there."""
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><body><img src="missing.png"><script>notDefined()</script>'
                      "</body></html>", encoding="utf-8")
    done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", broken.as_uri())
    errors = console_errors(done.stderr)
    assert any("notDefined" in line for line in errors), done.stderr[-2000:]
