"""The simulated neuron device, checked from inside a session that turned it on (a process of its
own: the device cannot be turned off). tests/test_neuron_device.py copies this file into a
pytester directory as test_checks.py, next to a conftest.py that turns the device on at
pytest_configure, as --neuron-device-alias does, and runs it in a subprocess."""

from __future__ import annotations

import contextlib
import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.profiler import compiled as compiled_module, neuron_device, value_reads
from pytest_neuronprof.profiler.neuron_device import NeuronDeviceError, NeuronTensor
from pytest_neuronprof.profiler.value_reads import ValueReadError

NEURON = torch.device("neuron", 0)


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    found = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, marker
    return found[0]


def where(marker: str) -> str:
    return value_reads._shown(__file__, line_of(marker))


# -- the device ----------------------------------------------------------------------------------

def test_the_device_parses_and_reads_as_on_hardware():
    assert neuron_device.is_enabled() and neuron_device.unavailable_reason() is None
    neuron_device.enable()  # again: nothing happens
    assert torch.device("neuron").type == "neuron" and torch.device("neuron").index is None
    x = torch.ones(2, device="neuron")
    assert type(x) is NeuronTensor
    assert x.device == NEURON and x.device.type == "neuron" and x.device.index == 0
    assert x.get_device() == 0 and x.is_neuron and not x.is_meta and not x.is_cpu
    assert torch.ones(2).neuron().device == NEURON
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    with pytest.raises(RuntimeError, match="one NeuronCore, neuron:0"):
        torch.ones(2, device="neuron:1")
    with pytest.raises(RuntimeError, match="one NeuronCore, neuron:0"):
        x.to("neuron:1")
    assert repr(x) == "tensor(..., device='neuron:0', size=(2,))"
    assert repr(torch.ones(2, dtype=torch.bfloat16, device="neuron", requires_grad=True)) == \
        "tensor(..., device='neuron:0', size=(2,), dtype=torch.bfloat16, requires_grad=True)"


@pytest.mark.parametrize("make, shape, dtype", [
    (lambda: torch.empty(2, 3, device="neuron"), (2, 3), torch.float32),
    (lambda: torch.zeros(4, dtype=torch.bfloat16, device="neuron"), (4,), torch.bfloat16),
    (lambda: torch.ones(2, 2, device="neuron"), (2, 2), torch.float32),
    (lambda: torch.full((3,), 7.0, device="neuron"), (3,), torch.float32),
    (lambda: torch.randn(5, 6, device="neuron"), (5, 6), torch.float32),
    (lambda: torch.rand(5, device="neuron"), (5,), torch.float32),
    (lambda: torch.randint(0, 9, (2, 4), device="neuron"), (2, 4), torch.int64),
    (lambda: torch.arange(10, device="neuron"), (10,), torch.int64),
    (lambda: torch.eye(3, device="neuron"), (3, 3), torch.float32),
    (lambda: torch.linspace(0, 1, 7, device="neuron"), (7,), torch.float32),
    (lambda: torch.randperm(6, device="neuron"), (6,), torch.int64),
    (lambda: torch.tensor([[1, 2], [3, 4]], device="neuron"), (2, 2), torch.int64),
    (lambda: torch.as_tensor([1.0, 2.0], device="neuron"), (2,), torch.float32),
    (lambda: torch.empty_like(torch.ones(3, 1, device="neuron")), (3, 1), torch.float32),
    (lambda: torch.ones(3, device="neuron").new_zeros(4, 4), (4, 4), torch.float32),
    (lambda: torch.ones(3).to("neuron"), (3,), torch.float32),
    (lambda: torch.ones(3, device="meta").to("neuron"), (3,), torch.float32),
    (lambda: torch.ones(3, dtype=torch.float64).to("neuron", torch.float16), (3,), torch.float16),
])
def test_factories_and_moves_make_neuron_tensors(make, shape, dtype):
    x = make()
    assert type(x) is NeuronTensor and x.device == NEURON
    assert tuple(x.shape) == shape and x.dtype == dtype


