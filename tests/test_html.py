"""The HTML page (--neuron-html, `neuronprof report`): structure, charts, trace links, no external
assets; and, where Chromium is installed, how a real browser lays it out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from pytest_neuronprof.cli import main
from pytest_neuronprof.errors import ConfigError
from pytest_neuronprof.gate import compare as gate
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import html
from pytest_neuronprof.outputs.trace_files import trace_file_name
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.outputs.trace_files import trace_file_name

CHROMIUM = "/usr/bin/chromium"
REGRESSED, PASSED, NEW = ("tests/test_a.py::test_regressed", "tests/test_a.py::test_passed",
                          "tests/test_b.py::test_new[x<y]")  # '<' must be escaped


def summary(**ops: tuple[float, str]) -> ProfileSummary:
    total = sum(t for t, _ in ops.values())
    return ProfileSummary("simulated", "trn2", "1", "2.13", total, {
        f"aten::{name}": OpSummary(1, t, engine, 0, 0, t / total, "m") for name, (t, engine) in ops.items()})


BASE = dict(mm=(60.0, "Tensor"), add=(20.0, "Vector"), exp=(10.0, "Scalar"), gather=(6.0, "GpSimd"),
            copy_=(4.0, "DMA"))


def outcomes() -> list[TestOutcome]:
    slow = summary(**{**BASE, "mm": (120.0, "Tensor")})
    policy = gate.GatePolicy()
    return [
        TestOutcome(REGRESSED, ("tests/test_a.py", 3), gate.compare(summary(**BASE), slow, policy),
                           slow, summary(**BASE)),
        TestOutcome(PASSED, ("tests/test_a.py", 9), gate.compare(summary(**BASE), summary(**BASE), policy),
                           summary(**BASE), summary(**BASE)),
        TestOutcome(NEW, ("tests/test_b.py", 4), gate.Verdict(gate.Status.NO_BASELINE, message="no baseline"),
                           summary(**BASE), None),
    ]


class Page(HTMLParser):
    """What the tests look at: sections with their SVGs, verdicts, links and tag names."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.sections: list[dict[str, Any]] = []
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str]] = []
        self._in_verdict = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        self.attrs += [(k, v or "") for k, v in attrs]
        if tag == "section":
            self.sections.append({"id": a["id"], "class": a["class"], "verdict": a["data-verdict"],
                                  "svgs": [], "links": [], "verdict_text": "", "bars": [], "code": ""})
        elif self.sections:
            current = self.sections[-1]
            if tag == "svg":
                current["svgs"].append(a["class"])
            elif tag == "a":
                current["links"].append(a["href"])
            elif tag == "span" and "verdict" in a.get("class", "").split():
                self._in_verdict = True
            elif tag == "rect" and "bar" in a.get("class", "").split():
                current["bars"].append((a["class"], float(a["width"]), a["fill"]))

    def handle_data(self, data: str) -> None:
        if self._in_verdict:
            self.sections[-1]["verdict_text"] += data
        elif self.sections and not self.sections[-1]["code"] and data.startswith("tests/"):
            self.sections[-1]["code"] = data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._in_verdict = False


def write_page(tmp_path: Path) -> Path:
    traces = tmp_path / "traces"
    traces.mkdir()
    for nodeid in (REGRESSED, NEW):  # PASSED has no trace: no link
        (traces / trace_file_name(nodeid)).write_text("{}")
    return html.write_html(tmp_path / "page", outcomes(), traces)


def test_one_section_per_test_with_charts_verdict_and_trace_links(tmp_path):
    page_path = write_page(tmp_path)
    page = Page(page_path.read_text(encoding="utf-8"))
    # the nodeid, unescaped; in the overview's order: the regression first (issue 29)
    assert [s["code"] for s in page.sections] == [REGRESSED, PASSED, NEW]
    for s in page.sections:
        assert s["svgs"] == ["chart ops-chart", "chart engine-chart"]  # no op with flops: no roofline
    assert [(s["verdict"], s["verdict_text"]) for s in page.sections] == [
        ("regression", "regression"), ("pass", "pass"), ("no-baseline", "new")]
    regressed, passed, new = page.sections
    # Regressed: a current and a baseline bar per op; mm's current bar red and twice as long.
    bars = {(cls, fill) for cls, _, fill in regressed["bars"]}
    assert len(regressed["bars"]) == 10 and ("bar current", "#d93025") in bars
    mm_current, mm_base = regressed["bars"][0][1], regressed["bars"][1][1]
    assert mm_current == pytest.approx(2 * mm_base, abs=0.2)
    assert len(new["bars"]) == 5 and {cls for cls, _, _ in new["bars"]} == {"bar current"}
    # Trace links: relative, they resolve from the page's folder, and only where a trace exists.
    trace_links = [link for link in regressed["links"] + new["links"] if link.endswith(".trace.json")]
    assert [Path(link).parent.as_posix() for link in trace_links] == ["../traces", "../traces"]
    for link in trace_links:
        assert (page_path.parent / unquote(link)).is_file()
    assert not [link for link in passed["links"] if link.endswith(".trace.json")]
    text = page_path.read_text(encoding="utf-8")
    assert "ui.perfetto.dev" in text and "test_new[x&lt;y]" in text


