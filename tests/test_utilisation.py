"""Why it is slow, by Neuron Explorer's Summary (issue 36): the metrics of costmodel/utilisation.py
against values computed here by hand from the trn2 profile's TOML figures and the formulas of
docs/cost-model.md ("Why it is slow"), on a GEMM, an elementwise chain, a loop of tiny ops and a
graph that spills; and the rules of costmodel/recommendations.py on each.

The expected numbers never come from the code under test: each engine's time is worked out from
the profile's lanes, clocks, instruction cycles and bandwidths, as the docs state them."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel import recommendations as rules
from pytest_neuronprof.costmodel import utilisation as u
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.costmodel.roofline import array_flops

HW = load_hardware("trn2")
MiB = 2**20
approx = pytest.approx  # float sums in another order than the code's: a relative 1e-9


def run(fn, **config):
    with NeuronProfiler(NeuronConfig(hardware="trn2", **config)) as prof:
        fn()
    return prof.result


# --- the profile's figures, by hand ----------------------------------------------------------------

BF16_PEAK_PER_US = 79.0e6 * 2  # TFLOP/s per array x 2 arrays (LNC=2), in FLOP per us
HBM_PER_US = 725.0e3  # hbm_gbps = 725 GB/s per logical core, in bytes per us
EFFICIENCY, HALF, CHUNK = 0.742, 256.0, 8192.0  # dma_efficiency, dma_half_bytes, dma_chunk_bytes
LAUNCH, DMA_START, RAMP = 2.0, 1.3, 3.0  # launch_us, dma_fixed_us, TensorE's warmup_us


def transfer_us(nbytes: float, tensors: int) -> float:
    """The DMA time of ``nbytes`` spread over ``tensors`` tensors and 128 partitions: each
    descriptor of size s (at most 8 KiB) at dma_efficiency x s / (s + 256) of the bandwidth."""
    size = min(nbytes / tensors / 128, CHUNK)
    return nbytes / (HBM_PER_US * EFFICIENCY * size / (size + HALF))


def lane_us(streamed: int, lanes: float, clock_ghz: float, instruction_cycles: float, free: int = 2048) -> float:
    """A lane engine's time: instructions of at most 128 x ``free`` elements, each at least 64
    cycles and ``instruction_cycles`` of fixed cost, the elements at ``lanes`` per cycle."""
    instructions = math.ceil(streamed / (128 * free))
    per_us = clock_ghz * 1e3
    return instructions * instruction_cycles / per_us + max(streamed / (lanes * per_us), instructions * 64 / per_us)


# --- a GEMM ----------------------------------------------------------------------------------------

def test_a_bf16_gemm_against_the_hand_computed_summary():
    a = torch.empty(1024, 1024, dtype=torch.bfloat16, device="meta")
    b = torch.empty(1024, 1024, dtype=torch.bfloat16, device="meta")
    result = run(lambda: a @ b)
    found = result.utilisation
    flops = 2 * 1024**3
    # TensorE: each of the two arrays takes half of m (512 rows): 8 K tiles x 4 stationary tiles
    # x 2 moving chunks of 512 columns = 32,768 cycles at 79e6 / (2 x 128 x 128) cycles per us
    tensor = 32768 / (79.0e6 / (2 * 128 * 128))
    assert tensor == approx(flops / BF16_PEAK_PER_US)  # full tiles: no padding
    tensor += 0.25 * RAMP  # alone on a quiet array: the throttling ramp does 3/4 of its length
    evacuation = lane_us(1024 * 1024, 512, 0.96, 100, free=512)  # fp32 out of PSUM, 512 per bank
    moved = 3 * 2 * MiB
    dma = transfer_us(moved, 3)
    total = LAUNCH + max(tensor, evacuation, dma + DMA_START)
    assert result.total_device_time_us == approx(total)
    assert found.total_time_us == approx(total)
    assert found.model_flops == flops and found.hardware_flops == flops and found.transpose_flops == 0
    assert found.mfu_estimated_percent == approx(100 * flops / BF16_PEAK_PER_US / total)
    assert found.hfu_estimated_percent == approx(found.mfu_estimated_percent)
    assert found.active_percent("Tensor") == approx(100 * tensor / total)
    assert found.active_percent("Vector") == approx(100 * evacuation / total)
    assert found.active_percent("DMA") == approx(100 * dma / total)
    assert found.mbu_estimated_percent == approx(100 * moved / (HBM_PER_US * total))
    assert found.dma_transfer_average_bytes == 8192 and found.dma_transfer_count == moved / 8192
    assert found.active_throttled_percent == approx(100 * 0.25 * RAMP / tensor)
    assert found.fixed_us == approx(LAUNCH)  # the launch: TensorE outlasts the transfers
    assert found.metrics()["mfu_estimated_percent"] == round(found.mfu_estimated_percent, 2)
    # one product alone on a quiet array: only its ramp, 0.75 us of 16.3 us, is worth a word
    assert [r.rule for r in result.recommendations()] == ["throttling"]


def test_a_product_smaller_than_the_array_pays_for_its_padding_in_hfu():
    """100 x 100 @ 100 x 100: the contraction and the stationary dim padded to 128, the moving
    dim split over the two arrays (50 columns each): 2 x (2 x 128 x 128 x 50) FLOPs occupied."""
    a = torch.empty(100, 100, dtype=torch.bfloat16, device="meta")
    found = run(lambda: a @ a).utilisation
    assert found.model_flops == 2 * 100**3
    assert found.hardware_flops == 2 * (2 * 128 * 128 * 50)
    assert found.hfu_estimated_percent / found.mfu_estimated_percent == approx(128 * 128 * 100 / 100**3)
    assert array_flops(1, 100, 100, 100, HW.tensor) == found.hardware_flops


# --- an elementwise chain ----------------------------------------------------------------------------

def chain(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2 + x)


def test_an_elementwise_chain_eager_against_the_hand_computed_summary():
    x = torch.randn(1024, 1024, dtype=torch.bfloat16)
    result = run(lambda: chain(x))
    found = result.utilisation
    n, tensor_bytes = 1024 * 1024, 2 * MiB
    # VectorE (512 lanes, 1024 in the fast mode of one-tensor bf16 instructions, 0.96 GHz, 100
    # cycles an instruction): x * 2 streams one tensor, + two; ScalarE (256 lanes, 1.2 GHz, 200
    # cycles): relu one
    mul = lane_us(n, 1024, 0.96, 100)
    add = lane_us(2 * n, 512, 0.96, 100)
    relu = lane_us(n, 256, 1.2, 200)
    transfers = [transfer_us(2 * tensor_bytes, 2), transfer_us(3 * tensor_bytes, 3), transfer_us(2 * tensor_bytes, 2)]
    total = sum(LAUNCH + max(busy, dma + DMA_START) for busy, dma in zip((mul, add, relu), transfers))
    assert result.total_device_time_us == approx(total)
    assert found.model_flops == 0 and found.mfu_estimated_percent == 0 and found.hfu_estimated_percent == 0
    assert found.active_percent("Vector") == approx(100 * (mul + add) / total)
    assert found.active_percent("Scalar") == approx(100 * relu / total)
    assert found.active_percent("Tensor") == 0
    assert found.active_percent("DMA") == approx(100 * sum(transfers) / total)
    assert found.mbu_estimated_percent == approx(100 * 7 * tensor_bytes / (HBM_PER_US * total))
    assert found.elements == {"aten::mul": n, "aten::add": n, "aten::relu": n}


def test_an_elementwise_chain_in_a_graph_moves_its_input_and_result_once():
    """Fused into one loop nest: x read once (the add reads the tile the multiply loaded), the
    relu's result written once, the intermediates never in HBM."""
    x = torch.randn(1024, 1024, dtype=torch.bfloat16)
    result = run(lambda: chain(x), execution="graph")
    found = result.utilisation
    assert found.hbm_read_bytes == 2 * MiB and found.hbm_write_bytes == 2 * MiB
    assert found.mbu_estimated_percent == approx(100 * 4 * MiB / (HBM_PER_US * result.total_device_time_us))
    assert found.total_time_us == approx(result.total_device_time_us)
    assert found.spill_save_bytes == found.spill_reload_bytes == 0
    # the engines' time is the schedule's: each op's own, once (no launch in a graph)
    assert found.fixed_us == 0 and found.kernels == 3