def test_shapes_strides_and_storage_as_on_meta_without_memory():
    x = torch.empty_strided((2, 3), (1, 2), device="neuron")
    assert x.stride() == (1, 2)
    cl = torch.empty(2, 3, 4, 5, device="neuron").to(memory_format=torch.channels_last)
    assert cl.stride() == torch.empty(2, 3, 4, 5, device="meta").to(
        memory_format=torch.channels_last).stride()
    huge = torch.empty(1 << 40, dtype=torch.uint8, device="neuron")  # 1 TiB: no memory
    assert huge.untyped_storage().nbytes() == 1 << 40 and huge.data_ptr() == 0
    a = torch.randn(8, 16, device="neuron")
    view = a[2:].t()
    assert view._base is a and torch._C._storage_id(view) == torch._C._storage_id(a)
    assert a.add_(1) is a  # in place: the tensor itself
    b = a.t().contiguous()
    assert torch._C._storage_id(b) != torch._C._storage_id(a) and b.stride() == (8, 1)
    for op in (lambda t: t @ t.t(), lambda t: t.softmax(-1), lambda t: t.sum(0),
               lambda t: torch.cat([t, t], 1), lambda t: t[t.argmax(-1)], lambda t: t.argmax(-1),
               lambda t: torch.where(t > 0, t, 0.0), lambda t: t * torch.tensor(2.0)):
        on_neuron, on_meta = op(a), op(a.to("meta"))
        assert type(on_neuron) is NeuronTensor
        assert (on_neuron.shape, on_neuron.dtype, on_neuron.stride()) == \
            (on_meta.shape, on_meta.dtype, on_meta.stride())


def test_modules_move_and_initialise_on_the_device():
    built = nn.Linear(16, 8, device="neuron")  # kaiming_uniform_ and uniform_ run on the device
    moved = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).to("neuron")
    embedding = nn.Embedding(100, 8, device="neuron")
    nn.init.normal_(embedding.weight)
    for module in (built, moved, embedding):
        for p in module.parameters():
            assert type(p) is NeuronTensor and isinstance(p, nn.Parameter) and p.requires_grad
    out = moved(built(torch.randn(4, 16, device="neuron")) + embedding(
        torch.tensor([1, 2, 3, 4], device="neuron")))
    out.sum().backward()
    assert all(p.grad.device == NEURON and p.grad.shape == p.shape for p in moved.parameters())
    assert type(copy.deepcopy(moved)[0].weight) is NeuronTensor
    half = moved.to(torch.bfloat16)
    assert half[0].weight.dtype == torch.bfloat16 and half[0].weight.device == NEURON


# -- value reads -----------------------------------------------------------------------------------

def test_reading_a_value_names_the_line():
    x = torch.randn(4, 4, device="neuron")
    reads = {
        "ITEM": lambda: x.sum().item(),  # ITEM
        "BOOL": lambda: bool(x.sum() > 0),  # BOOL
        "INT": lambda: int(x[0, 0]),  # INT
        "FLOAT": lambda: float(x[0, 0]),  # FLOAT
        "INDEX": lambda: [1, 2, 3][x[0, 0].long()],  # INDEX
        "TOLIST": lambda: x.tolist(),  # TOLIST
        "NUMPY": lambda: x.numpy(),  # NUMPY
        "STR": lambda: print(x),  # STR
        "FORMAT": lambda: f"{x[0, 0]:.3f}",  # FORMAT
        "EQUAL": lambda: torch.equal(x, x),  # EQUAL
        "ALLCLOSE": lambda: torch.allclose(x, x),  # ALLCLOSE
        "NONZERO": lambda: x.nonzero(),  # NONZERO
        "MASK": lambda: x[x > 0],  # MASK
        "COPY": lambda: torch.empty(4, 4).copy_(x),  # COPY
    }
    for marker, read in reads.items():
        with pytest.raises(ValueReadError) as info:
            read()
        message = str(info.value)
        assert message.startswith(f"{where(marker)} reads "), (marker, message)
        assert "of a tensor of the simulated neuron device (--neuron-device-alias)" in message
        assert "assert on shapes and dtypes, not values" in message
        assert "without --neuron-device-alias, on a Trainium instance" in message
        assert isinstance(info.value, RuntimeError)


