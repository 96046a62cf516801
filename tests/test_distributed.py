"""Distributed code as it runs on Trainium (issue 37).

1. One collective, one cost, whichever API issued it: ``torch.distributed`` (the c10d ops), the
   functional API (``_functional_collectives``: ``_wrap_tensor_autograd``, ``wait_tensor``) and
   the raw ``_c10d_functional`` ops cost the same time and peak, eager and graph, and a change
   between them passes the gate; more generally a renamed op whose total and peak are unchanged
   never fails.
2. ``world_size=`` runs a test as rank 0 of a simulated process group; bad uses say so.
3. A collective's record, baseline entry, report and trace carry ``ranks``, ``link_bytes``, the
   algorithm and its dtype; its finding says what it moved.
4. A prefetched all-gather overlaps compute in a graph by what the compute-communication
   overlap page's mechanism allows (collectives on their own cores, the DMA shared round-robin
   per packet).
5. The does-not-fit advice names a tensor-parallel degree; ``compare --by chip`` shows each
   chip's time and peak.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.errors import ConfigError
from pytest_neuronprof.formatting import format_bytes
from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare, uncompared, with_memory_limit
from pytest_neuronprof.gate.memory import MemorySummary, PeakGroup, tensor_parallel_fit
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary, summarize
from pytest_neuronprof.outputs.rows import fit_text
from pytest_neuronprof.profiler.distributed import simulated_group

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

BF16, F32 = torch.bfloat16, torch.float32
MiB, GiB = 2**20, 2**30
functional = torch.ops._c10d_functional


def profiled(fn: Callable[[], Any], **config: Any):
    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof.result


def collectives(result) -> list:
    return [r for r in result.records if r.engine == "Collective"]


# --- 1. one collective, one cost, whichever API issued it ---------------------------------------

P = 8
TOKENS, HIDDEN, SHARD = 2048, 4096, 512


def forms(kind: str, group: Any) -> dict[str, Callable[[], Any]]:
    """The three ways of issuing ``kind`` after a tensor-parallel product, each the others'
    equivalent: the name holding the partial sums holds the reduced ones after it (in place,
    or rebound), and what each returns is used the same way."""
    import torch.distributed._functional_collectives as funcol

    with torch.device("meta"):
        x = torch.randn(TOKENS, SHARD, dtype=BF16)
        w = torch.randn(HIDDEN, SHARD, dtype=BF16)
    name, ranks = group.group_name, group.size()

    def c10d():
        h = x @ w.t()
        if kind == "all_reduce":
            dist.all_reduce(h)
        elif kind == "all_gather":
            out = torch.empty(ranks * TOKENS, HIDDEN, dtype=BF16, device="meta")
            dist.all_gather_into_tensor(out, h)
            h = out
        else:
            out = torch.empty(TOKENS // ranks, HIDDEN, dtype=BF16, device="meta")
            dist.reduce_scatter_tensor(out, h)
            h = out
        return h * 2

    def public():  # the functional API: an AsyncCollectiveTensor, autograd's wrapper, a wait on use
        h = x @ w.t()
        if kind == "all_reduce":
            h = funcol.all_reduce(h, "sum", group)
        elif kind == "all_gather":
            h = funcol.all_gather_tensor(h, 0, group)
        else:
            h = funcol.reduce_scatter_tensor(h, "sum", 0, group)
        return h * 2

    def raw():  # the ops a traced graph holds
        h = x @ w.t()
        if kind == "all_reduce":
            h = functional.all_reduce(h, "sum", name)
        elif kind == "all_gather":
            h = functional.all_gather_into_tensor(h, ranks, name)
        else:
            h = functional.reduce_scatter_tensor(h, "sum", ranks, name)
        return functional.wait_tensor(h) * 2

    return {"c10d": c10d, "functional": public, "raw": raw}


@pytest.fixture
def group_of():
    """``group_of(ranks)``: a simulated default group (this process rank 0), closed after."""
    opened = []

    def make(ranks: int):
        context = simulated_group(ranks)
        opened.append(context)
        return context.__enter__()

    yield make
    for context in opened:
        context.__exit__(None, None, None)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch 2.13 renames some of these functions
@pytest.mark.parametrize("execution", ["eager", "graph"])
@pytest.mark.parametrize("kind, phases, buffer", [
    ("all_reduce", 2, TOKENS * HIDDEN * 2),  # the partial sums, reduced in place
    ("all_gather", 1, P * TOKENS * HIDDEN * 2),  # the gathered tensor
    ("reduce_scatter", 1, TOKENS * HIDDEN * 2),  # the tensor scattered
])
def test_the_three_api_forms_cost_the_same_time_and_peak(group_of, kind, phases, buffer, execution):
    group = group_of(P)
    results = {form: profiled(fn, execution=execution) for form, fn in forms(kind, group).items()}
    totals = {form: r.total_device_time_us for form, r in results.items()}
    peaks = {form: r.memory.peak_bytes for form, r in results.items()}
    assert len(set(totals.values())) == 1, totals
    assert len(set(peaks.values())) == 1, peaks
    # one collective each, under one name, the op torch dispatched kept beside it
    records = {form: collectives(r) for form, r in results.items()}
    assert all(len(found) == 1 for found in records.values())
    name = {"all_reduce": "_c10d_functional::all_reduce", "all_gather": "_c10d_functional::all_gather_into_tensor",
            "reduce_scatter": "_c10d_functional::reduce_scatter_tensor"}[kind]
    assert {found[0].name for found in records.values()} == {name}
    assert records["c10d"][0].dispatched.startswith("c10d::")
    # what it moved: (p - 1) / p of the buffer per phase over the links
    (reduce,) = records["raw"]
    assert (reduce.ranks, reduce.link_bytes) == (P, phases * (P - 1) * buffer // P)
    links = load_hardware("trn2").collectives
    assert reduce.compute_us == pytest.approx(links.time_us(P, phases, reduce.link_bytes, 4), rel=1e-12)
    assert reduce.algorithm == links.algorithm_of(P, phases, reduce.link_bytes) == "ring"
    # waiting and autograd's wrapper move nothing, in time and in memory
    for r in results.values():
        for record in r.records:
            if record.name in ("_c10d_functional::wait_tensor", "_c10d_functional::_wrap_tensor_autograd"):
                assert (record.device_time_us, record.engine, record.costed) == (0.0, "-", True)


def test_waiting_hands_back_the_collectives_result_not_a_new_tensor(group_of):
    """On meta tensors wait_tensor and _wrap_tensor_autograd return a storage of their own; on
    the device they are the collective's result: the peak counts it once. A functional
    all-reduce whose input stays alive holds two buffers, as it does."""
    group = group_of(P)
    x = torch.empty(64 * MiB // 2, dtype=BF16, device="meta")

    def rebound():
        h = x * 2
        h = functional.wait_tensor(functional.all_reduce(h, "sum", group.group_name))
        return h * 2

    def kept():
        h = x * 2
        out = functional.wait_tensor(functional.all_reduce(h, "sum", group.group_name))
        return h + out

    # 64 MiB each: resident x; h; the all-reduce's result, in h's memory; the product
    rebound_result = profiled(rebound)
    assert rebound_result.memory.peak_bytes == 3 * 64 * MiB
    assert [r.name for r in rebound_result.records].count("_c10d_functional::wait_tensor") == 1
    # h read after it: its result is another buffer (and the sum a fourth)
    assert profiled(kept).memory.peak_bytes == 4 * 64 * MiB


def _renamed(before: str, after: str, us: float = 388.29, module: str = "mlp.down", calls: int = 1):
    def summary(name: str, count: int = calls) -> ProfileSummary:
        ops = {name: OpSummary(count, us, "Collective", 0, 32 * MiB, 0.0, module),
               "aten::mm": OpSummary(2, 500.0, "Tensor", 10**9, 10**6, 0.0, module)}
        total = sum(o.device_time_us for o in ops.values())
        return ProfileSummary("simulated", "trn2", "7", "2.13", total, ops)

    return summary(before), summary(after)


def test_a_renamed_op_whose_total_and_peak_are_unchanged_passes():
    old, new = _renamed("c10d::allreduce_", "_c10d_functional::all_reduce")
    verdict = compare(old, new, GatePolicy())
    assert verdict.status == Status.PASS and not verdict.regressions and not verdict.improvements
    # any op: a kernel renamed in a new torch, the same time in the same module
    old, new = _renamed("aten::_flash_attention_forward", "aten::_scaled_dot_product_flash_attention")
    assert compare(old, new, GatePolicy()).status == Status.PASS
    # some of its calls renamed: 4 calls of 100 us, then 2 of each name
    before = ProfileSummary("simulated", "trn2", "7", "2.13", 400.0,
                            {"aten::old": OpSummary(4, 400.0, "Vector", 0, 1, 1.0, "m")})
    after = ProfileSummary("simulated", "trn2", "7", "2.13", 400.0,
                           {"aten::old": OpSummary(2, 200.0, "Vector", 0, 1, 0.5, "m"),
                            "aten::new": OpSummary(2, 200.0, "Vector", 0, 1, 0.5, "m")})
    partial = compare(before, after, GatePolicy())
    assert partial.status == Status.PASS and not partial.regressions and not partial.improvements
    # an op with as many calls as before was not renamed, however a graph's schedule moved its
    # time: a new op beside it is a new op, not its replacement
    shifted = ProfileSummary("simulated", "trn2", "7", "2.13", 404.0,
                             {"aten::old": OpSummary(4, 300.0, "Vector", 0, 1, 0.75, "m"),
                              "aten::clone": OpSummary(1, 104.0, "DMA", 0, 1, 0.25, "m")})
    moved = compare(before, shifted, GatePolicy())
    assert [(f.kind, f.op) for f in moved.regressions] == [(Kind.NEW, "aten::clone")]
    # a rename that also costs more is still a regression: the replacement and its new op
    old, new = _renamed("c10d::allreduce_", "_c10d_functional::all_reduce")
    slower = ProfileSummary("simulated", "trn2", "7", "2.13", new.total_device_time_us + 300.0,
                            {**new.ops, "_c10d_functional::all_reduce":
                             OpSummary(1, 688.29, "Collective", 0, 32 * MiB, 0.0, "mlp.down")})
    regressed = compare(old, slower, GatePolicy())
    assert regressed.status == Status.REGRESSION
    assert [f.kind for f in regressed.regressions] == [Kind.TOTAL, Kind.REPLACED, Kind.NEW]


SWITCH = """
import os
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