# --- a loop of tiny ops ------------------------------------------------------------------------------

def test_a_loop_of_tiny_ops_is_its_fixed_cost_and_its_transfers_are_tiny():
    x = torch.ones(8)

    def loop():
        y = x
        for _ in range(100):
            y = y + 1

    result = run(loop)
    found = result.utilisation
    busy = lane_us(8, 512, 0.96, 100)  # one fp32 instruction: its 64-cycle floor and 100 cycles
    dma = transfer_us(64, 2)  # 32 bytes in, 32 out: 0.25 B per partition's descriptor
    per_op = LAUNCH + max(busy, dma + DMA_START)
    assert result.total_device_time_us == approx(100 * per_op)
    assert found.kernels == 100
    assert found.fixed_us == approx(100 * (per_op - max(busy, dma)))
    assert found.fixed_us / found.total_time_us > 0.9
    assert found.dma_transfer_average_bytes == approx(0.25)
    assert found.active_percent("Vector") == approx(100 * busy / per_op)
    advice = result.recommendations()
    assert [r.rule for r in advice] == ["fixed_cost", "small_dma"]  # the most time at stake first
    fixed = advice[0]
    assert fixed.cost_us == approx(found.fixed_us) and fixed.ops == ("aten::add",)
    assert found.fixed_bound_us == approx(found.total_time_us)  # every add is bound by its fixed cost
    assert "100 kernels" in fixed.found and "torch.compile" in fixed.action
    assert fixed.source.endswith("tools/neuron-explorer/glossary.rst")
    assert "severely overhead-bound" in advice[1].found and "nki-dma-bandwidth-guide.rst" in advice[1].source