def test_cpu_gives_a_meta_tensor_and_repr_reads_nothing():
    x = torch.randn(3, 5, device="neuron", requires_grad=True)
    for moved in (x.cpu(), x.to("cpu"), x.to("meta"), x.detach().cpu()):
        assert type(moved) is torch.Tensor and moved.device.type == "meta"
        assert (moved.shape, moved.dtype, moved.stride()) == (x.shape, x.dtype, x.stride())
    x.cpu().sum().backward()  # the copy is differentiable, as any .cpu() is
    assert x.grad.device == NEURON
    assert "size=(3, 5)" in repr(x) and "device='neuron:0'" in repr(x)
    with NeuronProfiler() as prof:
        x.detach().cpu()
    (copy_,) = prof.result.records  # the device-to-host copy happens, and is costed
    assert copy_.name == "aten::_to_copy" and copy_.engine == "DMA" and copy_.device_time_us > 0


# -- torch.accelerator, DataLoader, torch.neuron -----------------------------------------------------

def test_torch_accelerator_under_the_alias():
    accelerator = torch.accelerator
    assert accelerator.is_available() and accelerator.current_accelerator() == torch.device("neuron")
    assert accelerator.device_count() == 1 and accelerator.current_device_index() == 0
    accelerator.set_device_index(0)
    with accelerator.device_index(0):
        pass
    stream = accelerator.current_stream()
    assert stream.device == NEURON and "device_type=neuron" in repr(stream)
    accelerator.synchronize()  # nothing runs: nothing to wait for
    accelerator.empty_cache()
    with pytest.raises(NeuronDeviceError, match=r"neuron_profile.result.memory"):
        accelerator.memory_allocated()
    with pytest.raises(NeuronDeviceError, match="no allocator"):
        accelerator.max_memory_allocated(0)
    # the device generic code asks for
    device = torch.accelerator.current_accelerator()
    assert torch.ones(2, device=device).device == NEURON


def test_dataloader_pin_memory_under_the_alias():
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(10, 3), torch.arange(10))
    shapes = []
    for x, y in DataLoader(data, batch_size=4, pin_memory=True):
        x, y = x.to("neuron", non_blocking=True), y.to("neuron", non_blocking=True)
        shapes.append((tuple(x.shape), x.device, y.dtype))
    assert shapes == [((4, 3), NEURON, torch.int64), ((4, 3), NEURON, torch.int64),
                      ((2, 3), NEURON, torch.int64)]
    assert torch.randn(3).pin_memory().shape == (3,)


def test_the_device_module():
    neuron = torch.neuron
    assert neuron.is_available() and neuron.device_count() == 1 and neuron.current_device() == 0
    neuron.set_device(0)
    neuron.synchronize()
    torch.manual_seed(3)  # seeds the device module too
    assert neuron.initial_seed() == 3
    assert neuron.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    with pytest.raises(RuntimeError, match="one NeuronCore"):
        neuron.set_device(1)
    for name in neuron_device.PROVIDED:
        assert hasattr(neuron, name), name
    for name in neuron_device.NOT_PROVIDED:
        assert not hasattr(neuron, name), name


# -- autocast -------------------------------------------------------------------------------------

