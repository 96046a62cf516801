"""What bounds each op and its fraction of peak (issue 17, items 5-6): every costed call counted,
also at a graph charge of 0 us; bound and peak fraction in key_averages(), to_dataframe() and
the trace."""

from __future__ import annotations

import pytest

from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare
from pytest_neuronprof.gate.summary import summarize, summarize_rounds
from pytest_neuronprof.profiler.result import OpRecord, ProfileResult, ScopeRecord
from pytest_neuronprof.profiler.trace import DEVICE_PID, trace_events


def rec(index: int, name: str, us: float, engine: str = "Tensor", bound: str = "TensorE",
        fraction: float = 0.0, dtype: str = "bfloat16", shape: tuple[int, ...] = (128, 128),
        module: str = "") -> OpRecord:
    return OpRecord(index=index, name=name, overload="default", input_shapes=[list(shape)],
                    input_dtypes=[dtype] if dtype else [], engine=engine, flops=100, bytes_read=10,
                    bytes_written=6, launch_us=0.0, compute_us=us, memory_us=us / 2,
                    device_time_us=us, bound=bound, costed=True, module_path=module, scope="",
                    phase="forward", host_start_us=float(index), cpu_time_us=0.5,
                    device_start_us=float(index), peak_fraction=fraction)


def graph(*records: OpRecord, backend: str = "simulated") -> ProfileResult:
    return ProfileResult(list(records), backend, "trn2", execution="graph")


# --- counting every call (item 5) ----------------------------------------------------------------

def test_calls_charged_0_us_in_a_graph_are_counted_and_free_ops_are_not():
    result = graph(
        rec(0, "aten::mm", 6.0, fraction=0.8, module="mlp.gate"),
        rec(1, "aten::mm", 0.0, bound="fixed cost", module="mlp.up"),  # hidden behind the first
        rec(2, "aten::view", 0.0, engine="-", bound="none"),  # free: left out, as before
        rec(3, "aten::mse_loss_backward", 0.0, engine="Vector", bound="VectorE", dtype="float32"),
        rec(4, "aten::add", 2.0, engine="Vector", bound="VectorE", dtype="float32"),
    )
    s = summarize(result, "3", "2.13")
    assert set(s.ops) == {"aten::mm", "aten::mse_loss_backward", "aten::add"}
    mm, loss = s.ops["aten::mm"], s.ops["aten::mse_loss_backward"]
    assert (mm.count, mm.device_time_us, mm.flops, mm.bytes, mm.bound, mm.dtype) == (
        2, 6.0, 200, 32, "TensorE", "bfloat16")
    assert dict(mm.breakdown()) == {"mlp.gate": 6.0, "mlp.up": 0.0}
    assert (loss.count, loss.device_time_us, loss.share, loss.bound, loss.dtype) == (
        1, 0.0, 0.0, "VectorE", "float32")
    assert s.total_device_time_us == 8.0 and s.ops["aten::add"].share == 0.25


def test_which_of_two_independent_calls_is_charged_changes_no_count_and_no_verdict():
    """The SwiGLU reorder of issue 17: `up` before `gate` moved the charge from one mm to the
    other, and the gate said "more calls (10 -> 12): a lost fusion?" with 12 calls both times."""
    before = summarize(graph(rec(0, "aten::mm", 6.0), rec(1, "aten::mm", 0.0),
                             rec(2, "aten::mse_loss_backward", 0.0, engine="Vector", bound="VectorE")),
                       "3", "2.13")
    after = summarize(graph(rec(0, "aten::mm", 0.0), rec(1, "aten::mm", 6.0),
                            rec(2, "aten::mse_loss_backward", 4.0, engine="Vector", bound="VectorE")),
                      "3", "2.13")
    assert before.ops["aten::mm"].count == after.ops["aten::mm"].count == 2
    verdict = compare(before, after, GatePolicy(floor_us=0.0))
    # mse_loss_backward is in the baseline (at 0 us): no call-count finding, and not a new op;
    # the 4 us it now takes (40 % of the time) are said as what they are
    assert not [f for f in verdict.regressions if f.kind == Kind.CALLS]
    assert verdict.regressions[0].kind == Kind.TOTAL
    assert [(f.op, f.reason) for f in verdict.regressions if f.kind == Kind.NEW] == [
        ("aten::mse_loss_backward", "was hidden behind other work (0 us), now 40% of the time")]
    same = compare(before, before, GatePolicy(floor_us=0.0))
    assert (same.status, same.regressions) == (Status.PASS, ())