# --- a graph that spills --------------------------------------------------------------------------------

def test_a_graph_whose_intermediate_outlives_sbuf_spills_and_reloads_it():
    """(x @ w1) @ w2 on meta tensors, bf16: the 8192 x 8192 intermediate (128 MiB) is read by the
    second product (another group: two products never fuse) and does not fit in SBUF (56 MiB on
    trn2's logical core): saved to HBM and read back."""
    x = torch.empty(8192, 1024, dtype=torch.bfloat16, device="meta")
    w1 = torch.empty(1024, 8192, dtype=torch.bfloat16, device="meta")
    w2 = torch.empty(8192, 1024, dtype=torch.bfloat16, device="meta")
    result = run(lambda: (x @ w1) @ w2, execution="graph")
    found = result.utilisation
    intermediate = 8192 * 8192 * 2
    assert found.spill_save_bytes == intermediate == result.memory.spilled_bytes
    assert found.spill_reload_bytes == intermediate
    assert found.hbm_read_bytes == 3 * 16 * MiB + intermediate  # x, w1, w2 and the reload
    assert found.hbm_write_bytes == intermediate + 16 * MiB  # the spill and the result
    assert found.useful_read_percent == approx(100 * 48 / 176)
    advice = result.recommendations()
    assert advice[0].rule == "spill_reload"
    assert advice[0].condition == "Spill reload bytes > 25% of total HBM reads"
    assert "73% of HBM reads" in advice[0].found and advice[0].ops == ("aten::mm",)
    assert advice[0].cost_us == approx(2 * intermediate / HBM_PER_US)


def test_a_layer_norm_before_a_product_transposes_its_output_on_tensore():
    """Graph execution adds the partition/free transpose of a layer norm's output a product
    contracts (2 x 128 FLOPs per element through identity products): transpose FLOPs."""
    norm = torch.nn.LayerNorm(512).to(torch.bfloat16)
    linear = torch.nn.Linear(512, 512, bias=False).to(torch.bfloat16)
    x = torch.randn(256, 512, dtype=torch.bfloat16)
    with torch.inference_mode():
        found = run(lambda: linear(norm(x)), execution="graph").utilisation
    assert found.transpose_flops == 2 * 128 * 256 * 512
    assert found.hardware_flops == found.transpose_flops + array_flops(1, 256, 512, 512, HW.tensor)
    assert found.evidence[u.TRANSPOSE].keys() == {"aten::native_layer_norm"}


# --- the rules, on sums made up for them ---------------------------------------------------------------

def summary(**sums) -> u.Utilisation:
    found = u.Utilisation("eager", total_time_us=100.0, hbm_bytes_per_us=HBM_PER_US)
    for name, value in sums.items():
        setattr(found, name, value)
    return found


def test_each_rule_fires_past_its_threshold_and_not_at_it():
    at = summary(model_peak_us=10.0, active_us={"Tensor": 20.0})  # exactly 50 %: not below
    assert rules.low_model_flops(at) is None
    below = summary(model_peak_us=9.9, active_us={"Tensor": 20.0})
    below.note(u.WASTED, "aten::mm", "mlp.up", 10.1)
    assert rules.low_model_flops(below).found == "model FLOPs are 50% of what TensorE's active time could do at peak"
    assert rules.transposes(summary(hardware_flops=100.0, transpose_flops=10.0)) is None
    assert rules.transposes(summary(hardware_flops=100.0, transpose_flops=10.5)) is not None
    assert rules.spill_reload(summary(hbm_read_bytes=100.0, spill_reload_bytes=25.0)) is None
    assert rules.spill_reload(summary(hbm_read_bytes=100.0, spill_reload_bytes=26.0)) is not None
    assert rules.small_dma(summary(dma_transfer_count=1.0, dma_transfer_bytes=2048.0)) is None
    assert rules.small_dma(summary(dma_transfer_count=1.0, dma_transfer_bytes=2047.0)) is not None
    assert rules.fixed_cost(summary(fixed_bound_us=49.9, fixed_us=40.0)) is None
    assert rules.fixed_cost(summary(fixed_bound_us=50.0, fixed_us=40.0)).cost_us == 40.0
    graph = summary(fixed_bound_us=90.0, fixed_us=90.0)
    graph.execution = "graph"
    assert rules.fixed_cost(graph) is None  # one launch for the whole graph