def test_autocast_follows_cuda_conventions():
    linear = nn.Linear(16, 8, device="neuron")
    x = torch.randn(4, 16, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = linear(x)
        assert y.dtype == torch.bfloat16  # lower precision: matrix products
        assert y.softmax(-1).dtype == torch.float32  # fp32_set_opt_dtype
        assert torch.exp(y).dtype == torch.float32  # fp32
        assert F.layer_norm(y, (8,)).dtype == torch.float32  # fp32
        assert torch.addcmul(y, x[:, :8], y).dtype == torch.float32  # promote: widest input
        assert (y + 1).dtype == torch.bfloat16 and y.float().dtype == torch.float32  # untouched
    assert linear(x).dtype == torch.float32  # outside: as the model is
    with torch.autocast("neuron"):
        assert linear(x).dtype == torch.float16  # torch's default for the device


def test_autocast_casts_a_weight_once_per_region_as_cuda_does():
    linear = nn.Linear(16, 8, device="neuron")
    x = torch.randn(4, 16, device="neuron")
    with NeuronProfiler() as prof:
        with torch.autocast("neuron", dtype=torch.bfloat16):
            linear(x)
            linear(x)  # the weight and bias: cached casts
        with torch.autocast("neuron", dtype=torch.bfloat16):
            linear(x)  # a new region casts them again
    casts = [r.input_shapes[0] for r in prof.result.records if r.name == "aten::_to_copy"]
    assert casts == [[4, 16], [8, 16], [8], [4, 16], [4, 16], [8, 16], [8]]


# -- the simulator's numbers equal meta's ----------------------------------------------------------

def _models():
    from models import ConvNet, LlamaLayer, TransformerBlock

    def llama_forward(grad_mode):
        def build(device):
            layer = LlamaLayer(512, 8, 1024).to(device, torch.bfloat16)
            x = torch.randn(1, 128, 512, dtype=torch.bfloat16, device=device)

            def step():
                with grad_mode():
                    layer(x)
            return step
        return build

    def llama_training(device):  # SiLU's backward: its own kernel on both
        layer = LlamaLayer(256, 4, 512).to(device)
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
        x = torch.randn(2, 64, 256, device=device)

        def step():
            layer(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        return step

    def block_training(device):
        block = TransformerBlock(128, 4).to(device)
        optimizer = torch.optim.AdamW(block.parameters())
        x = torch.randn(2, 32, 128, device=device)

        def step():
            block(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        return step

    def convnet_training(device):
        net = ConvNet().to(device)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(4, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (4,), device=device)

        def step():
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        return step

    def on_a_thread(device):
        a = torch.randn(256, 256, device=device)

        def step():
            with ThreadPoolExecutor(1) as pool:
                pool.submit(lambda: a @ a).result()
            a.relu()
        return step

    return {"llama_inference": llama_forward(torch.inference_mode),
            "llama_no_grad": llama_forward(torch.no_grad),
            **{f.__name__: f for f in (llama_training, block_training, convnet_training,
                                       on_a_thread)}}


def _profiled(build, device, execution):
    torch.manual_seed(0)
    step = build(device)
    with NeuronProfiler(NeuronConfig(execution=execution), keep_capture=True) as prof:
        step()
    result = prof.result
    chips = [prof.result_for("h200"), prof.result_for("trn1")]

    def numbers(r):
        memory = r.memory
        return ([(x.name, x.input_shapes, x.input_dtypes, x.flops, x.bytes_read, x.bytes_written,
                  x.device_time_us, x.module_path, x.phase, x.thread) for x in r.records],
                r.total_device_time_us,
                None if memory is None else (memory.peak_bytes, memory.resident_bytes))
    return [numbers(r) for r in (result, *chips)]


@pytest.mark.parametrize("execution", ["eager", "graph"])
@pytest.mark.parametrize("workload", list(_models()))
def test_numbers_equal_those_on_meta(workload, execution):
    build = _models()[workload]
    on_neuron = _profiled(build, "neuron", execution)
    on_meta = _profiled(build, "meta", execution)
    assert on_neuron == on_meta
    assert on_neuron[0][1] > 0 and on_neuron[0][2] is not None


def test_attention_is_the_fused_kernel_on_neuron_in_every_grad_mode():
    q = torch.randn(1, 4, 64, 32, device="neuron", requires_grad=True)
    for mode in (torch.inference_mode, torch.no_grad, contextlib.nullcontext):
        with NeuronProfiler() as prof, mode():
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        assert type(out) is NeuronTensor and out.shape == q.shape
        assert [r.name for r in prof.result.records if "attention" in r.name] == [
            "aten::_scaled_dot_product_flash_attention"], mode
    with NeuronProfiler() as prof:
        out.sum().backward()
    assert "aten::_scaled_dot_product_flash_attention_backward" in {
        r.name for r in prof.result.records}
    assert q.grad.device == NEURON and q.grad.shape == q.shape


# -- torch.compile ----------------------------------------------------------------------------------

def test_torch_compile_inside_and_outside_a_region():
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).to("neuron")
    x = torch.randn(4, 16, device="neuron")
    compiled = torch.compile(model, backend="eager")
    with NeuronProfiler() as prof:
        out = compiled(x)  # dynamo steps aside: the ops are captured and costed
    assert type(out) is NeuronTensor
    assert [r.name for r in prof.result.records] == ["aten::t", "aten::addmm", "aten::relu"]
    assert prof.result.notes == [compiled_module.other_backend_note("eager")]
    for backend in ("eager", "aot_eager", "neuron"):
        assert torch.compile(model, backend=backend)(x).device == NEURON  # outside a region


def _block_and_input():
    # no attention: AOTAutograd decomposes scaled_dot_product_attention on the neuron device
    # into its math (docs/guide/hardware-and-devices.md#torchcompile says so)
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256))
    return block.to("neuron"), torch.randn(8, 128, 256, device="neuron")


