"""Device memory of the simulated backend: tensor lifetimes, the peak, what is alive there, SBUF."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.memory import (LiveTensor, MemoryUsage, Storage, concatenate,
                                                memory_usage)
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.errors import ConfigError
from pytest_neuronprof.profiler.result import ProfileResult

KIB = 1024
F32 = 4


def profiled(fn, **config) -> ProfileResult:
    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof.result


def meta(*shape: int, dtype: torch.dtype = torch.float32, device: str = "meta") -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device=device)


class Chain:
    """x (128x256) @ w1 (256x512) -> a; a @ w2 (512x1024) -> b; a freed; a view and an in-place
    op of b; b @ w2.t() -> d. All float32: a is 256 KiB, b 512 KiB, d 256 KiB."""

    def __init__(self, device: str = "meta") -> None:
        self.x, self.w1, self.w2 = (meta(128, 256, device=device), meta(256, 512, device=device),
                                    meta(512, 1024, device=device))

    def __call__(self) -> None:
        a = self.x @ self.w1  # op 0: aten::mm
        b = a @ self.w2  # op 1: aten::mm
        del a
        _ = b.t()  # op 2: a view
        b.mul_(2)  # op 3: in place
        self.d = b @ self.w2.t()  # op 4: aten::t (a view), op 5: aten::mm


RESIDENT = (128 * 256 + 256 * 512 + 512 * 1024) * F32  # x, w1, w2


def test_peak_of_a_known_sequence_in_exact_bytes() -> None:
    memory = profiled(Chain()).memory
    assert memory is not None
    assert memory.resident_bytes == RESIDENT == 2752512
    # a (256 KiB) and b (512 KiB) alive after op 1; a freed before op 2; d made by op 5
    assert memory.timeline == ((-1, RESIDENT), (0, RESIDENT + 256 * KIB),
                               (1, RESIDENT + 768 * KIB), (2, RESIDENT + 512 * KIB),
                               (5, RESIDENT + 768 * KIB))
    assert memory.peak_bytes == RESIDENT + 768 * KIB
    assert memory.peak_index == 1  # the first time the peak is reached
    assert memory.at_peak == (
        LiveTensor(2 * 1024 * KIB, (512, 1024), "float32", "(resident)", ""),
        LiveTensor(512 * KIB, (256, 512), "float32", "(resident)", ""),
        LiveTensor(512 * KIB, (128, 1024), "float32", "aten::mm", ""),
        LiveTensor(256 * KIB, (128, 512), "float32", "aten::mm", ""),
        LiveTensor(128 * KIB, (128, 256), "float32", "(resident)", ""))
    assert memory.sbuf_peak_bytes is None and memory.spilled_bytes is None  # eager


def test_views_and_in_place_ops_allocate_nothing() -> None:
    x = meta(64, 64)

    def work() -> None:
        y = x.exp()  # the only allocation: 16 KiB
        y.t().unsqueeze(0)
        y.view(-1)[:10].unsqueeze(0).expand(3, 10)
        y.add_(1).mul_(3).transpose(0, 1).relu_()
        torch.exp(x, out=y)  # out=: written into y's storage

    result = profiled(work)
    memory = result.memory
    assert memory is not None
    assert len(result.records) > 8
    assert memory.timeline == ((-1, 16 * KIB), (0, 32 * KIB))
    assert memory.peak_bytes == 32 * KIB


def test_bytes_are_the_storage_s_not_the_view_s() -> None:
    base = meta(1024, 1024)  # 4 MiB, read only through a narrow view
    memory = profiled(lambda: base[:1, :8].exp()).memory
    assert memory is not None
    assert memory.resident_bytes == 4 * 1024 * KIB
    assert memory.peak_bytes == 4 * 1024 * KIB + 8 * F32


def test_resident_weights_and_inputs_count_from_the_start() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(1024, 2048, device="meta", dtype=torch.bfloat16)
    x = meta(16, 1024, dtype=torch.bfloat16)
    unused = meta(4096, 4096)  # alive, but no op reads it: not resident

    def work() -> None:
        with torch.no_grad():
            layer(x)

    memory = profiled(work).memory
    assert memory is not None
    weights = (1024 * 2048 + 2048) * 2
    assert memory.resident_bytes == weights + 16 * 1024 * 2
    assert memory.timeline[0] == (-1, memory.resident_bytes)
    assert memory.peak_bytes == memory.resident_bytes + 16 * 2048 * 2  # the output
    # the weight's own shape, not that of its transpose, through which addmm first met it
    assert memory.at_peak[0] == LiveTensor(1024 * 2048 * 2, (2048, 1024), "bfloat16",
                                           "(resident)", "")
    assert memory.at_peak[1].op == "aten::addmm"
    assert memory.at_peak[1].module_path == "Linear"
    del unused


def test_a_tensor_freed_mid_region_lowers_the_timeline() -> None:
    x = meta(256, 256)

    def work() -> None:
        big = x.repeat(4, 1)  # 1 MiB
        small = big.sum(0)
        del big
        small.exp()

    result = profiled(work)
    memory = result.memory
    assert memory is not None
    lives = [live for _, live in memory.timeline]
    resident = 256 * KIB
    assert lives[0] == resident
    assert max(lives) == memory.peak_bytes == resident + 1024 * KIB + 1 * KIB
    assert lives[-1] == resident + 2 * KIB  # big went; small and its exp stay
    assert lives[-1] < lives[-2]
    # The last op is the exp, after which big is gone
    assert memory.timeline[-1][0] == len(result.records) - 1


class DeepMLP(nn.Module):
    def __init__(self, width: int, depth: int, checkpointed: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointed else layer(x)
        return x


def test_activation_checkpointing_lowers_the_forward_backward_peak() -> None:
    x = meta(8192, 256)  # activations of 8 MiB, weights of 256 KiB: activations dominate

    def usage(checkpointed: bool) -> MemoryUsage:
        model = DeepMLP(256, 12, checkpointed).to("meta")
        memory = profiled(lambda: model(x).sum().backward()).memory
        assert memory is not None
        return memory

    plain, checkpointed = usage(False), usage(True)
    activation = 8192 * 256 * F32
    # Without checkpointing each layer keeps its Linear's output (GELU's input) and its GELU's
    # output (the next layer's input) until backward; with it, only the layers' inputs: the
    # peak (at the start of backward) is 11 activations lower.
    assert plain.peak_bytes - checkpointed.peak_bytes == 11 * activation
    assert checkpointed.peak_bytes - checkpointed.resident_bytes < 14 * activation
    assert plain.at_peak[1].op == "aten::addmm" and plain.at_peak[1].module_path == "layers.0.0"
    assert {t.op for t in checkpointed.at_peak[1:]} == {"aten::gelu"}


def test_graph_execution_reports_sbuf_high_water_and_spills() -> None:
    x, w1, w2, w3 = meta(128, 256), meta(256, 512), meta(512, 1024), meta(1024, 64)

    def small() -> None:
        ((x @ w1) @ w2) @ w3

    memory = profiled(small, execution="graph").memory
    eager = profiled(small).memory
    assert memory is not None and eager is not None
    # x @ w1 (256 KiB) is kept in SBUF until the second product has read it, which writes its
    # 512 KiB into SBUF too; the third product's result goes to HBM.
    assert memory.sbuf_peak_bytes == 768 * KIB
    assert memory.spilled_bytes == 0
    assert memory.peak_bytes == eager.peak_bytes  # device memory: the same tensors

    x, w = meta(8192, 4096), meta(4096, 4096)

    def big() -> None:  # a 128 MiB intermediate does not fit in trn2's 56 MiB of SBUF
        (x @ w) @ w

    memory = profiled(big, execution="graph").memory
    assert memory is not None
    assert memory.spilled_bytes == 8192 * 4096 * F32
    assert memory.sbuf_peak_bytes == 0


def test_fake_tensor_mode_gives_the_meta_numbers() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    on_meta = profiled(Chain()).memory
    fake = FakeTensorMode()
    with fake:
        chain = Chain(device="cpu")  # fake CPU tensors: their storages are meta storages
        under_fake = profiled(chain).memory  # the profiler inside the fake mode
    with NeuronProfiler(NeuronConfig()) as prof:  # and around it
        with fake:
            chain()
    assert under_fake == prof.result.memory == on_meta


def test_profile_memory_false_gives_none() -> None:
    assert profiled(Chain(), profile_memory=False).memory is None
    assert profiled(Chain(), profile_memory=False, execution="graph").memory is None
    assert profiled(Chain()).memory is not None  # on by default
    with pytest.raises(ConfigError, match="profile_memory"):
        NeuronConfig(profile_memory="no")  # type: ignore[arg-type]


def test_concatenate_takes_the_highest_peak_and_shifts_its_ops() -> None:
    first = profiled(Chain())
    x = meta(2048, 2048)
    second = profiled(lambda: (x.exp(), x.exp()))  # 2 x 16 MiB: the higher peak
    joined = ProfileResult.concatenate([first, second])
    memory = joined.memory
    assert memory is not None and first.memory is not None and second.memory is not None
    offset = len(first.records)
    assert memory.peak_bytes == second.memory.peak_bytes == 3 * 16 * 1024 * KIB
    assert memory.peak_index == second.memory.peak_index + offset == offset + 1
    assert memory.at_peak == second.memory.at_peak
    assert memory.resident_bytes == max(first.memory.resident_bytes, second.memory.resident_bytes)
    # first's timeline, then second's shifted: its start falls on first's last op, which keeps
    # its own entry
    assert first.memory.timeline[-1][0] == offset - 1
    assert memory.timeline == (*first.memory.timeline,
                               *((i + offset, live) for i, live in second.memory.timeline[1:]))
    assert joined.records[memory.peak_index].name == "aten::exp"


def test_concatenate_of_graph_regions_sums_spills_and_keeps_the_highest_sbuf() -> None:
    def usage(sbuf: int, spilled: int) -> MemoryUsage:
        return MemoryUsage(10, 10, -1, (), ((-1, 10),), sbuf, spilled)

    joined = concatenate([usage(5, 100), usage(7, 1), usage(6, 0)], [0, 3, 9])
    assert (joined.sbuf_peak_bytes, joined.spilled_bytes) == (7, 101)
    assert joined.peak_index == -1 and joined.timeline == ((-1, 10),)
    assert concatenate([MemoryUsage(1, 1, -1, (), ((-1, 1),))], [0]).spilled_bytes is None


def test_equal_code_gives_equal_numbers() -> None:
    torch.manual_seed(0)
    model = DeepMLP(256, 4, checkpointed=False).to("meta")
    x = meta(64, 256)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    runs = [profiled(step).memory for _ in range(3)]
    assert runs[0] is not None and runs[0].peak_bytes > runs[0].resident_bytes
    assert runs[0] == runs[1] == runs[2]


def test_frees_between_ops_count_before_the_next_op_s_outputs() -> None:
    # storage 0 resident (100 B); 1 made by op 0 (10 B); 2 by op 1 (20 B); 1 freed before op 1
    storages = [Storage(-1, 100, (100,), "uint8"), Storage(0, 10, (10,), "uint8"),
                Storage(1, 20, (20,), "uint8")]
    usage = memory_usage(storages, [(1, 1)], 2, lambda k: (f"op{k}", f"m{k}"))
    assert usage.timeline == ((-1, 100), (0, 110), (1, 120))
    assert (usage.peak_bytes, usage.peak_index) == (120, 1)
    assert [t.op for t in usage.at_peak] == ["(resident)", "op1"]
    # a resident storage freed mid-region stops counting
    usage = memory_usage(storages[:1], [(3, 0), (9, 0)], 4, lambda k: ("", ""))
    assert usage.timeline == ((-1, 100), (3, 0))
    assert (usage.peak_bytes, usage.peak_index, usage.resident_bytes) == (100, -1, 100)


def test_at_peak_lists_the_ten_largest() -> None:
    storages = [Storage(k, 100 + k, (k,), "uint8") for k in range(15)]
    usage = memory_usage(storages, [], 15, lambda k: ("aten::op", ""))
    assert [t.bytes for t in usage.at_peak] == list(range(114, 104, -1))


@pytest.mark.parametrize("name, gib", [("trn1", 16), ("inf2", 16), ("trn2", 24),
                                       ("trn2-lnc1", 12), ("trn3", 36), ("trn3-lnc1", 18)])
def test_hbm_per_core_of_each_neuron_profile(name: str, gib: int) -> None:
    assert load_hardware(name).hbm_bytes_per_core == gib * 2**30


def test_hbm_per_core_of_h200_is_nvidia_s_141_gb() -> None:
    assert load_hardware("h200").hbm_bytes_per_core == pytest.approx(141e9, rel=1e-6)


def test_work_handed_to_other_threads_is_left_out_and_indexes_stay_the_records() -> None:
    from concurrent.futures import ThreadPoolExecutor

    x = meta(256, 256)  # 256 KiB

    def work() -> None:
        a = x.exp()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(lambda: x.sin()).result()  # spliced in after exp, not tracked
        b = x.cos()
        del a, b

    result = profiled(work)
    memory = result.memory
    assert memory is not None
    names = [r.name for r in result.records]
    assert names == ["aten::exp", "aten::sin", "aten::cos"]
    assert [r.thread for r in result.records] == [0, 1, 0]
    assert memory.timeline == ((-1, 256 * KIB), (0, 512 * KIB), (2, 768 * KIB))
    assert memory.peak_index == 2 and memory.at_peak[0].op == "(resident)"
    assert [t.op for t in memory.at_peak[1:]] == ["aten::cos", "aten::exp"]  # equal sizes: by op


def test_a_new_storage_takes_its_shape_from_the_op_s_record_and_frees_pair_at_close() -> None:
    # The capture's cost (issue 18): a lone output's storage entry shares the shape tuple of
    # the TensorMeta its op's record already made (no second tuple per storage), and the
    # frees are paired with op positions once, when the region ends.
    from pytest_neuronprof.profiler.backends.simulated import OUTPUTS, _CaptureMode
    from pytest_neuronprof.profiler.modules import ModuleTracker

    x = meta(64, 32)
    mode = _CaptureMode(ModuleTracker(tag_autograd=True), memory=True)
    with mode:
        y = x @ x.t()  # op 0: aten::t (a view), op 1: aten::mm, y 64x64
        z = y + 1  # op 2: aten::add, z 64x64
        del y
        w = z * 2  # op 3: aten::mul; y freed before it
    lifetimes = mode.lifetimes
    assert lifetimes is not None
    lifetimes.close()
    storages = lifetimes.storages
    assert [(p, n, tuple(s), d) for p, n, s, d in storages] == [
        (-1, 64 * 32 * F32, (64, 32), torch.float32), (1, 64 * 64 * F32, (64, 64), torch.float32),
        (2, 64 * 64 * F32, (64, 64), torch.float32), (3, 64 * 64 * F32, (64, 64), torch.float32)]
    for position, _, shape, _ in storages[1:]:
        assert shape is mode.raw[position][OUTPUTS][0].shape
    assert lifetimes.frees == [(3, 1)]
    del z, w
    assert lifetimes.frees == [(3, 1)]  # after close(): nothing more is noted


def test_dataflow_usage_frees_a_buffer_after_its_last_reader_in_the_graphs_order():
    """costmodel/memory.py's dataflow_usage (issue 34, item 6): three ops in the order 0, 2, 1
    (the graph's); storage 1 (made by op 0, read by op 2) lives to op 2 whatever Python held;
    storage 2 (op 1's, still held at the end: a result) lives to the end; storage 3 is made by an
    allocation no scheduled op touches and freed: never counted."""
    from pytest_neuronprof.costmodel.memory import RESIDENT, dataflow_usage

    storages = [(RESIDENT, 100, (25,), "float32"), (0, 1000, (250,), "float32"),
                (1, 10, (2,), "float32"), (1, 7, (7,), "int8")]
    frees = [(3, 1), (3, 3)]  # Python dropped 1 and 3 only after the last op
    touched = {0: [0, 1], 1: [0, 2], 2: [1]}
    usage = dataflow_usage(storages, frees, [0, 2, 1], touched.__getitem__, [0, 1, 2, 3],
                           lambda k: (f"op{k}", ""))
    # after op 0: 100 + 1000; after op 2 (its last reader): still 1100; after op 1: 1000 freed, +10
    assert usage.timeline == ((RESIDENT, 100), (0, 1100), (1, 110))
    assert (usage.peak_bytes, usage.peak_index, usage.resident_bytes) == (1100, 0, 100)
    assert sum(group.bytes for group in usage.live) == 1100
