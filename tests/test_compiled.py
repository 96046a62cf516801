"""Compiled code as TorchNeuron runs it (issue 35): ``torch.compile(backend="neuron")`` costed as
compiled graphs inside an eager region, graph breaks and compiled graphs gated, other backends
said, and Dynamo left as it was found. On the neuron device: tests/compiled_checks.py, run by
tests/test_neuron_device.py in a session that turned the device on."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch._dynamo
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare
from pytest_neuronprof.gate.decode import Decoder
from pytest_neuronprof.gate.graphs import GraphSummary
from pytest_neuronprof.gate.summary import ProfileSummary, summarize
from pytest_neuronprof.profiler import compiled
from pytest_neuronprof.profiler.trace import trace_events
from pytest_neuronprof.vocabulary import BACKWARD, FORWARD


class Block(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(self.act(self.up(x))))


def _block() -> Block:
    torch.manual_seed(0)
    return Block()


def _profile(fn, execution: str = "eager"):
    with NeuronProfiler(NeuronConfig(execution=execution)) as prof:
        fn()
    return prof.result


def _compiled_forward(model: nn.Module, x: torch.Tensor):
    """The profile of ``model``'s forward compiled with backend="neuron" (compiled before)."""
    fast = torch.compile(model, backend="neuron")
    with torch.no_grad():
        fast(x)
        return _profile(lambda: fast(x))