def _cost(fn, execution="eager"):
    with NeuronProfiler(NeuronConfig(execution=execution)) as prof:
        fn()
    return prof.result


def test_a_compiled_model_on_neuron_costs_its_graph_and_less_than_eager():
    """torch.compile with no backend on the device is TorchNeuron's neuron backend (as on a
    Neuron device), and its graph costs what the same graph costs under execution="graph"."""
    block, x = _block_and_input()
    fast = torch.compile(block)
    with torch.no_grad():
        assert type(fast(x)) is NeuronTensor
        eager, graph = _cost(lambda: block(x)), _cost(lambda: block(x), "graph")
        result = _cost(lambda: fast(x))
    assert [g.phase for g in result.graphs] == ["forward"]
    assert result.total_device_time_us == pytest.approx(graph.total_device_time_us, rel=1e-9)
    assert result.execution_overhead_us == graph.execution_overhead_us
    assert result.total_device_time_us < 0.5 * eager.total_device_time_us


def test_a_compiled_training_step_on_neuron_compiles_forward_and_backward():
    block, x = _block_and_input()
    fast = torch.compile(block, backend="neuron", fullgraph=True)

    grad = torch.randn(8, 128, 256, device="neuron")  # contiguous: no eager copy to make it so

    def step():
        block.zero_grad(set_to_none=True)
        fast(x).backward(grad)

    step()
    result = _cost(step)
    assert [g.phase for g in result.graphs] == ["forward", "backward"]
    assert all(p.grad.device == NEURON for p in block.parameters())
    eager = _cost(lambda: (block.zero_grad(set_to_none=True), block(x).backward(grad)))
    assert result.total_device_time_us < eager.total_device_time_us


_FLASH = "aten::_scaled_dot_product_flash_attention"
_MATH = {"aten::bmm", "aten::_safe_softmax", "aten::_softmax", "aten::baddbmm"}


def test_attention_in_a_compiled_graph_on_neuron_is_the_fused_kernel():
    """SDPA compiled with backend="neuron" is the fused kernel the device runs (as eager and
    execution="graph" cost it), not AOTAutograd's math decomposition of it: no more than the
    same block under execution="graph" (whose one graph has the same fixed cost), less than
    eager."""
    from models import Attention

    torch.manual_seed(0)
    block, x = Attention(256, 4).to("neuron"), torch.randn(4, 128, 256, device="neuron")
    fast = torch.compile(block, backend="neuron")
    with torch.no_grad():
        fast(x)
        eager, graph = _cost(lambda: block(x)), _cost(lambda: block(x), "graph")
        result = _cost(lambda: fast(x))
    names = [r.name for r in result.records]
    assert [g.phase for g in result.graphs] == ["forward"]
    assert names.count(_FLASH) == 1 and not _MATH & set(names)
    assert result.execution_overhead_us == graph.execution_overhead_us
    assert result.total_device_time_us <= graph.total_device_time_us
    assert result.total_device_time_us < 0.5 * eager.total_device_time_us
    # a training step: the fused kernel's forward and backward, each in its graph
    grad = torch.randn(4, 128, 256, device="neuron")

    def step():
        block.zero_grad(set_to_none=True)
        fast(x).backward(grad)

    step()
    trained = _cost(step)
    forward, backward = trained.graphs
    assert [r.name for r in trained.records[forward.first:forward.end]].count(_FLASH) == 1
    assert [r.name for r in trained.records[backward.first:backward.end]].count(
        _FLASH + "_backward") == 1
    assert not _MATH & {r.name for r in trained.records}


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to("neuron").eval()


