"""execution="graph": fusion rules, SBUF residency, the engine-queue schedule, and graph
execution through the profiler, the trace and the plugin."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import ConfigError, NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.graph import Node, schedule
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.profiler.trace import trace_events
from pytest_neuronprof.vocabulary import Engine

T, V, S, D = Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.DMA
BW = 1000.0  # bytes per us in the unit tests: 1 kB costs 1 us
BIG = 1e12  # SBUF bytes: everything fits


def node(index, engine, busy=0.0, reads=0, writes=0, inputs=(), outputs=(), **extra):
    return Node(index=index, engine=engine, busy={engine: busy} if busy else {},
                read_bytes=reads, write_bytes=writes, inputs=list(inputs), outputs=list(outputs),
                **extra)


def test_an_epilogue_joins_its_producer_and_its_intermediate_never_reaches_hbm():
    # x (external, 1 kB) -> mm (10 us) -> y (4 kB) -> gelu (3 us) -> z (4 kB, the result)
    nodes = [node(0, T, 10.0, reads=1000, writes=4000, inputs=[(1, 1000)], outputs=[(2, 4000)]),
             node(1, S, 3.0, reads=4000, writes=4000, inputs=[(2, 4000)], outputs=[(3, 4000)])]
    plan = schedule(nodes, BW, BIG)
    mm, gelu = plan.placements[0], plan.placements[1]
    assert mm.group == gelu.group == 0 and plan.groups == {0: [0, 1]}
    assert mm.resident_written == 4000 and gelu.resident_read == 4000
    assert gelu.memory_us == pytest.approx(4.0)  # only its result goes to HBM
    assert mm.start_us == 0.0  # its input streams in tile by tile: it starts with the load
    assert gelu.start_us < mm.start_us + mm.duration_us  # pipelined on the producer's tiles
    assert gelu.start_us + gelu.duration_us == pytest.approx(10.0)  # not before its producer
    # the gelu's 3 us on ScalarE and the 1 us load and 4 us write all hide behind the product
    assert mm.charged_us + gelu.charged_us == pytest.approx(plan.makespan_us)
    assert plan.makespan_us == pytest.approx(max(10.0, 1.0 + 4.0))


def test_a_batch_norm_at_inference_folds_into_the_convolution_before_it():
    nodes = [node(0, T, 5.0, reads=100, writes=800, inputs=[(1, 100)], outputs=[(2, 800)], kind="conv"),
             node(1, V, 2.0, reads=800, writes=800, inputs=[(2, 800)], outputs=[(3, 800)], folds=True),
             node(2, S, 1.0, reads=800, writes=800, inputs=[(3, 800)], outputs=[(4, 800)])]
    plan = schedule(nodes, BW, BIG)
    assert plan.placements[1].charged_us == 0.0 and plan.placements[1].compute_us == 0.0
    assert plan.groups == {0: [0, 1, 2]}  # conv + folded norm + relu epilogue


def test_a_chain_of_epilogues_with_a_residual_add_is_one_group():
    # x -> mm -> +bias -> gelu's eight elementwise ops (as gelu_new decomposes) -> + residual r
    nodes = [node(0, T, 4.0, reads=100, writes=400, inputs=[(1, 100)], outputs=[(2, 400)]),
             node(1, V, 0.5, reads=400, writes=400, inputs=[(2, 400)], outputs=[(10, 400)])]
    for i in range(8):
        engine = S if i == 4 else V  # the tanh on ScalarE, the rest on VectorE
        nodes.append(node(2 + i, engine, 0.5, reads=400, writes=400, inputs=[(10 + i, 400)],
                          outputs=[(11 + i, 400)]))
    nodes.append(node(10, V, 0.5, reads=800, writes=400, inputs=[(18, 400), (99, 400)],
                      outputs=[(20, 400)]))  # the residual (99) comes from outside the region
    plan = schedule(nodes, BW, BIG)
    assert plan.groups == {0: list(range(11))}
    # only the region's input, the residual and the result touch HBM
    assert sum(p.memory_us for p in plan.placements.values()) == pytest.approx((100 + 400 + 400) / BW)


def test_matrix_products_gathers_and_copies_do_not_fuse_into_a_producer():
    G = Engine.GPSIMD
    nodes = [node(0, V, 1.0, reads=400, writes=400, inputs=[(1, 400)], outputs=[(2, 400)]),
             node(1, T, 1.0, reads=400, writes=400, inputs=[(2, 400)], outputs=[(3, 400)]),
             node(2, G, 1.0, reads=400, writes=400, inputs=[(3, 400)], outputs=[(4, 400)]),
             node(3, D, 0.0, reads=400, writes=400, inputs=[(4, 400)], outputs=[(5, 400)]),
             node(4, V, 1.0, reads=400, writes=400, inputs=[(5, 400)], outputs=[(6, 400)])]
    plan = schedule(nodes, BW, BIG)
    # a matmul starts its own group; a gather (GpSimd) or a copy (DMA) anchors none, so the
    # elementwise op after the copy stays alone too
    assert plan.groups == {}
    assert {p.group for p in plan.placements.values()} == {-1}


def test_an_intermediate_stays_in_sbuf_when_it_fits_and_spills_when_it_does_not():
    # mm -> y (4 kB) -> mm: a matrix product does not fuse into another one
    nodes = [node(0, T, 1.0, reads=1000, writes=4000, inputs=[(1, 1000)], outputs=[(2, 4000)]),
             node(1, T, 1.0, reads=5000, writes=1000, inputs=[(2, 4000), (5, 1000)], outputs=[(3, 1000)])]
    fits = schedule(nodes, BW, sbuf_bytes=4000)
    spills = schedule(nodes, BW, sbuf_bytes=3999)
    assert fits.groups == {} and spills.groups == {}
    assert fits.placements[0].resident_written == 4000 and fits.placements[1].resident_read == 4000
    assert spills.placements[0].resident_written == 0 and spills.placements[1].resident_read == 0
    assert spills.makespan_us - fits.makespan_us == pytest.approx(8.0)  # 4 kB out and back in


def test_independent_work_on_different_engines_overlaps_and_on_one_engine_queues():
    a = node(0, T, 10.0, inputs=[(1, 0)], outputs=[(2, 0)])
    b_other = node(1, V, 10.0, inputs=[(3, 0)], outputs=[(4, 0)])
    b_same = node(1, T, 10.0, inputs=[(3, 0)], outputs=[(4, 0)])
    assert schedule([a, b_other], BW, BIG).makespan_us == pytest.approx(10.0)
    assert schedule([a, b_same], BW, BIG).makespan_us == pytest.approx(20.0)
    dependent = node(1, V, 10.0, inputs=[(2, 0)], outputs=[(4, 0)])  # reads a's output
    dependent.engine = D  # a DMA op: it does not fuse, so it waits for its producer
    dependent.busy = {}
    dependent.write_bytes = 10_000
    plan = schedule([a, dependent], BW, BIG)
    assert plan.placements[1].start_us == pytest.approx(10.0)
    assert plan.makespan_us == pytest.approx(20.0)


def test_weight_loads_are_prefetched_behind_earlier_compute():
    # Two dependent products, each reading a 5 kB weight (5 us) and computing 10 us: the first
    # streams its weight in as it computes, the second weight loads while the first computes.
    nodes = [node(0, T, 10.0, reads=5000, inputs=[(10, 5000)], outputs=[(2, 100)]),
             node(1, T, 10.0, reads=5100, inputs=[(2, 100), (11, 5000)], outputs=[(3, 100)])]
    plan = schedule(nodes, BW, BIG)
    assert plan.placements[0].start_us == 0.0  # with its load, not after it
    assert plan.placements[1].start_us == pytest.approx(10.0)  # after the first, not 10 + 5
    assert plan.makespan_us == pytest.approx(20.0)
    # a load longer than the compute sets the end: an op cannot outrun its stream
    slow = [node(0, T, 2.0, reads=5000, inputs=[(10, 5000)], outputs=[(2, 100)])]
    assert schedule(slow, BW, BIG).makespan_us == pytest.approx(5.0)


def test_a_tensor_written_in_place_is_a_new_version_for_the_readers_after_it():
    nodes = [node(0, V, 1.0, reads=100, writes=100, inputs=[(1, 100)], outputs=[(1, 100)]),  # x.add_
             node(1, D, reads=100, writes=100, inputs=[(1, 100)], outputs=[(2, 100)])]  # x.clone()
    plan = schedule(nodes, BW, BIG)
    assert plan.placements[1].start_us >= plan.placements[0].start_us + 1.0
    assert plan.placements[1].resident_read == 100  # the new version is on chip


def test_charges_add_up_to_the_makespan_on_a_real_block():
    block = TransformerBlock()
    x = torch.randn(8, 128, 256, dtype=torch.bfloat16)
    result = profiled(lambda: block(x), "graph")
    assert sum(r.device_time_us for r in result.records) == pytest.approx(result.total_device_time_us)
    assert all(r.device_time_us >= 0 and r.launch_us == 0 for r in result.records)


# --- through the profiler ------------------------------------------------------------------------


class TransformerBlock(nn.Module):
    def __init__(self, d: int = 256) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.to(torch.bfloat16)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).view(*x.shape[:2], 3, 4, -1).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(x.shape)
        x = x + self.out(a)
        return x + self.down(F.gelu(self.up(x)))


def profiled(fn, execution, hardware="trn2", context=torch.inference_mode):
    with context(), NeuronProfiler(NeuronConfig(hardware=hardware, execution=execution)) as prof:
        fn()
    return prof.result


@pytest.mark.parametrize("hardware", ["trn2", "trn1", "h200"])
def test_graph_execution_fuses_overlaps_and_beats_eager(hardware):
    block = TransformerBlock()
    x = torch.randn(8, 128, 256, dtype=torch.bfloat16)
    eager, graph = profiled(lambda: block(x), "eager", hardware), profiled(lambda: block(x), "graph", hardware)
    costed = lambda result: [(r.name, r.module_path, r.flops) for r in result.records if r.engine != "-"]  # noqa: E731
    assert costed(graph) == costed(eager)  # the same ops, each recorded once
    assert graph.total_device_time_us < eager.total_device_time_us
    assert (eager.execution, graph.execution) == ("eager", "graph")
    hw = load_hardware(hardware)
    # the host and runtime side of one execution and the device's floor per graph
    assert graph.execution_overhead_us == hw.graph_execution_us + hw.graph_floor_us
    assert eager.execution_overhead_us == 0.0
    groups = {r.group for r in graph.records if r.group >= 0}
    assert groups  # the gelu joined its product, the residual adds theirs
    gelu = next(r for r in graph.records if r.name == "aten::gelu")
    up = next(r for r in graph.records if r.module_path == "up" and r.engine == "Tensor")
    assert gelu.group == up.group == up.index
    assert gelu.bytes_read == 0  # its input never left the chip


def test_float32_matrix_products_run_at_the_bfloat16_rate_in_a_graph_only():
    """neuronx-cc --auto-cast=matmult: float32 matmuls compile to bfloat16 ones; eager kernels
    are not compiled with it, and the default since Neuron 2.27 (none) casts nothing."""
    def mm_compute_us(dtype, execution, **config):
        # two tensors: a @ a would contract a along both axes, which needs a transpose too
        a, b = (torch.empty(2048, 2048, dtype=dtype, device="meta") for _ in range(2))
        with NeuronProfiler(NeuronConfig(hardware="trn1", execution=execution, **config)) as prof:
            a @ b
        (record,) = prof.result.records
        return record.compute_us

    tflops = load_hardware("trn1").tensor.tflops
    fp32_rate = tflops["bfloat16"] / tflops["float32"]
    assert mm_compute_us(torch.float32, "graph", auto_cast="matmult") == pytest.approx(
        mm_compute_us(torch.bfloat16, "graph"))
    assert mm_compute_us(torch.float32, "graph") / mm_compute_us(torch.bfloat16, "graph") == pytest.approx(fp32_rate)
    for config in ({}, {"auto_cast": "matmult"}):
        assert mm_compute_us(torch.float32, "eager", **config) / mm_compute_us(torch.bfloat16, "eager") == pytest.approx(
            fp32_rate)


def test_graph_records_are_the_same_in_every_grad_mode():
    block = TransformerBlock().eval()
    x = torch.randn(8, 128, 256, dtype=torch.bfloat16)
    no_grad = profiled(lambda: block(x), "graph", context=torch.no_grad)
    inference = profiled(lambda: block(x), "graph")
    fields = lambda r: (r.name, r.group, r.device_time_us, r.device_start_us, r.bytes_read)  # noqa: E731
    assert [fields(r) for r in no_grad.records] == [fields(r) for r in inference.records]


def test_a_training_step_runs_as_one_graph():
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    x = torch.randn(32, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        model(x).square().mean().backward()
        opt.step()

    eager = profiled(step, "eager", context=torch.enable_grad)
    graph = profiled(step, "graph", context=torch.enable_grad)
    assert graph.total_device_time_us < eager.total_device_time_us
    assert {r.phase for r in graph.records} == {"forward", "backward"}


def test_the_trace_of_a_graph_shows_its_schedule_and_fused_groups():
    block = TransformerBlock()
    x = torch.randn(8, 128, 256, dtype=torch.bfloat16)
    result = profiled(lambda: block(x), "graph")
    events = trace_events(result)
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name" and e["pid"] == 2}
    assert "fused groups" in tracks.values()
    fused = [e for e in events if e.get("cat") == "fused"]
    assert any("aten::gelu" in e["name"] for e in fused)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_track: dict[int, list] = {}
    for e in kernels:
        by_track.setdefault(e["tid"], []).append(e)
    for slices in by_track.values():  # one engine does one op at a time
        slices.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(slices, slices[1:]))
    # engines overlap: some TensorE and VectorE slices share time
    tensor = [e for e in kernels if tracks[e["tid"]] == "Tensor"]
    vector = [e for e in kernels if tracks[e["tid"]] == "Vector"]
    assert any(v["ts"] < t["ts"] + t["dur"] and t["ts"] < v["ts"] + v["dur"] for t in tensor for v in vector)
    json.dumps(events)


def test_an_unknown_execution_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="execution='compiled': unknown; valid choices: eager, graph"):
        NeuronConfig(execution="compiled")


# --- the plugin: option, marker, variant --------------------------------------------------------

TEST_FILE = """
import pytest, torch

