"""Collectives: torch.distributed's functional collectives and the c10d ops under
``dist.all_reduce`` are costed on the profile's NeuronLink model, on a CPU process group.

A tensor-parallel layer profiled on one rank shows its communication. The groups are real
process groups of this process: gloo with one rank (nothing to exchange), and torch's fake
process group, which plays rank 0 of N without communicating (so a single process can stand
for an 8-way tensor-parallel job).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.profiles import load_hardware

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

F32 = 4


@pytest.fixture
def group_of():
    """``group_of(backend, ranks)``: the default process group, rank 0 of ``ranks``; destroyed
    after the test."""
    def make(backend: str, ranks: int):
        if backend == "fake":
            from torch.testing._internal.distributed.fake_pg import FakeStore

            store = FakeStore()
        else:
            store = dist.HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=ranks)
        return dist.group.WORLD

    yield make
    if dist.is_initialized():
        dist.destroy_process_group()


def profiled(fn, **config):
    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof.result


def link_time_us(hardware: str, steps: int, link_bytes: float) -> float:
    """``steps`` hops within one instance and each rank's ``link_bytes`` at the bus bandwidth."""
    links = load_hardware(hardware).collectives
    return steps * links.hop_us + link_bytes / (links.bus_gbps * 1e3)


def test_functional_all_reduce_pays_its_hops_and_its_bytes(group_of):
    group = group_of("fake", 8)
    x = torch.randn(64, 1024)

    def fn():
        out = torch.ops._c10d_functional.all_reduce(x, "sum", group.group_name)
        torch.ops._c10d_functional.wait_tensor(out)

    result = profiled(fn)
    reduce, wait = result.records
    assert (reduce.name, reduce.engine) == ("_c10d_functional::all_reduce", "Collective")
    assert (wait.name, wait.device_time_us) == ("_c10d_functional::wait_tensor", 0.0)
    # Reduce-scatter then all-gather of 256 KiB: below mesh_max_bytes, Mesh's two steps per
    # phase (8 ranks are two trn2 chips of 4: a step between them, one within); 2 * 7/8 of the
    # buffer sent.
    assert 64 * 1024 * F32 < load_hardware("trn2").collectives.mesh_max_bytes
    expected = link_time_us("trn2", 4, 2 * 7 * (64 * 1024 * F32) // 8)
    assert reduce.compute_us == pytest.approx(expected, rel=1e-12)
    hw = load_hardware("trn2")
    assert reduce.device_time_us == pytest.approx(hw.launch_us + max(expected, reduce.memory_us))


def test_a_group_made_again_with_other_ranks_recosts_the_collectives_that_name_it(group_of):
    """A functional collective names its group ("0"), and the name is the same for a default
    group destroyed and made again: its cost follows the ranks the name stands for now, in the
    same process (costs are shared between regions)."""
    x = torch.randn(1024, 1024)

    def reduce_us(ranks: int) -> float:
        group = group_of("fake", ranks)
        result = profiled(lambda: torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce(x, "sum", group.group_name)), hardware="trn1")
        dist.destroy_process_group()
        return next(r.device_time_us for r in result.records if r.name.endswith("all_reduce"))

    two, thirty_two, two_again = reduce_us(2), reduce_us(32), reduce_us(2)
    assert two_again == two
    # trn1's rings: 31 steps per phase over 32 ranks against 1 over 2, and 31/32 of the buffer
    # sent per phase against 1/2
    assert thirty_two > 2 * two