def test_page_is_self_contained(tmp_path):
    text = write_page(tmp_path).read_text(encoding="utf-8")
    page = Page(text)
    assert not page.tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert not [k for k, _ in page.attrs if k in ("src", "srcset") or k.startswith("on")]
    hrefs = [v for k, v in page.attrs if k == "href"]
    external = {h for h in hrefs if "://" in h}
    assert external == {"https://ui.perfetto.dev"}  # a link for people, not an asset
    assert "@import" not in text and "url(" not in text  # nor CSS that fetches


def test_engine_breakdown_and_top_ops():
    o = outcomes()[0]
    assert html.engine_times(o.current) == {"Tensor": 120.0, "Vector": 20.0, "Scalar": 10.0,
                                            "GpSimd": 6.0, "DMA": 4.0}
    table = html.engine_table(o)
    assert "<td>Tensor</td><td class=num>60.000 us</td><td class=num>120.000 us</td><td class=num>+100.0%</td>" in table
    many = summary(**{f"op{i}": (float(i + 1), "Vector") for i in range(15)})
    section = html.section_html(TestOutcome("t.py::t", ("t.py", 1), gate.Verdict("pass"), many, many))
    assert section.count('<g class="op">') == 10 and "The top 10 of 15 ops" in section
    assert section.index("aten::op14") < section.index("aten::op5")  # largest first


def test_plugin_option_and_ini_and_cli_write_the_same_page(pytester: pytest.Pytester, capsys):
    pytester.makepyfile(test_mm="""
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_mm():
            torch.randn(64, 64) @ torch.randn(64, 64)
    """)
    pytester.runpytest("--neuron-baseline", "--neuron-html", "recorded").assert_outcomes(passed=1)
    assert Page((pytester.path / "recorded" / "index.html").read_text()).sections[0]["verdict"] == "recorded"
    pytester.makeini("[pytest]\nneuron_html = html\n")
    pytester.runpytest("--neuron-trace-dir", "traces", "--neuron-report", "r.json").assert_outcomes(passed=1)
    plugin_page = (pytester.path / "html" / "index.html").read_text()
    (section,) = Page(plugin_page).sections
    assert section["verdict_text"] == "pass"
    assert "traces/" + trace_file_name("test_mm.py::test_mm") in " ".join(section["links"])
    assert main(["report", str(pytester.path / "r.json"), "-o", str(pytester.path / "from_cli"),
                 "--trace-dir", str(pytester.path / "traces")]) == 0
    assert (pytester.path / "from_cli" / "index.html").read_text() == plugin_page


# A probe the test adds to a copy of the page (the page itself has no script): it measures the
# laid-out page and writes the numbers into the DOM, which --dump-dom then prints.
PROBE = """<pre id="probe"></pre><script>
const out = {sections: document.querySelectorAll("section.test").length, svgs: [], overflow: [],
             pageOverflow: document.documentElement.scrollWidth - window.innerWidth};
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal;
  out.svgs.push([svg.getAttribute("class"), Math.round(box.width), Math.round(box.height)]);
  for (const t of svg.querySelectorAll("text")) {
    const b = t.getBBox();
    if (b.x < -0.5 || b.x + b.width > vb.width + 0.5) out.overflow.push(t.textContent);
  }
}
document.getElementById("probe").textContent = JSON.stringify(out);
</script>"""


@pytest.mark.slow  # starts a subprocess
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Chromium (apt-get install chromium)")
def test_page_in_a_real_browser(tmp_path):
    page = write_page(tmp_path)
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        done = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1200,1600", "--dump-dom", probed.as_uri()],
            capture_output=True, text=True, timeout=90)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    result = json.loads(dom.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))
    assert result["sections"] == 3
    assert len(result["svgs"]) == 6
    for cls, width, height in result["svgs"]:
        assert width > 600 and height > 40, (cls, width, height)  # laid out, not collapsed
    assert result["overflow"] == []  # no label runs off the right edge of its chart
    assert result["pageOverflow"] <= 0  # no horizontal scrolling at 1200 px
    assert Page(dom).sections[0]["verdict_text"] == "regression"


def test_an_output_path_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot write the HTML page .*taken"):
        html.write_html(blocker, outcomes())
    path = tmp_path / "report.json"
    path.write_text(json_report(outcomes()))
    assert main(["report", str(path), "-o", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuronprof report: error: cannot write the HTML page") and err.count("\n") == 1