FORM = os.environ.get("FORM", "c10d")
DTYPE = getattr(torch, os.environ.get("DTYPE", "bfloat16"))


@pytest.fixture
def weights():
    with torch.device("meta"):
        return torch.randn(4096, 1376, dtype=DTYPE), torch.randn(1, 128, 1376, dtype=DTYPE)


@pytest.mark.neuron_profile(world_size=8)
def test_row_parallel(weights):
    w, x = weights
    h = x @ w.t()  # partial sums of a row-parallel layer
    if FORM == "c10d":
        dist.all_reduce(h)
    elif FORM == "functional":
        h = funcol.all_reduce(h, "sum", dist.group.WORLD)
    else:
        h = torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce(h, "sum", dist.group.WORLD.group_name))
    assert (h * 1).shape == (1, 128, 4096)
"""


def test_a_change_between_the_forms_passes_the_gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    pytester.makepyfile(test_switch=SWITCH)
    monkeypatch.setenv("FORM", "c10d")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    entry = json.loads((pytester.path / "baselines" / "test_switch.json").read_text())
    (recorded,) = entry["tests"].values()
    for form in ("functional", "raw"):
        monkeypatch.setenv("FORM", form)
        result = pytester.runpytest("--neuron-report", f"{form}.json")
        result.assert_outcomes(passed=1)
        (test,) = json.loads((pytester.path / f"{form}.json").read_text())["tests"].values()
        assert test["verdict"]["status"] == "pass" and not test["verdict"]["regressions"]
        assert test["current"]["total_device_time_us"] == recorded["simulated:trn2"]["total_device_time_us"]
        assert test["current"]["memory"]["peak_bytes"] == recorded["simulated:trn2"]["memory"]["peak_bytes"]


# --- 1 (principle): every collective torch can issue is costed, whichever API ------------------------

@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_other_collectives_cost_the_same_whichever_api_issued_them(group_of):
    import torch.distributed._functional_collectives as funcol

    group = group_of(P)
    name = group.group_name
    x = torch.empty(P * 1024, 1024, dtype=BF16, device="meta")  # 16 MiB
    nbytes = x.numel() * 2
    links = load_hardware("trn2").collectives

    def one(fn: Callable[[], Any]):
        (record,) = collectives(profiled(fn))
        assert record.costed
        return record

    # all-to-all: dist's, the functional op, its autograd form and DTensor's shard_dim_alltoall
    # (the last two where this torch has them: torch 2.7, the oldest supported, may not)
    a2a = [one(lambda: dist.all_to_all_single(torch.empty_like(x), x)),
           one(lambda: funcol.all_to_all_single(x, None, None, group) * 1)]
    if hasattr(torch.ops._c10d_functional_autograd, "all_to_all_single"):
        a2a.append(one(lambda: torch.ops._c10d_functional_autograd.all_to_all_single(
            x, [1024] * P, [1024] * P, name)))
    if hasattr(torch.ops._dtensor, "shard_dim_alltoall"):
        a2a.append(one(lambda: torch.ops._dtensor.shard_dim_alltoall(x, 0, 1, name)))
    assert {(r.name, r.link_bytes, r.device_time_us) for r in a2a} == {
        ("_c10d_functional::all_to_all_single", (P - 1) * nbytes // P, a2a[0].device_time_us)}
    # broadcast, in place (dist) and out of place (functional)
    casts = [one(lambda: dist.broadcast(x, 0)), one(lambda: funcol.broadcast(x, 0, group) * 1)]
    assert {(r.name, r.link_bytes, r.device_time_us) for r in casts} == {
        ("_c10d_functional::broadcast", (P - 1) * nbytes // P, casts[0].device_time_us)}
    # the older c10d_functional namespace: its group by size
    legacy = one(lambda: torch.ops.c10d_functional.wait_tensor(
        torch.ops.c10d_functional.all_reduce(x, "sum", "", list(range(P)), P)))
    assert (legacy.name, legacy.link_bytes) == ("_c10d_functional::all_reduce", 2 * (P - 1) * nbytes // P)
    # dist.all_gather into a list of tensors moves the gathered bytes, as the other forms do
    shard = torch.empty(1024, 1024, dtype=BF16, device="meta")
    listed = one(lambda: dist.all_gather([torch.empty_like(shard) for _ in range(P)], shard))
    gathered = one(lambda: functional.wait_tensor(functional.all_gather_into_tensor(shard, P, name)))
    assert (listed.name, listed.link_bytes, listed.device_time_us) == (
        gathered.name, gathered.link_bytes, gathered.device_time_us)
    assert listed.input_shapes[:2] == [[[[1024, 1024]] * P], [[1024, 1024]]]  # Tensor[][], Tensor[]
    # point to point: one step and the bytes, to one peer
    send = one(lambda: dist.send(x, 1))
    recv = one(lambda: dist.recv(x, 1))
    assert (send.name, send.ranks, send.link_bytes, send.algorithm) == ("_c10d_functional::isend", 2, nbytes, "p2p")
    assert recv.name == "_c10d_functional::irecv" and recv.device_time_us == send.device_time_us
    assert send.compute_us == pytest.approx(links.hop_us + nbytes / (links.bus_gbps * 1e3))
    # a batch of sends and receives runs them together: the larger direction's bytes
    half = torch.empty(P * 512, 1024, dtype=BF16, device="meta")
    batch = one(lambda: functional.batch_p2p_ops(["isend", "irecv"], [1, 1], [0, 0], [x, half], name))
    assert (batch.name, batch.link_bytes, batch.device_time_us) == (
        "_c10d_functional::batch_p2p_ops", nbytes, send.device_time_us)
    # reduce, gather, scatter to and from rank 0, and a barrier: no bytes, two phases of hops
    reduce = one(lambda: dist.reduce(x, 0))
    assert (reduce.name, reduce.link_bytes) == ("c10d::reduce_", 2 * (P - 1) * nbytes // P)
    gather = one(lambda: dist.gather(shard, [torch.empty_like(shard) for _ in range(P)], dst=0))
    assert (gather.name, gather.link_bytes) == ("c10d::gather_", (P - 1) * shard.numel() * 2)
    scatter = one(lambda: dist.scatter(shard, [torch.empty_like(shard) for _ in range(P)], src=0))
    assert (scatter.name, scatter.link_bytes) == ("c10d::scatter_", (P - 1) * shard.numel() * 2)
    barrier = one(lambda: dist.barrier())
    assert (barrier.name, barrier.link_bytes) == ("c10d::barrier", 0)
    assert barrier.compute_us == pytest.approx(links.time_us(P, 2, 0.0, 4)) and barrier.compute_us > 0
    # a subgroup's collectives are costed for its ranks
    half = dist.new_group(list(range(P // 2)))
    sub = one(lambda: funcol.all_reduce(x, "sum", half) * 1)
    assert (sub.ranks, sub.link_bytes) == (P // 2, 2 * (P // 2 - 1) * nbytes // (P // 2))


def test_a_dtensor_redistribution_is_costed_over_its_mesh_dimension(group_of):
    """DTensor issues the functional collectives over a DeviceMesh's dimension (a subgroup):
    replicating a tensor sharded over the 4 ranks of "tp" all-gathers it over those 4."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    group_of(P)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    whole = torch.randn(1024, 1024)
    sharded = distribute_tensor(whole, mesh, [Replicate(), Shard(0)])
    result = profiled(lambda: sharded.redistribute(mesh, [Replicate(), Replicate()]).to_local())
    (gather,) = collectives(result)
    assert (gather.name, gather.ranks, gather.link_bytes) == (
        "_c10d_functional::all_gather_into_tensor", 4, 3 * whole.numel() * 4 // 4)
    assert gather.costed and gather.input_dtypes == ["float32"]


# --- 2. world_size= --------------------------------------------------------------------------------

TP_LAYER = """
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol


@pytest.mark.neuron_profile(world_size=8)
def test_tensor_parallel_layer():
    # no process group set up by the test: the marker made it
    assert dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) == (0, 8)
    with torch.device("meta"):
        x = torch.randn(1, 128, 512, dtype=torch.bfloat16)
        w = torch.randn(4096, 512, dtype=torch.bfloat16)
    y = funcol.all_reduce(x @ w.t(), "sum", dist.group.WORLD)
    half = dist.new_group([0, 1, 2, 3])  # subgroups too
    z = torch.ops._c10d_functional.all_gather_into_tensor(y, 4, half.group_name)  # raw, on meta
    assert torch.ops._c10d_functional.wait_tensor(z).shape == (4, 128, 4096)


def test_after_it():
    assert not dist.is_initialized()  # destroyed after the test, subgroup and all
"""


def test_world_size_runs_a_tensor_parallel_layer_with_no_other_setup(pytester: pytest.Pytester):
    pytester.makepyfile(test_tp=TP_LAYER)
    result = pytester.runpytest("--neuron-report", "report.json", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    (test,) = json.loads((pytester.path / "report.json").read_text())["tests"].values()
    ops = test["current"]["ops"]
    reduce = ops["_c10d_functional::all_reduce"]
    buffer = 128 * 4096 * 2
    links = load_hardware("trn2").collectives
    # 1 MiB over 8 ranks: past Mesh's share of the runtime's 1 MB (8 / 64 of it), halving-doubling
    assert links.algorithm_of(8, 2, 2 * 7 * buffer // 8) == "rdh"
    assert (reduce["ranks"], reduce["link_bytes"], reduce["algorithm"]) == (8, 2 * 7 * buffer // 8, "rdh")
    gather = ops["_c10d_functional::all_gather_into_tensor"]
    assert (gather["ranks"], gather["link_bytes"]) == (4, 3 * buffer)  # the subgroup's 4 ranks
    # ops that are not collectives keep their entries as before
    assert not {"ranks", "link_bytes", "algorithm"} & set(ops["aten::mm"])


BAD_USES = """
import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore


@pytest.mark.neuron_profile(world_size=0)
def test_zero():
    pass


@pytest.mark.neuron_profile(world_size="eight")
def test_words():
    pass


@pytest.fixture
def own_group():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield
    dist.destroy_process_group()


@pytest.mark.neuron_profile(world_size=4)
def test_fixture_makes_one_too(own_group):
    pass


@pytest.mark.neuron_profile(world_size=4)
def test_body_makes_one_too():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)


def test_leaves_one_behind():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)


@pytest.mark.neuron_profile(world_size=4)
def test_after_a_leftover():
    pass
"""


def test_world_size_refuses_bad_uses_naming_the_test_and_the_fix(pytester: pytest.Pytester):
    pytester.makepyfile(test_bad=BAD_USES)
    try:
        result = pytester.runpytest("-p", "no:randomly")
    finally:  # the run is in this process: the group one of its tests leaves behind goes
        if dist.is_initialized():
            dist.destroy_process_group()
    result.assert_outcomes(passed=1, failed=1, errors=4)
    text = result.stdout.str()
    assert "test_bad.py::test_zero: neuron_profile world_size=0: expected a whole number >= 1" in text
    assert "test_bad.py::test_words: neuron_profile world_size='eight': expected a whole number >= 1" in text
    assert ("test_bad.py::test_fixture_makes_one_too: a fixture it uses calls "
            "torch.distributed.init_process_group, but the marker's world_size=4 made the default "
            "process group already") in text
    assert "test_bad.py::test_body_makes_one_too: the test calls torch.distributed.init_process_group" in text
    assert ("test_bad.py::test_after_a_leftover: neuron_profile: world_size=4 makes the default process "
            "group, but one exists already (fake, 2 ranks)") in text
    assert "remove world_size= and use that group, or destroy it" in text


def test_world_size_needs_the_simulated_backend(pytester: pytest.Pytester):
    pytester.makepyfile(test_on_cpu_backend="""
        import pytest

        @pytest.mark.neuron_profile(world_size=8)
        def test_it():
            pass
    """)
    result = pytester.runpytest("--neuron-backend", "cpu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_on_cpu_backend.py::test_it: neuron_profile world_size=8: a simulated "
                                 "process group needs the simulated backend (the cpu backend measures*"])


def test_simulated_group_from_python_and_its_errors():
    with simulated_group(4) as group:
        assert group.size() == 4 and dist.get_rank() == 0
        with pytest.raises(ConfigError, match=r"one exists already \(fake, 4 ranks\)"):
            with simulated_group(2):
                pass
    assert not dist.is_initialized()
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ConfigError, match="expected a whole number >= 1"):
            with simulated_group(bad):  # type: ignore[arg-type]
                pass


# --- 3. collectives say what they moved -----------------------------------------------------------

def test_a_collectives_record_entry_and_trace_carry_what_it_moved(group_of, tmp_path):
    from pytest_neuronprof.profiler.trace import write_chrome_trace

    group = group_of(P)
    x = torch.empty(TOKENS, HIDDEN, dtype=BF16, device="meta")
    result = profiled(lambda: dist.all_reduce(x))
    (record,) = collectives(result)
    assert (record.ranks, record.link_bytes, record.algorithm) == (P, 2 * 7 * x.numel() * 2 // 8, "ring")
    assert record.input_dtypes == ["bfloat16"] and record.input_shapes[0] == [[TOKENS, HIDDEN]]
    entry = summarize(result, "7", torch.__version__).ops["_c10d_functional::all_reduce"]
    assert (entry.dtype, entry.ranks, entry.link_bytes, entry.algorithm) == ("bfloat16", P, record.link_bytes, "ring")
    assert entry.to_json()["link_bytes"] == record.link_bytes
    path = tmp_path / "trace.json"
    write_chrome_trace(result, path)
    (event,) = [e for e in json.loads(path.read_text())["traceEvents"]
                if e.get("cat") == "kernel" and e["name"] == record.name]
    assert {k: event["args"][k] for k in ("ranks", "link_bytes", "algorithm", "dtype")} == {
        "ranks": P, "link_bytes": record.link_bytes, "algorithm": "ring", "dtype": "bfloat16"}
    host = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "cpu_op"]
    assert host[0]["args"]["input_shapes"][0] == [[TOKENS, HIDDEN]]  # not [[], [], ...]
    del group


def test_fp32_communication_reads_what_it_moved(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    pytester.makepyfile(test_switch=SWITCH)
    monkeypatch.setenv("DTYPE", "bfloat16")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("DTYPE", "float32")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    before = 2 * 7 * 128 * 4096 * 2 // 8
    algorithm = load_hardware("trn2").collectives.algorithm_of(8, 2, 2 * before)
    was = load_hardware("trn2").collectives.algorithm_of(8, 2, before)
    assert (algorithm, was) == ("rdh", "rdh")
    reason = (f"8 ranks, {format_bytes(2 * before)} over NeuronLink (was {format_bytes(before)}), {algorithm}, "
              "float32 (was bfloat16)")
    line = next(line for line in result.stdout.lines if line.startswith("_c10d_functional::all_reduce"))
    assert reason in line, line


def test_an_older_file_cannot_hold_a_collectives_keys(tmp_path):
    from pytest_neuronprof.errors import BaselineError
    from pytest_neuronprof.gate.baseline import parse_baseline_text

    op = OpSummary(1, 10.0, "Collective", 0, 8, 1.0, "", ranks=8, link_bytes=14, algorithm="ring")
    summary = ProfileSummary("simulated", "trn2", "7", "2.13", 10.0, {"_c10d_functional::all_reduce": op})
    doc = {"schema_version": 6, "tests": {"test_a.py::test_a": {summary.variant: summary.to_json()}}}
    with pytest.raises(BaselineError, match="has a collective's algorithm, link_bytes, ranks, which needs "
                                            "schema_version 7"):
        parse_baseline_text(tmp_path / "test_a.json", json.dumps(doc))
    doc["schema_version"] = 7
    (read,) = parse_baseline_text(tmp_path / "test_a.json", json.dumps(doc)).values()
    assert read[summary.variant].ops["_c10d_functional::all_reduce"] == op
    bad = json.loads(json.dumps(doc))
    bad["tests"]["test_a.py::test_a"][summary.variant]["ops"]["_c10d_functional::all_reduce"]["algorithm"] = "warp"
    with pytest.raises(BaselineError, match="algorithm is 'warp', expected one of mesh, rdh, ring"):
        parse_baseline_text(tmp_path / "test_a.json", json.dumps(bad))


# --- 4. communication overlaps compute in a graph, as the runtime's page describes -------------------

def test_a_prefetched_all_gather_overlaps_the_product_by_what_the_shared_dma_leaves(group_of):
    """FSDP's prefetch: the next layer's weights gathered while this layer's product runs. The
    collective runs on the CC cores, apart from TensorE; while it runs, the product's transfers
    get 4 KiB of every 68 KiB the DMA moves (round-robin per packet, compute-comm-overlap.rst).
    Serialised (the gather reads the product's result, as a tensor-parallel gather does), the
    two run one after the other."""
    ranks = 32
    group = group_of(ranks)
    with torch.device("meta"):
        x = torch.empty(TOKENS, HIDDEN, dtype=BF16)
        w = torch.empty(HIDDEN, HIDDEN, dtype=BF16)
        shard = torch.empty(HIDDEN // ranks, HIDDEN, dtype=BF16)

    def gather(t: torch.Tensor) -> torch.Tensor:
        return functional.wait_tensor(functional.all_gather_into_tensor(t, ranks, group.group_name))

    def prefetched():
        return gather(shard), x @ w

    def serialised():
        y = x @ w
        return gather(y[: HIDDEN // ranks]), y

    graph = {fn.__name__: profiled(fn, execution="graph") for fn in (prefetched, serialised)}
    eager = {fn.__name__: profiled(fn) for fn in (prefetched, serialised)}
    (ag,) = collectives(graph["prefetched"])
    (mm,) = [r for r in graph["prefetched"].records if r.name == "aten::mm"]
    hw = load_hardware("trn2")
    share = hw.collectives.compute_dma_share
    assert share == 4096 / (4096 + 65536)
    C = ag.compute_us  # the all-gather on the links
    assert C == pytest.approx(hw.collectives.time_us(ranks, 1, (ranks - 1) * HIDDEN * HIDDEN * 2 // ranks, 4))
    K, D = mm.compute_us, mm.memory_us  # the product: TensorE, and its transfers at their own pace
    assert D < K < C and D > share * C  # compute-bound; its transfers outlast the DMA's share of C
    # serialised: the product, then the gather
    assert graph["serialised"].total_device_time_us == pytest.approx(K + C, rel=1e-9)
    # overlapped: TensorE works through the gather; the product's transfers move share x C
    # meanwhile and the rest after it
    overlapped = C + (D - share * C)
    assert graph["prefetched"].total_device_time_us == pytest.approx(overlapped, rel=1e-9)
    gain = (K + C) - overlapped
    assert gain == pytest.approx(K - D + share * C) and gain > 0.3 * (K + C)
    # eager execution runs one op after the other, each its own kernel: no overlap either way
    assert eager["prefetched"].total_device_time_us == pytest.approx(eager["serialised"].total_device_time_us)
    assert graph["prefetched"].total_device_time_us < eager["prefetched"].total_device_time_us


def test_a_tensor_parallel_all_reduce_on_the_critical_path_stays_in_full(group_of):
    """What the page calls strict data dependencies (reduce-scatter(dot(x, y))): the product
    after the all-reduce reads its result, so nothing overlaps it; its weights load during it at
    the DMA's share."""
    group = group_of(P)
    with torch.device("meta"):
        x = torch.empty(128, HIDDEN, dtype=BF16)
        w1 = torch.empty(SHARD, HIDDEN, dtype=BF16)
        w2 = torch.empty(HIDDEN, SHARD, dtype=BF16)

    def layer():
        h = functional.wait_tensor(functional.all_reduce(x @ w1.t() @ w2.t(), "sum", group.group_name))
        return h @ w2

    result = profiled(layer, execution="graph")
    (reduce,) = collectives(result)
    after = [r for r in result.records if r.name == "aten::mm"][-1]
    assert reduce.device_time_us == pytest.approx(reduce.compute_us)  # charged in full
    assert after.device_start_us >= reduce.device_start_us + reduce.compute_us


# --- 5. where it does not fit, how it would; chips side by side ------------------------------------

def test_the_does_not_fit_advice_names_a_tensor_parallel_degree():
    assert tensor_parallel_fit(30 * GiB, 8, 16 * GiB, 24) == (16, 15 * GiB)
    assert tensor_parallel_fit(30 * GiB, 1, 16 * GiB, 24) == (2, 15 * GiB)
    assert tensor_parallel_fit(100 * GiB, 8, 16 * GiB, 24) == (0, math.ceil(800 * GiB / 24))
    # a 7B decode step at tp=8 on inf2: 30 GiB per core does not fit its 16 GiB
    memory = MemorySummary(30 * GiB, 28 * GiB, live=(PeakGroup("(resident)", "", (4096, 1376), "bfloat16", 1, 28 * GiB),))
    reduce = OpSummary(64, 900.0, "Collective", 0, 10**6, 0.5, "", ranks=8, link_bytes=10**6, algorithm="ring")
    current = ProfileSummary("simulated", "inf2", "7", "2.13", 1800.0,
                             {"_c10d_functional::all_reduce": reduce,
                              "aten::mm": OpSummary(64, 900.0, "Tensor", 10**9, 10**6, 0.5, "")},
                             memory=memory)
    policy = with_memory_limit(GatePolicy(), "inf2", "simulated")
    outcome = TestOutcome("t.py::t", ("t.py", 1), uncompared(current, policy, Status.NO_BASELINE), current, None)
    text = fit_text(outcome)
    assert ("shard it further: its collectives run over 8 ranks, and at a tensor-parallel degree of 16 "
            "each NeuronCore's share of the peak would be about 15 GiB") in text
    # no collectives: no group known, no degree
    alone = ProfileSummary("simulated", "inf2", "7", "2.13", 900.0, {"aten::mm": current.ops["aten::mm"]}, memory=memory)
    outcome = TestOutcome("t.py::t", ("t.py", 1), uncompared(alone, policy, Status.NO_BASELINE), alone, None)
    assert "tensor-parallel" not in fit_text(outcome)


# --- 6. the docs' numbers are what a command of the repo prints -------------------------------------

@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_the_docs_quote_what_benchmarks_distributed_prints():
    """docs/guide/distributed.md and docs/cost-model.md quote `python benchmarks/distributed.py`,
    and the guide the example's committed baselines (what `pytest examples` prints)."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import distributed as script
    finally:
        sys.path.remove(str(root / "benchmarks"))
    guide = (root / "docs" / "guide" / "distributed.md").read_text(encoding="utf-8")
    model = (root / "docs" / "cost-model.md").read_text(encoding="utf-8")
    fsdp = script.fsdp_overlap()
    for key in ("prefetched_graph_us", "serialised_graph_us", "prefetched_eager_us", "C_us", "K_us", "D_us",
                "derived_gain_us"):
        assert f"{fsdp[key]:.2f} us" in guide, key
        if key != "prefetched_eager_us":
            assert f"{fsdp[key]:.2f} µs" in model, key
    assert fsdp["prefetched_graph_us"] == pytest.approx(fsdp["derived_overlapped_us"], rel=1e-9)
    assert fsdp["serialised_graph_us"] == pytest.approx(fsdp["derived_serial_us"], rel=1e-9)
    forms = script.api_forms()
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        rows = [r for r in forms if r["kind"] == kind]
        assert len({(r["execution"], r["time_us"], r["peak_bytes"]) for r in rows}) == 2  # eager, graph
        shown = {r["execution"]: r for r in rows}
        assert (f"{shown['eager']['time_us']:.3f} us | {shown['graph']['time_us']:.3f} us | "
                f"{shown['eager']['peak_bytes'] / MiB:.1f} MiB") in guide, kind
    from pytest_neuronprof.formatting import format_us

    examples = json.loads((root / "baselines" / "examples" / "test_distributed.json").read_text())["tests"]
    for name in ("test_tensor_parallel_mlp", "test_fsdp_step_with_prefetch"):
        entries = examples[f"examples/test_distributed.py::{name}"]
        eager, graph = entries["simulated:trn2"], entries["simulated:trn2:graph"]
        assert (f"| `{name}` | {format_us(eager['total_device_time_us'])} | "
                f"{format_us(graph['total_device_time_us'])} | {format_bytes(eager['memory']['peak_bytes'])} | "
                f"{format_bytes(graph['memory']['peak_bytes'])} |") in guide
    figures = script.doc_figures()
    for key in ("ag32_1k_trn2_us", "ag32_1k_trn1_routed_mesh_us", "ag32_1k_trn1_rings_us", "ar1_16m_eager_us"):
        assert f"{figures[key]:.2f} µs" in model, key
    assert figures["ar1_16m_graph_us"] == 0.0 and figures["ar1_16m_eager_us"] == figures["launch_us"]