def test_collectives_far_from_their_groups_median_are_outliers():
    found = summary()
    found.collectives[("aten::all_reduce", 4096)] = [(10.0, "tp"), (10.0, "tp"), (10.0, "tp"), (25.0, "dp")]
    found.collectives[("aten::all_gather", 4096)] = [(10.0, "tp"), (19.0, "tp"), (10.0, "tp")]
    found_ = rules.collective_outliers(found)
    assert found_ is not None and found_.ops == ("aten::all_reduce",) and found_.modules == ("dp",)
    assert found_.cost_us == 15.0 and "2.5x their group's median" in found_.found


def test_at_most_four_the_most_time_at_stake_first_and_none_under_one_percent():
    found = summary(fixed_us=60.0, fixed_bound_us=80.0, throttled_us=0.9, active_us={"Tensor": 9.0}, model_peak_us=1.0,
                    hardware_flops=10.0, transpose_flops=5.0, transpose_peak_us=5.0,
                    hbm_read_bytes=1e6, spill_reload_bytes=5e5, spill_save_bytes=5e5,
                    dma_transfer_count=10.0, dma_transfer_bytes=100.0)
    found.note(u.WASTED, "aten::mm", "", 8.0)
    found.note(u.SMALL_DMA, "aten::add", "", 3.0)
    found.note(u.STATE, "aten::zeros_like", "", 2.0)
    shown = rules.recommend(found)
    assert [r.rule for r in shown] == ["fixed_cost", "low_model_flops", "transpose_flops", "small_dma"]
    assert all(a.cost_us >= b.cost_us for a, b in zip(shown, shown[1:]))
    assert "throttling" not in [r.rule for r in rules.recommend(found, limit=10)]  # 0.9 us: under 1 %
    assert rules.recommend(None) == []


def test_regions_one_after_another_add_up():
    first, second = summary(model_peak_us=10.0, active_us={"Tensor": 20.0}), summary(active_us={"DMA": 5.0})
    first.note(u.FIXED, "aten::add", "m", 1.0)
    second.note(u.FIXED, "aten::add", "n", 2.0)
    second.transfers = [(1.0, 2.0, 0)]
    joined = u.combined([(first, 0.0, 0), (second, 100.0, 7)])
    assert joined.total_time_us == 200.0 and joined.mfu_estimated_percent == 5.0
    assert joined.active_us == {"Tensor": 20.0, "DMA": 5.0}
    assert joined.evidence[u.FIXED]["aten::add"] == [3.0, {"m": 1.0, "n": 2.0}]
    assert joined.transfers == [(101.0, 102.0, 7)]
    assert u.combined([(first, 0.0, 0), (None, 100.0, 7)]) is None


# --- an optimizer's first step ---------------------------------------------------------------------------

def step(model, optimizer, x):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_an_optimizers_first_step_makes_its_state_and_a_steady_step_does_not(execution):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256)
    first = run(lambda: step(model, optimizer, x), execution=execution)
    creation = [r for r in rules.recommend(first.utilisation, limit=10) if r.rule == "state_creation"]
    assert len(creation) == 1 and creation[0].ops == ("aten::zeros_like",)
    zeros = sum(r.device_time_us for r in first.records if r.name == "aten::zeros_like")
    assert creation[0].cost_us == approx(zeros) and zeros > 0
    assert "run one step before the region" in creation[0].action
    steady = run(lambda: step(model, optimizer, x), execution=execution)
    assert not any(r.rule == "state_creation" for r in rules.recommend(steady.utilisation, limit=10))