# The buffer is 64 KiB x ranks: Mesh below trn2's mesh_max_bytes (1 MB): one step within a chip
# of 4 ranks; recursive halving-doubling from 16 ranks' 1 MiB on: log2 of the chips (4, 16)
# steps between chips and one within.
@pytest.mark.parametrize("ranks, steps", [(2, 1), (4, 1), (16, 3), (64, 5)])
def test_all_gather_and_reduce_scatter_move_p_minus_1_shares(group_of, ranks, steps):
    group = group_of("fake", ranks)
    shard = torch.randn(32, 512)
    whole = torch.randn(32 * ranks, 512)

    def fn():
        functional = torch.ops._c10d_functional
        functional.wait_tensor(functional.all_gather_into_tensor(shard, ranks, group.group_name))
        functional.wait_tensor(functional.reduce_scatter_tensor(whole, "sum", ranks, group.group_name))

    gather, _, scatter, _ = profiled(fn).records
    links = load_hardware("trn2").collectives
    assert (whole.numel() * F32 < links.mesh_max_bytes) == (ranks <= 4)
    assert steps == (1 if ranks <= 4 else math.ceil(math.log2(ranks // 4)) + 1)
    # Each rank sends (p - 1) shards of the gathered (or scattered) buffer.
    moved = (ranks - 1) * shard.numel() * F32
    for record in (gather, scatter):
        assert record.engine == "Collective"
        assert record.compute_us == pytest.approx(link_time_us("trn2", steps, moved), rel=1e-12)


def test_the_c10d_ops_under_dist_all_reduce_are_costed_alike(group_of):
    group = group_of("fake", 8)
    x = torch.randn(64, 1024)
    functional = profiled(lambda: torch.ops._c10d_functional.wait_tensor(
        torch.ops._c10d_functional.all_reduce(x, "sum", group.group_name))).records[0]
    c10d = profiled(lambda: dist.all_reduce(x.clone())).records
    reduce = [r for r in c10d if r.engine == "Collective"]
    # one collective, one name: the functional op's, the op torch dispatched beside it
    assert [(r.name, r.dispatched) for r in reduce] == [("_c10d_functional::all_reduce", "c10d::allreduce_")]
    assert reduce[0].compute_us == pytest.approx(functional.compute_us, rel=1e-12)
    assert reduce[0].device_time_us == functional.device_time_us
    assert all(r.costed for r in c10d)


def test_one_rank_alone_communicates_nothing(group_of):
    """Nothing to exchange: no link bytes, no steps, no HBM traffic; in eager execution the
    collective's launch is all it costs (and nothing in a graph)."""
    group_of("gloo", 1)  # a real CPU process group
    x = torch.randn(64, 1024)
    result = profiled(lambda: dist.all_reduce(x))
    (reduce,) = [r for r in result.records if r.engine == "Collective"]
    assert reduce.dispatched == "c10d::allreduce_"  # gloo's path, through the c10d op
    assert (reduce.compute_us, reduce.memory_us, reduce.link_bytes, reduce.ranks) == (0.0, 0.0, 0, 1)
    assert reduce.device_time_us == load_hardware("trn2").launch_us
    graph = profiled(lambda: dist.all_reduce(x), execution="graph")
    assert graph.total_device_time_us == 0.0


def test_link_bandwidth_sets_large_collectives_and_the_profile_decides(group_of):
    group = group_of("fake", 8)
    big = torch.empty(256, 1024, 1024, device="meta")  # 1 GiB: bandwidth-bound

    def fn():
        torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce(big, "sum", group.group_name))

    times = {hw: profiled(fn, hardware=hw).records[0].compute_us for hw in ("trn1", "trn2", "trn2-lnc1")}
    for hw, t in times.items():
        transfer = 2 * 7 * big.numel() * F32 / 8 / (load_hardware(hw).collectives.bus_gbps * 1e3)
        assert transfer / t > 0.95, hw  # the bytes, not the hops, set the time
        # 1 GiB is past every runtime's RHD range: a ring, p - 1 steps per phase
        assert t == pytest.approx(link_time_us(hw, 2 * 7, 2 * 7 * big.numel() * F32 / 8), rel=1e-12)
    # A logical core of two physical cores has twice one core's share of the chip's links.
    assert times["trn2-lnc1"] / times["trn2"] == pytest.approx(2.0, rel=0.02)


def test_a_tensor_parallel_layer_on_one_rank_shows_its_communication(group_of):
    """Megatron's row-parallel linear on rank 0 of 8: a local matmul on its shard, then an
    all-reduce of the partial sums, which graph mode schedules after the matmul it waits on."""
    group = group_of("fake", 8)
    with torch.device("meta"):
        x = torch.randn(1, 4096 // 8, dtype=torch.bfloat16)  # decode: one token
        w = torch.randn(4096, 4096 // 8, dtype=torch.bfloat16)

    def layer():
        partial = torch.nn.functional.linear(x, w)
        out = torch.ops._c10d_functional.all_reduce(partial, "sum", group.group_name)
        return torch.ops._c10d_functional.wait_tensor(out)

    hw = load_hardware("trn2")
    # 8 KiB of partial sums: Mesh, 8 ranks on two chips of 4: a step between them and one
    # within, per phase
    links = link_time_us("trn2", 4, 2 * 7 * 4096 * 2 // 8)
    for execution in ("eager", "graph"):
        result = profiled(layer, execution=execution)
        by_engine = {}
        for r in result.records:
            by_engine[r.engine] = by_engine.get(r.engine, 0.0) + r.device_time_us
        (product,) = [r for r in result.records if r.engine == "Tensor"]
        (reduce,) = [r for r in result.records if r.engine == "Collective"]
        assert reduce.compute_us == pytest.approx(links, rel=1e-12)
        # it waits for the product's partial sums, so nothing hides it: its whole time is charged
        assert reduce.device_start_us == pytest.approx(product.device_start_us + product.device_time_us)
        launch = hw.launch_us if execution == "eager" else 0.0
        assert by_engine["Collective"] == pytest.approx(launch + max(links, reduce.memory_us)), execution
        # a decode step's weight (4 MiB) takes longer to load than the all-reduce: about a quarter
        assert 0.2 * result.total_device_time_us < by_engine["Collective"] < 0.5 * result.total_device_time_us
        assert by_engine["Tensor"] > 0, execution
    table = result.to_dataframe(by="engine").set_index("engine")
    assert table.loc["Collective", "device_time_us"] == pytest.approx(by_engine["Collective"])