def test_bound_and_dtype_are_those_of_the_calls_with_most_device_time():
    s = summarize(graph(rec(0, "aten::mm", 1.0, bound="HBM", dtype="float32"),
                        rec(1, "aten::mm", 5.0, bound="TensorE", dtype="bfloat16"),
                        rec(2, "aten::mm", 2.0, bound="HBM", dtype="float32"),
                        # all at 0 us: the bound of most calls
                        rec(3, "aten::exp", 0.0, engine="Scalar", bound="fixed cost", dtype=""),
                        rec(4, "aten::exp", 0.0, engine="Scalar", bound="ScalarE", dtype=""),
                        rec(5, "aten::exp", 0.0, engine="Scalar", bound="ScalarE", dtype="")),
                  "3", "2.13")
    assert (s.ops["aten::mm"].bound, s.ops["aten::mm"].dtype) == ("TensorE", "bfloat16")
    assert (s.ops["aten::exp"].bound, s.ops["aten::exp"].dtype) == ("ScalarE", "")


def test_measured_records_without_device_time_stay_out():
    """On a measured backend 0 us means the op did not run on the device (as before)."""
    records = [rec(0, "aten::mm", 3.0, engine="CUDA", bound="none"),
               rec(1, "aten::copy_", 0.0, engine="CUDA", bound="none")]
    one = summarize(graph(*records, backend="cuda"), "measured-1", "2.13")
    assert set(one.ops) == {"aten::mm"}
    rounds = summarize_rounds([graph(*records, backend="cuda")] * 3, "measured-1", "2.13")
    assert set(rounds.ops) == {"aten::mm"} and rounds.ops["aten::mm"].bound == "none"


# --- showing it (item 6) -------------------------------------------------------------------------

def calls() -> ProfileResult:
    return ProfileResult([
        rec(0, "aten::mm", 6.0, fraction=0.8, shape=(512, 512)),
        rec(1, "aten::mm", 2.0, bound="HBM", fraction=0.2, shape=(8, 8)),
        rec(2, "aten::exp", 0.0, engine="Scalar", bound="ScalarE", fraction=0.1),
        rec(3, "aten::exp", 0.0, engine="Scalar", bound="ScalarE", fraction=0.3),
    ], "simulated", "trn2", scopes=[ScopeRecord("step", 0.0, 5.0)])


def test_key_averages_carry_bound_and_time_weighted_peak_fraction():
    result = calls()
    averages = {evt.key: evt for evt in result.key_averages()}
    assert (averages["aten::mm"].bound, averages["aten::mm"].peak_fraction) == (
        "TensorE", pytest.approx((0.8 * 6 + 0.2 * 2) / 8))
    assert (averages["Tensor::aten::mm"].bound, averages["Tensor::aten::mm"].peak_fraction) == (
        "TensorE", pytest.approx(0.65))  # the device-side kernel events too
    assert (averages["aten::exp"].bound, averages["aten::exp"].peak_fraction) == (
        "ScalarE", pytest.approx(0.2))  # all at 0 us: by call
    assert (averages["step"].bound, averages["step"].peak_fraction) == ("none", 0.0)
    by_shape = {(evt.key, str(evt.input_shapes)): evt for evt in result.key_averages(group_by_input_shapes=True)}
    assert by_shape[("aten::mm", "[[8, 8]]")].bound == "HBM"
    assert by_shape[("aten::mm", "[[512, 512]]")].peak_fraction == pytest.approx(0.8)
    # each FunctionEvent has its record's
    assert [(e.bound, e.peak_fraction) for e in result.events() if e.key == "aten::mm"] == [
        ("TensorE", 0.8), ("HBM", 0.2)]


def test_key_averages_table_is_torchs_own():
    result = calls()
    table = result.key_averages().table(sort_by="self_device_time_total")
    assert table == result.events().key_averages().table(sort_by="self_device_time_total")
    assert "Self NEURON" in table and "bound" not in table


def test_dataframe_has_bound_and_peak_fraction():
    frame = calls().to_dataframe().set_index("name")
    assert frame.loc["aten::mm", "bound"] == "TensorE"
    assert frame.loc["aten::mm", "peak_fraction"] == pytest.approx(0.65)
    assert frame.loc["aten::exp", "peak_fraction"] == pytest.approx(0.2)
    by_bound = calls().to_dataframe(by="bound").set_index("bound")
    assert by_bound.loc["HBM", "device_time_us"] == 2.0 and by_bound.loc["HBM", "peak_fraction"] == 0.2


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_trace_device_events_carry_bound_and_peak_fraction(execution):
    result = calls()
    result.execution = execution
    kernels = [e for e in trace_events(result) if e.get("cat") == "kernel" and e["pid"] == DEVICE_PID]
    assert [(e["name"], e["args"]["bound"], e["args"]["peak_fraction"]) for e in kernels] == [
        ("aten::mm", "TensorE", 0.8), ("aten::mm", "HBM", 0.2)]