def test_a_report_reads_back_what_it_wrote_and_recomputes_the_metrics():
    from pytest_neuronprof.gate.decode import Decoder

    x = torch.ones(8)
    result = run(lambda: [x + 1 for _ in range(20)])
    data = result.utilisation.to_json()
    data["mfu_estimated_percent"] = 99.0  # a metric edited by hand is not read: it is computed
    back = u.Utilisation.from_json(data, Decoder(ValueError), "u")
    assert back.metrics() == result.utilisation.metrics()
    assert back.to_json() == result.utilisation.to_json()
    with pytest.raises(ValueError, match="u has unknown key"):
        u.Utilisation.from_json({**data, "mystery": 1}, Decoder(ValueError), "u")
    # a sum left out would read as a 0 % metric: refused, naming it
    cut = {key: value for key, value in data.items() if key not in ("model_flops", "model_peak_us")}
    with pytest.raises(ValueError, match="u has no model_flops, model_peak_us"):
        u.Utilisation.from_json(cut, Decoder(ValueError), "u")
    advice = result.recommendations()
    again = [rules.Recommendation.from_json(r.to_json(), Decoder(ValueError), "r") for r in advice]
    assert again == [rules.Recommendation(**{**r.__dict__, "cost_us": round(r.cost_us, 4)}) for r in advice]


def test_a_percentage_reads_the_same_in_a_line_and_in_the_reports_table():
    """The utilisation line and the metrics table (from the report's values, rounded to 2
    decimals) say the same percent; just under 10 % is "10%", like 10 % itself."""
    assert u.percent_text(1.0496) == u.percent_text(round(1.0496, 2)) == "1.1%"
    assert u.percent_text(9.96) == "10%" and u.percent_text(9.94) == "9.9%" and u.percent_text(0.04) == "<0.1%"


# --- a compiled graph inside an eager region ----------------------------------------------------------

def test_a_compiled_graph_in_an_eager_region_is_counted_by_its_own_schedule():
    """Eager ops, then a compiled graph (torch.compile(backend="neuron")): the eager ops count
    as kernels, the graph's ops by its schedule, one after the other ("mixed"). Counting the
    graph's ops as eager kernels had TensorE busy 103 % and DMA 160 % of the region."""
    w = torch.randn(512, 512)

    def block(x):
        return torch.relu(x @ w) @ w

    fast = torch.compile(block, backend="neuron")
    x = torch.randn(512, 512)
    with torch.no_grad():
        fast(x)
        graph = run(lambda: block(x), execution="graph").utilisation
        compiled = run(lambda: fast(x)).utilisation
        mixed = run(lambda: fast(x * 2 + 1)).utilisation
        prologue = run(lambda: x * 2 + 1).utilisation
    # the graph alone: what graph execution counts of the same graph
    assert compiled.execution == "graph"
    assert compiled.active_us == pytest.approx(graph.active_us)
    assert compiled.total_time_us == pytest.approx(graph.total_time_us)
    # after the eager ops: both, added up
    assert mixed.execution == "mixed"
    assert mixed.total_time_us == pytest.approx(prologue.total_time_us + graph.total_time_us)
    for engine in ("Tensor", "Vector", "Scalar", "DMA"):
        assert mixed.active_us.get(engine, 0.0) == pytest.approx(
            prologue.active_us.get(engine, 0.0) + graph.active_us.get(engine, 0.0)), engine
        assert mixed.active_percent(engine) <= 100.0, engine


def test_the_fixed_cost_share_is_the_one_the_entries_say():
    """An op's bound is that of the calls with most of its time, as its baseline entry keeps it
    (gate/summary.py): tiny adds beside one large add are an op bound by HBM, not by their fixed
    cost. The fixed-cost rule weighs that share, the one a failure's utilisation line sketches
    from the entries, so the two never disagree in one failure."""
    from pytest_neuronprof.gate.summary import summarize

    small, large = torch.randn(8), torch.randn(4096, 4096)

    def region():
        for _ in range(3):
            small + 1
        large + 1
        small.exp()

    result = run(region)
    summary = summarize(result, "7", torch.__version__)
    assert summary.ops["aten::add"].bound != "fixed cost" and summary.ops["aten::exp"].bound == "fixed cost"
    assert any(r.bound == "fixed cost" for r in result.records if r.name == "aten::add")  # the tiny calls
    entry_share = sum(op.device_time_us for op in summary.ops.values() if op.bound == "fixed cost")
    assert result.utilisation.fixed_bound_us == approx(entry_share)


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_the_throttling_advice_suggests_a_compiled_graph_only_to_eager_code(execution):
    found = u.Utilisation(execution, total_time_us=10.0, active_us={"Tensor": 8.0}, throttled_us=1.0)
    advice = rules.throttling(found)
    assert advice is not None and advice.action.startswith("Keep the Tensor Engine busy")
    assert ("a compiled graph keeps it busy" in advice.action) == (execution == "eager")