@pytest.mark.neuron_profile
def test_mlp():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    with torch.no_grad():
        model(torch.randn(32, 64))

@pytest.mark.neuron_profile(execution="graph")
def test_mlp_graph():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    with torch.no_grad():
        model(torch.randn(32, 64))
"""


def test_execution_is_part_of_the_baseline_variant(pytester):
    pytester.makepyfile(test_modes=TEST_FILE)
    pytester.makeini("[pytest]\n")
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline").assert_outcomes(passed=2)
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline", "--neuron-execution", "graph",
                       "-k", "test_mlp and not graph").assert_outcomes(passed=1)
    data = json.loads((pytester.path / "baselines" / "test_modes.json").read_text())
    variants = data["tests"]["test_modes.py::test_mlp"]
    assert set(variants) == {"simulated:trn2", "simulated:trn2:graph"}
    assert variants["simulated:trn2:graph"]["execution"] == "graph"
    assert "execution" not in variants["simulated:trn2"]  # eager entries stay as they were
    assert variants["simulated:trn2:graph"]["total_device_time_us"] < \
        variants["simulated:trn2"]["total_device_time_us"]
    assert set(data["tests"]["test_modes.py::test_mlp_graph"]) == {"simulated:trn2:graph"}
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_mlp_graph*pass*"])


def test_a_bad_execution_option_or_marker_argument_names_itself(pytester):
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.neuron_profile(execution="jit")
def test_x():
    pass
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--neuron-execution", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-execution (ini neuron_execution)='fast': unknown; valid choices: eager, graph*"])
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*neuron_profile execution='jit': unknown; valid choices: eager, graph*"])