def _line(marker: str) -> int:
    """The line of this file that ends with ``# marker``."""
    return next(n for n, text in enumerate(open(__file__).read().splitlines(), 1)
                if text.endswith(f"# {marker}"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_device_the_backend_knows_is_the_simulated_one():
    from pytest_neuronprof.profiler import neuron_device

    assert compiled.NEURON_DEVICE == neuron_device.NAME  # not imported there: a cycle


def test_the_neuron_backend_is_registered_and_computes_what_eager_computes():
    assert "neuron" in torch._dynamo.list_backends()
    model, x = _block(), torch.randn(4, 16, 64)
    out = torch.compile(model, backend="neuron")(x)  # outside any region: runs the ATen graph
    assert torch.allclose(out, model(x), atol=1e-5)


def test_a_compiled_forward_costs_what_the_same_graph_costs_under_graph_execution():
    model, x = _block(), torch.randn(8, 128, 64)
    with torch.no_grad():
        eager = _profile(lambda: model(x))
        graph = _profile(lambda: model(x), "graph")
        fast = torch.compile(model, backend="neuron")
        fast(x)
        result = _profile(lambda: fast(x))
    assert [g.phase for g in result.graphs] == [FORWARD]
    assert all(r.graph == 0 for r in result.records)  # the whole region is the graph
    assert result.total_device_time_us == pytest.approx(graph.total_device_time_us, rel=1e-9)
    # the graph's own fixed cost, as graph execution reports it for the region
    assert result.execution_overhead_us == graph.execution_overhead_us > 0
    assert result.total_device_time_us < 0.5 * eager.total_device_time_us
    # ATen names, with the modules eager records give them
    assert sorted((r.name, r.module_path) for r in result.records if r.engine != "-") == sorted(
        (r.name, r.module_path) for r in eager.records if r.engine != "-")


def test_a_training_step_compiles_forward_and_backward_and_the_rest_stays_eager():
    model, x = _block(), torch.randn(8, 128, 64)
    fast = torch.compile(model, backend="neuron")

    def step():
        model.zero_grad(set_to_none=True)
        fast(x).sum().backward()

    step()
    result = _profile(step)
    assert [g.phase for g in result.graphs] == [FORWARD, BACKWARD]
    assert {g.where for g in result.graphs} == {
        f"Block.forward (tests/test_compiled.py:{Block.forward.__code__.co_firstlineno}) {p}"
        for p in (FORWARD, BACKWARD)}
    forward, backward = result.graphs
    assert {r.phase for r in result.records[forward.first:forward.end]} == {FORWARD}
    assert {r.phase for r in result.records[backward.first:backward.end]} == {BACKWARD}
    assert "aten::native_layer_norm_backward" in [r.name for r in result.records[backward.first:backward.end]]
    eager_ops = [r.name for r in result.records if r.graph < 0 and r.engine != "-"]
    assert "aten::sum" in eager_ops and "aten::addmm" not in eager_ops  # the loss, outside
    # each graph's device time is its ops'; the region's fixed costs are one per graph run
    assert forward.device_time_us == pytest.approx(
        sum(r.device_time_us for r in result.records[forward.first:forward.end]))
    graph = _profile(step, "graph")
    assert result.execution_overhead_us == pytest.approx(2 * graph.execution_overhead_us)
    eager = _profile(lambda: (model.zero_grad(set_to_none=True), model(x).sum().backward()))
    assert result.total_device_time_us < eager.total_device_time_us
    # torch's tables keep working, with the compiled graphs' ops in them
    assert "aten::addmm" in result.table(row_limit=30)


def test_graph_execution_keeps_its_meaning_and_still_counts_the_graphs():
    model, x = _block(), torch.randn(8, 128, 64)
    fast = torch.compile(model, backend="neuron")
    with torch.no_grad():
        fast(x)
        result = _profile(lambda: (fast(x), fast(x)), "graph")
        plain = _profile(lambda: (model(x), model(x)), "graph")
    assert len(result.graphs) == 2
    assert result.execution_overhead_us == plain.execution_overhead_us  # one region, one graph
    assert result.total_device_time_us == pytest.approx(plain.total_device_time_us, rel=1e-9)


def test_the_trace_shows_each_graph_run_as_one_block_with_its_ops_under_it():
    model, x = _block(), torch.randn(8, 128, 64)
    fast = torch.compile(model, backend="neuron")
    with torch.no_grad():
        fast(x)
        result = _profile(lambda: (model(x), fast(x)))
    events = trace_events(result)
    blocks = [e for e in events if e.get("cat") == "graph"]
    assert [b["name"] for b in blocks] == [result.graphs[0].where]
    block = blocks[0]
    inside = [e for e in events if e.get("cat") == "kernel" and e["args"]["op_index"] >= result.graphs[0].first]
    assert inside and all(block["ts"] <= e["ts"] and e["ts"] + e["dur"] <= block["ts"] + block["dur"] + 1e-3
                          for e in inside)
    eager_kernels = [e for e in events if e.get("cat") == "kernel" and e["args"]["op_index"] < result.graphs[0].first]
    assert max(e["ts"] + e["dur"] for e in eager_kernels) <= block["ts"] + 1e-3


def test_another_backend_inside_a_region_runs_op_by_op_and_is_said_once():
    model, x = _block(), torch.randn(8, 16, 64)
    eager = _profile(lambda: model(x))
    fast = torch.compile(model, backend="aot_eager")
    result = _profile(lambda: (fast(x), fast(x)))
    assert result.graphs == []
    assert [r.name for r in result.records] == [r.name for r in eager.records] * 2
    assert result.notes == [compiled.other_backend_note("aot_eager")]
    assert "TorchNeuron compiles with backend=\"neuron\"" in result.notes[0]


def test_a_region_leaves_dynamo_as_it_found_it_so_fullgraph_does_not_depend_on_order():
    """Dynamo skips a frame for good when it steps aside for a dispatch mode: Block.forward
    profiled once under another backend was never compiled again, and fullgraph=True failed
    only after such a test had run (test order decided)."""
    model, x = _block(), torch.randn(4, 8, 64)
    stepped = torch.compile(model, backend="eager")
    _profile(lambda: stepped(x))  # Dynamo steps aside for Block.forward (and nn.Linear's)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    strict = torch.compile(_block(), backend=counting, fullgraph=True)
    strict(x)
    assert len(graphs) == 1


def test_no_warning_about_global_hooks_from_the_profilers_own():
    model, x = _block(), torch.randn(4, 8, 64)
    fast = torch.compile(model, backend="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _profile(lambda: fast(x))
    hook = nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:  # someone else's global hook: torch's warning stays
        with pytest.warns(UserWarning, match="global hooks"):
            _profile(lambda: fast(x))
    finally:
        hook.remove()


def test_a_graph_break_is_recorded_with_dynamos_reason_and_the_users_line():
    class Broken(Block):
        def forward(self, x):
            h = self.act(self.up(x))
            torch._dynamo.graph_break()  # the break
            return self.norm(x + self.down(h))

    torch.manual_seed(0)
    result = _compiled_forward(Broken(), torch.randn(8, 16, 64))
    line = _line("the break")
    assert len(result.graphs) == 2
    assert result.graphs[0].breaks == ((f"tests/test_compiled.py:{line}",
                                        "Call to `torch._dynamo.graph_break()`"),)
    assert result.graphs[1].breaks == result.graphs[0].breaks  # the graph after it resumes there
    summary = summarize(result, "6", torch.__version__)
    assert summary.graphs is not None and summary.graphs.breaks == result.graphs[0].breaks


def test_a_break_before_any_compiled_op_is_counted_with_dynamos_reason():
    """A print first thing in forward breaks the graph before any op was traced: no graph ends
    there, so no backend hears of it; the graph after it resumes there, and says it."""
    class Printing(Block):
        def forward(self, x):
            print("forward")  # the print
            return super().forward(x)

    torch.manual_seed(0)
    x = torch.randn(8, 16, 64)
    torch._dynamo.utils.counters.clear()
    result = _compiled_forward(Printing(), x)
    line = _line("the print")
    reasons = [key for key in torch._dynamo.utils.counters["graph_break"]]
    assert len(reasons) == 1  # Dynamo's own count of the break, and its reason
    assert [g.phase for g in result.graphs] == [FORWARD]
    assert result.graphs[0].breaks == ((f"tests/test_compiled.py:{line}",
                                        reasons[0].splitlines()[0].strip()),)
    summary = summarize(result, "6", torch.__version__)
    assert summary.graphs is not None and len(summary.graphs.breaks) == 1
    base = summarize(_profile(lambda: torch.compile(_block(), backend="neuron")(x)), "6",
                     torch.__version__)
    verdict = compare(base, summary, GatePolicy())
    assert [f.kind for f in verdict.regressions] == [Kind.BREAK]
    assert f"new graph break at tests/test_compiled.py:{line}" in verdict.regressions[0].reason


def test_graph_keys_and_breaks_are_stored_relative_to_the_root_not_the_working_directory(
        tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Executables' keys and breaks' file:line, as a baseline stores them (summarize with the
    folder the test's key is relative to), are the same whichever directory the process runs
    in, and so is the digest, which the compile fixes: a baseline recorded from examples/ gated
    from the repository's root saw other keys, and failed."""
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])

    class Broken(Block):
        def forward(self, x):
            h = self.act(self.up(x))
            torch._dynamo.graph_break()  # the other break
            return self.norm(x + self.down(h))

    line = _line("the other break")

    def summary_from(cwd):
        monkeypatch.chdir(cwd)
        torch._dynamo.reset()
        compiled._EXECUTABLES.clear()
        torch.manual_seed(0)
        result = _compiled_forward(Broken(), torch.randn(8, 16, 64))
        return summarize(result, "6", torch.__version__, root=root).graphs

    here, elsewhere = summary_from(root), summary_from(tmp_path)
    assert here == elsewhere
    assert here.breaks == ((f"tests/test_compiled.py:{line}", "Call to `torch._dynamo.graph_break()`"),)
    forward = Broken.forward.__code__
    # both sides of the break name the function they belong to
    assert {key.split(" [")[0] for key in here.compiled} == {
        f"{getattr(forward, 'co_qualname', forward.co_name)} (tests/test_compiled.py:"
        f"{forward.co_firstlineno}) forward"}
    assert len(here.compiled) == 2


def test_dynamic_true_is_rejected_as_torchneuron_rejects_it():
    """TorchNeuron's torch.compile reference: "dynamic=True is rejected during compilation";
    shapes that vary run, a graph per new shape (tested above)."""
    model, x = _block(), torch.randn(4, 8, 64)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="rejects dynamic=True") as raised:
        torch.compile(model, backend="neuron", dynamic=True)(x)
    assert isinstance(raised.value.__cause__ or raised.value.inner_exception,
                      compiled.DynamicShapesRejected)
    torch._dynamo.reset()
    out = torch.compile(model, backend="neuron", dynamic=False)(x)  # the default's spelling
    assert out.shape == (4, 8, 64)


def _examples_attention():
    """examples/models.py's causal self-attention block (qkv, SDPA, the output projection)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "models.py"
    spec = importlib.util.spec_from_file_location("examples_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Attention


def test_attention_compiled_on_meta_is_the_fused_kernel_as_eager_and_graph_cost_it():
    """On a device without values (meta here; the neuron device: tests/neuron_device_checks.py)
    AOTAutograd decomposed SDPA into its math (the attention matrix built, bmm and softmax),
    costlier than the fused kernel eager and execution="graph" cost."""
    Attention = _examples_attention()
    torch.manual_seed(0)
    block, x = Attention(256, 4).to("meta"), torch.randn(4, 128, 256, device="meta")
    result = _compiled_forward(block, x)
    with torch.no_grad():
        eager, graph = _profile(lambda: block(x)), _profile(lambda: block(x), "graph")
    names = [r.name for r in result.records]
    assert names.count("aten::_scaled_dot_product_flash_attention") == 1
    assert not {"aten::bmm", "aten::_safe_softmax", "aten::_softmax"} & set(names)
    assert result.execution_overhead_us == graph.execution_overhead_us
    assert result.total_device_time_us <= graph.total_device_time_us
    assert result.total_device_time_us < 0.5 * eager.total_device_time_us
    # on cpu, torch's own choice stays: its flash kernel for cpu, with values
    cpu = Attention(256, 4)
    cpu.load_state_dict({k: torch.randn(v.shape) for k, v in cpu.state_dict().items()})
    y = torch.randn(2, 16, 256)
    assert torch.allclose(torch.compile(cpu, backend="neuron")(y), cpu(y), atol=1e-5)


def _summary_of(model, shapes, backward=False):
    fast = torch.compile(model, backend="neuron")

    def run():
        for shape in shapes:
            out = fast(torch.randn(*shape))
            if backward:
                out.sum().backward()
    return summarize(_profile(run), "6", torch.__version__)


def test_a_second_input_shape_is_a_compiled_graph_more_and_fails_the_gate_naming_it():
    model = _block()
    base = _summary_of(model, [(8, 32, 64)], backward=True)
    torch._dynamo.reset()
    more = _summary_of(model, [(8, 32, 64), (8, 16, 64), (8, 48, 64)], backward=True)
    assert base.graphs is not None and more.graphs is not None
    assert len(base.graphs.compiled) == 2 and len(more.graphs.compiled) == 6  # per shape, as TorchNeuron
    verdict = compare(base, more, GatePolicy())
    found = [f for f in verdict.regressions if f.kind == Kind.COMPILED]
    assert verdict.status == Status.REGRESSION
    assert {f.module for f in found} == {f"Block.forward (tests/test_compiled.py:"
                                          f"{Block.forward.__code__.co_firstlineno}) {p}"
                                          for p in (FORWARD, BACKWARD)}
    assert all((f.baseline, f.current) == (1, 3) for f in found)
    assert "(8, 16, 64) float32" in found[0].reason and "(8, 48, 64) float32" in found[0].reason
    assert found[0].cells()[2:4] == ["1 graphs", "3 graphs"]
    back = compare(more, base, GatePolicy())  # fewer graphs: an improvement
    assert [f.kind for f in back.improvements if f.kind == Kind.COMPILED] == [Kind.COMPILED] * 2


def test_a_graph_summary_round_trips_and_bad_input_names_the_field():
    summary = GraphSummary(("f (x.py:1) forward [(2, 3) float32] 0a0b0c0d",), 3,
                           (("x.py:2", "Call to `torch._dynamo.graph_break()`"),))
    check = Decoder(lambda problem: ValueError(f"baselines/test_x.json: {problem}"))
    assert GraphSummary.from_json(json.loads(json.dumps(summary.to_json())), check, "e") == summary
    with pytest.raises(ValueError, match=r"baselines/test_x.json.*e\.executions"):
        GraphSummary.from_json({**summary.to_json(), "executions": "three"}, check, "e")
    with pytest.raises(ValueError, match=r"e\.breaks\[0\]"):
        GraphSummary.from_json({**summary.to_json(), "breaks": [{"at": "x"}]}, check, "e")


def test_an_entry_without_compiled_graphs_is_written_as_before():
    model, x = _block(), torch.randn(4, 8, 64)
    summary = summarize(_profile(lambda: model(x)), "6", torch.__version__)
    assert summary.graphs is None and "graphs" not in summary.to_json()
    again = ProfileSummary.from_json(summary.to_json(), Decoder(ValueError), "e")
    assert again.to_json() == summary.to_json()


# -- the plugin, end to end -----------------------------------------------------------------------

PROJECT = '''
import os
import pytest
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x):
        h = torch.relu(self.up(x))
        if os.environ.get("NP_BREAK"):
            torch._dynamo.graph_break()  # the break
        return self.down(h)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return torch.compile(Block(), backend="neuron")


@pytest.mark.neuron_profile
def test_step(model, neuron_profile):
    shapes = [(8, 128, 64)] + ([(8, 64, 64)] if os.environ.get("NP_SHAPE") else [])
    with neuron_profile:
        for shape in shapes:
            model(torch.randn(*shape)).sum().backward()
'''


def _project(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:hypothesispytest -p no:logging\n")
    pytester.makepyfile(test_step=PROJECT)


@pytest.mark.slow
def test_the_gate_names_a_new_break_and_a_recompile_and_takes_a_reason(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    _project(pytester)
    lines = (pytester.path / "test_step.py").read_text().splitlines()
    forward = next(n for n, text in enumerate(lines, 1) if "def forward" in text)
    at = next(n for n, text in enumerate(lines, 1) if text.endswith("# the break"))
    assert pytester.runpytest_subprocess("--neuron-baseline").ret == 0
    entry = json.loads((pytester.path / "baselines" / "test_step.json").read_text())
    graphs = entry["tests"]["test_step.py::test_step"]["simulated:trn2"]["graphs"]
    assert graphs["breaks"] == [] and graphs["executions"] == 2
    assert [key.split(" [")[0] for key in graphs["compiled"]] == [
        f"Block.forward (test_step.py:{forward}) backward",
        f"Block.forward (test_step.py:{forward}) forward"]
    assert pytester.runpytest_subprocess().ret == 0  # the same graphs: passes

    monkeypatch.setenv("NP_BREAK", "1")
    broken = pytester.runpytest_subprocess()
    assert broken.ret == 1
    out = broken.stdout.str()
    assert f"new graph break at test_step.py:{at}: Call to `torch._dynamo.graph_break()`" in out
    assert "(graph break)" in out and "0 breaks" in out and "1 breaks" in out
    assert "(compiled graphs)" not in out  # the break says it: its two sides are the new graphs
    accepted = pytester.runpytest_subprocess("--neuron-baseline", "--neuron-reason",
                                             "a print for debugging, to be removed")
    assert accepted.ret == 0
    assert pytester.runpytest_subprocess().ret == 0

    monkeypatch.delenv("NP_BREAK")
    assert pytester.runpytest_subprocess("--neuron-baseline").ret == 0
    monkeypatch.setenv("NP_SHAPE", "1")
    reshaped = pytester.runpytest_subprocess()
    assert reshaped.ret == 1
    out = reshaped.stdout.str()
    assert "(compiled graphs)" in out and "1 graphs" in out and "2 graphs" in out
    assert "new inputs (8, 64, 64) float32 (before: (8, 128, 64) float32)" in out


ORDER_A = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_a_profiled_compile(neuron_profile):
    model = torch.compile(Net(), backend="eager")
    with neuron_profile:
        model(torch.randn(2, 8))
'''

ORDER_B = '''
import torch
from test_a import Net


def test_b_fullgraph():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(Net(), backend=backend, fullgraph=True)(torch.randn(2, 8))
    assert len(graphs) == 1
'''


@pytest.mark.slow
@pytest.mark.parametrize("order", [["test_a.py", "test_b.py"], ["test_b.py", "test_a.py"]])
def test_the_order_of_tests_does_not_change_an_outcome(pytester: pytest.Pytester, order):
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:hypothesispytest -p no:randomly\n")
    pytester.makepyfile(test_a=ORDER_A.replace("def test_a", "import pytest\n\n\n@pytest.mark.neuron_profile\ndef test_a"),
                        test_b=ORDER_B)
    result = pytester.runpytest_subprocess(*order)
    result.assert_outcomes(passed=2)


def _layout(pytester: pytest.Pytester, source: str = PROJECT) -> None:
    """The project as a repository lays it out: the ini file at its root, the tests below."""
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:hypothesispytest -p no:logging\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_step.py").write_text(source)


@pytest.mark.slow
def test_graph_findings_do_not_depend_on_the_directory_pytest_runs_from(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Executables' keys and breaks' file:line are relative to the folder baseline keys are
    relative to (the ini file's), not the working directory: recorded from tests/, gated from the
    root (and the other way round), the same verdict. Before: every key moved, and the test
    failed with its graphs named twice."""
    _layout(pytester)
    lines = PROJECT.splitlines()
    forward = next(n for n, text in enumerate(lines, 1) if "def forward" in text)
    at = next(n for n, text in enumerate(lines, 1) if text.endswith("# the break"))
    tests = pytester.path / "tests"
    monkeypatch.chdir(tests)
    assert pytester.runpytest_subprocess("--neuron-baseline").ret == 0
    entry = json.loads((pytester.path / "baselines" / "tests" / "test_step.json").read_text())
    graphs = entry["tests"]["tests/test_step.py::test_step"]["simulated:trn2"]["graphs"]
    assert [key.split(" [")[0] for key in graphs["compiled"]] == [
        f"Block.forward (tests/test_step.py:{forward}) backward",
        f"Block.forward (tests/test_step.py:{forward}) forward"]
    monkeypatch.chdir(pytester.path)
    same = pytester.runpytest_subprocess()
    assert same.ret == 0, same.stdout.str()
    monkeypatch.setenv("NP_BREAK", "1")
    monkeypatch.chdir(tests)
    assert pytester.runpytest_subprocess().ret == 1
    assert pytester.runpytest_subprocess("--neuron-baseline", "--neuron-reason", "debugging").ret == 0
    entry = json.loads((pytester.path / "baselines" / "tests" / "test_step.json").read_text())
    graphs = entry["tests"]["tests/test_step.py::test_step"]["simulated:trn2"]["graphs"]
    assert [b["at"] for b in graphs["breaks"]] == [f"tests/test_step.py:{at}"]
    monkeypatch.chdir(pytester.path)
    again = pytester.runpytest_subprocess()
    assert again.ret == 0, again.stdout.str()


def _git(path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=path,
                   check=True, capture_output=True)


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("git") is None, reason="needs git")
def test_a_change_that_adds_a_graph_break_fails_against_the_base_until_it_gives_a_reason(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """--neuron-baseline-ref: gated against the base branch's baseline files, a change that adds
    a graph break fails naming it; re-recorded without a reason it still fails, saying a reason
    is needed; re-recorded with --neuron-reason, it passes as accepted, the break listed."""
    broken = PROJECT.replace('        if os.environ.get("NP_BREAK"):\n'
                             '            torch._dynamo.graph_break()  # the break\n',
                             '        torch._dynamo.graph_break()  # the break\n')
    assert broken != PROJECT
    _layout(pytester)
    monkeypatch.chdir(pytester.path)
    assert pytester.runpytest_subprocess("--neuron-baseline").ret == 0
    _git(pytester.path, "init", "-q", "-b", "main")
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "base")
    _git(pytester.path, "checkout", "-q", "-b", "change")
    (pytester.path / "tests" / "test_step.py").write_text(broken)
    at = next(n for n, text in enumerate(broken.splitlines(), 1) if text.endswith("# the break"))
    named = f"new graph break at tests/test_step.py:{at}: Call to `torch._dynamo.graph_break()`"

    failed = pytester.runpytest_subprocess("--neuron-baseline-ref", "main")
    assert failed.ret == 1
    assert named in failed.stdout.str() and "(graph break)" in failed.stdout.str()

    assert pytester.runpytest_subprocess("--neuron-baseline").ret == 0  # no reason given
    unexplained = pytester.runpytest_subprocess("--neuron-baseline-ref", "main")
    assert unexplained.ret == 1
    text = unexplained.stdout.str()
    assert "accepted in this change without a reason" in text and "--neuron-reason" in text

    reason = "a debugging break, to be removed in #9"
    assert pytester.runpytest_subprocess("--neuron-baseline", "--neuron-reason", reason,
                                         "tests/test_step.py::test_step").ret == 0
    _git(pytester.path, "commit", "-q", "-am", "a break")
    accepted = pytester.runpytest_subprocess("--neuron-baseline-ref", "main",
                                             "--neuron-report", "report.json")
    assert accepted.ret == 0, accepted.stdout.str()
    assert f"tests/test_step.py::test_step: accepted in this change, reason: {reason}" in \
        accepted.stdout.str()
    verdict = json.loads((pytester.path / "report.json").read_text())[
        "tests"]["tests/test_step.py::test_step"]["verdict"]
    assert verdict["status"] in ("pass", "improved") and verdict["accepted_reason"] == reason
    found = [f for f in verdict["accepted"] if f["op"] == "(graph break)"]
    assert [(f["baseline"], f["current"]) for f in found] == [(0, 1)]
    assert named in found[0]["reason"]