def test_a_llama_with_a_kv_cache_compiles_on_neuron():
    """transformers' KV cache starts as torch.tensor([], device=...): Dynamo traced it as a
    real neuron tensor among fake ones and failed ("Dynamo meets a neuron tensor it did not
    fake"). A prefill and a decode step with the cache, compiled, as graphs."""
    model = _tiny_llama()
    fast = torch.compile(model, backend="neuron")
    ids = torch.randint(0, 128, (1, 8), device="neuron")

    def generate(m):
        out = m(input_ids=ids, use_cache=True)
        following = torch.argmax(out.logits[:, -1:], dim=-1)
        return m(input_ids=following, past_key_values=out.past_key_values, use_cache=True)

    with torch.no_grad():
        out = generate(fast)
        assert type(out.logits) is NeuronTensor and out.logits.shape == (1, 1, 128)
        assert out.past_key_values.get_seq_length() == 9
        eager, result = _cost(lambda: generate(model)), _cost(lambda: generate(fast))
    # prefill and decode: two graphs (two input shapes), each with the fused attention kernel
    assert [g.phase for g in result.graphs] == ["forward", "forward"]
    assert result.graphs[0].inputs != result.graphs[1].inputs
    names = [r.name for r in result.records]
    assert names.count(_FLASH) == 4 and not _MATH & set(names)  # 2 layers, 2 steps
    assert result.total_device_time_us < 0.2 * eager.total_device_time_us


def test_a_tensor_made_in_compiled_code_is_a_neuron_tensor_of_its_shape():
    def grow(cache, x):
        start = torch.tensor([], dtype=x.dtype, device=x.device)
        return torch.cat([cache, start, x], dim=0) * 2

    x = torch.randn(3, 4, device="neuron")
    out = torch.compile(grow, backend="neuron", fullgraph=True)(torch.randn(2, 4, device="neuron"), x)
    assert type(out) is NeuronTensor and out.shape == (5, 4)


@pytest.mark.parametrize("call", [
    lambda x: F.softmax(x, dim=-1, dtype=torch.float32), lambda x: F.softmax(x, -1, torch.float32),
    lambda x: F.log_softmax(x, -1, dtype=torch.float64), lambda x: torch.cumsum(x, 0, dtype=torch.float64),
    lambda x: x.sum(dtype=torch.float64), lambda x: x.sum(0, dtype=torch.float16),
    lambda x: x.mean(dtype=torch.float64), lambda x: torch.prod(x, 1, dtype=torch.float64),
    lambda x: torch.cumprod(x, 1, dtype=torch.float64)])
def test_autocast_with_an_explicit_dtype_runs_as_on_cpu(call):
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = call(x).dtype
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert call(x.to("neuron")).dtype == expected


# -- the docs' examples ---------------------------------------------------------------------------

def test_the_trainium_style_example_records_ops_and_memory():
    from models import TransformerBlock

    block = TransformerBlock(256, 4).to("neuron")
    x = torch.randn(8, 128, 256, device="neuron")
    with NeuronProfiler() as prof:
        F.mse_loss(block(x), torch.randn_like(x)).backward()
    result = prof.result
    assert result.memory.peak_bytes > 0 and result.total_device_time_us > 0
    assert {"forward", "backward"} <= {r.phase for r in result.records}
    assert threading.current_thread() is threading.main_thread()
