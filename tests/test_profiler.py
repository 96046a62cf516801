"""NeuronProfiler with the simulated backend: determinism, engine attribution, meta / fake
tensors, inference_mode, module paths and scopes, the torch and pandas views, and NeuronConfig."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import (
    ConfigError,
    HardwareProfileError,
    NeuronConfig,
    NeuronProfiler,
    ProfileMode,
)
from pytest_neuronprof.profiler.config import parse_core_list

# One model's source, run in this process and in a fresh interpreter by the rerun test.
MODEL_SOURCE = '''
import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, dim, device=None):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim, device=device)
        self.down = nn.Linear(4 * dim, dim, device=device)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """No SDPA: its meta-device path differs from CPU (see the SDPA tests)."""

    def __init__(self, dim=16, device=None):
        super().__init__()
        self.norm = nn.LayerNorm(dim, device=device)
        self.mlp = MLP(dim, device=device)

    def forward(self, x):
        return (x + self.mlp(self.norm(x))).softmax(-1)


def make(device="cpu", requires_grad=True):
    torch.manual_seed(0)
    return Block(device=device), torch.randn(2, 3, 16, device=device, requires_grad=requires_grad)


def train_step(model, x):
    model(x).sum().backward()
'''
_namespace: dict = {}
exec(compile(MODEL_SOURCE, "<model>", "exec"), _namespace)
make, train_step = _namespace["make"], _namespace["train_step"]

HOST_FIELDS = ("host_start_us", "cpu_time_us")


def signature(result, drop_free: bool = False) -> list[tuple]:
    """Everything about each op record except the host's wall-clock times."""
    skip = HOST_FIELDS + (("index",) if drop_free else ())
    rows = []
    for r in result.records:
        if drop_free and r.engine == "-":
            continue
        rows.append(tuple(v for k, v in vars(r).items() if k not in skip))
    return rows


def profiled(fn, **config):
    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof


# --- determinism ---------------------------------------------------------------------------------


def test_two_runs_give_identical_records():
    first = profiled(lambda: train_step(*make())).result  # model set-up included
    second = profiled(lambda: train_step(*make())).result
    assert len(first.records) > 20
    assert signature(first) == signature(second)
    assert first.total_device_time_us == second.total_device_time_us


@pytest.mark.slow  # starts a subprocess
def test_a_fresh_interpreter_gives_identical_records():
    """Nothing in the numbers depends on the process: hash seed, caches, import order."""
    script = MODEL_SOURCE + '''
import json
from pytest_neuronprof import NeuronProfiler
with NeuronProfiler() as prof:
    train_step(*make())
print(json.dumps([[r.name, r.engine, r.flops, r.bytes_read, r.bytes_written, repr(r.device_time_us),
                   r.module_path, r.phase] for r in prof.result.records]))
'''
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    prof = profiled(lambda: train_step(*make()))
    ours = [[r.name, r.engine, r.flops, r.bytes_read, r.bytes_written, repr(r.device_time_us),
             r.module_path, r.phase] for r in prof.result.records]
    assert theirs == ours


def test_work_is_hardware_independent_and_time_is_not():
    by_hw = {hw: profiled(lambda: train_step(*make()), hardware=hw).result for hw in ("trn1", "trn2", "h200")}
    work = {hw: [(r.name, r.engine, r.flops, r.bytes_read, r.bytes_written, r.module_path, r.phase)
                 for r in res.records] for hw, res in by_hw.items()}
    assert work["trn1"] == work["trn2"] == work["h200"]
    totals = {hw: res.total_device_time_us for hw, res in by_hw.items()}
    assert len(set(totals.values())) == 3


def test_device_queue_positions_are_the_sum_of_earlier_ops():
    result = profiled(lambda: train_step(*make())).result
    clock = 0.0
    for r in result.records:
        assert r.device_start_us == clock
        clock += r.device_time_us
    assert clock == result.total_device_time_us


# --- engine attribution --------------------------------------------------------------------------

A, B = torch.randn(8, 16), torch.randn(16, 8)
Q = torch.randn(1, 2, 8, 4)
TABLE, IDX = torch.randn(10, 4), torch.tensor([1, 2, 3])
BIAS, IMAGE, KERNEL = torch.randn(8), torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)

ATTRIBUTION = [
    (lambda: A @ B, "aten::mm", "Tensor"),
    (lambda: torch.addmm(BIAS, A, B), "aten::addmm", "Tensor"),
    (lambda: torch.bmm(A[None], B[None]), "aten::bmm", "Tensor"),
    (lambda: F.conv2d(IMAGE, KERNEL), "aten::convolution", "Tensor"),
    (lambda: F.scaled_dot_product_attention(Q, Q, Q), "aten::_scaled_dot_product_flash_attention", "Tensor"),
    (lambda: F.gelu(A), "aten::gelu", "Scalar"),
    (lambda: A.exp(), "aten::exp", "Scalar"),
    (lambda: A.tanh(), "aten::tanh", "Scalar"),
    (lambda: A.sigmoid(), "aten::sigmoid", "Scalar"),
    (lambda: A.relu(), "aten::relu", "Scalar"),
    (lambda: A + A, "aten::add", "Vector"),
    (lambda: A * A, "aten::mul", "Vector"),
    (lambda: A.sum(), "aten::sum", "Vector"),
    (lambda: F.layer_norm(A, (16,)), "aten::native_layer_norm", "Vector"),
    (lambda: F.embedding(IDX, TABLE), "aten::embedding", "GpSimd"),
    (lambda: TABLE.index_select(0, IDX), "aten::index_select", "GpSimd"),
    (lambda: torch.gather(TABLE, 1, IDX[:, None]), "aten::gather", "GpSimd"),
    (lambda: A.clone(), "aten::clone", "DMA"),
    (lambda: torch.cat([A, A]), "aten::cat", "DMA"),
    (lambda: A.to(torch.bfloat16), "aten::_to_copy", "DMA"),
    (lambda: A.t().contiguous(), "aten::clone", "DMA"),
]


@pytest.mark.parametrize("fn, op, engine", ATTRIBUTION, ids=[f"{op}-{i}" for i, (_, op, _) in enumerate(ATTRIBUTION)])
def test_engine_attribution(fn, op, engine):
    result = profiled(fn).result
    costed = [r for r in result.records if r.device_time_us > 0]
    assert [(r.name, r.engine) for r in costed] == [(op, engine)]
    assert costed[0].costed


VIEWS = {
    "view": lambda: A.view(4, 32),
    "t": lambda: A.t(),
    "expand": lambda: A[:1].expand(4, 16),
    "transpose": lambda: A.transpose(0, 1),
    "detach": lambda: A.detach(),
    "reshape": lambda: A.reshape(2, 64),
    "unsqueeze-squeeze": lambda: A.unsqueeze(0).squeeze(0),
    "contiguous": lambda: A.contiguous(),  # already contiguous: returns itself
}


@pytest.mark.parametrize("fn", VIEWS.values(), ids=VIEWS.keys())
def test_views_cost_no_device_time(fn):
    result = profiled(fn).result
    assert all(r.engine == "-" and r.device_time_us == 0 and r.bound == "none" for r in result.records)
    assert result.total_device_time_us == 0


def test_reshape_of_a_non_contiguous_tensor_is_a_copy():
    result = profiled(lambda: A.t().reshape(128)).result
    assert [(r.name, r.engine) for r in result.records if r.device_time_us] == [("aten::clone", "DMA")]


# --- meta tensors and FakeTensorMode -------------------------------------------------------------


def test_meta_tensors_give_the_same_numbers_as_real_ones():
    real_args, meta_args = make("cpu"), make("meta")
    real = profiled(lambda: train_step(*real_args)).result
    meta = profiled(lambda: train_step(*meta_args)).result
    assert signature(meta) == signature(real)
    # Parameter initialization on the meta device records the same ops too.
    assert signature(profiled(lambda: make("meta")).result) == signature(profiled(lambda: make("cpu")).result)
    assert {r.name for r in real.records} >= {"aten::addmm", "aten::native_layer_norm_backward", "aten::mm"}


def test_meta_tensors_make_full_size_models_cheap():
    big = nn.Linear(16384, 16384, device="meta", dtype=torch.bfloat16)
    x = torch.empty(8192, 16384, device="meta", dtype=torch.bfloat16)
    r = next(r for r in profiled(lambda: big(x)).result.records if r.name == "aten::addmm")
    assert r.flops == 2 * 8192 * 16384 * 16384
    assert r.bound == "TensorE" and r.peak_fraction > 0.9  # 4.4 PFLOP of whole tiles: near peak


def test_fake_tensor_mode_gives_the_same_numbers_as_real_runs():
    from torch._subclasses.fake_tensor import FakeTensorMode

    real_args = make("cpu")
    real = profiled(lambda: train_step(*real_args)).result
    with FakeTensorMode():
        fake_args = make("cpu")
        fake = profiled(lambda: train_step(*fake_args)).result
    assert signature(fake, drop_free=True) == signature(real, drop_free=True)
    # prim:: ops (FakeTensor's prim::device queries) are not ATen ops and are not recorded.
    assert [r.name for r in fake.records] == [r.name for r in real.records]


def test_fake_cpu_tensors_match_real_cpu_for_sdpa_under_autograd():
    from torch._subclasses.fake_tensor import FakeTensorMode

    def step(q):
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    q = torch.randn(1, 2, 8, 4, requires_grad=True)
    real = profiled(lambda: step(q)).result
    with FakeTensorMode():
        fake_q = torch.randn(1, 2, 8, 4, requires_grad=True)
        fake = profiled(lambda: step(fake_q)).result
    assert signature(fake, drop_free=True) == signature(real, drop_free=True)
    names = [r.name for r in real.records]
    assert "aten::_scaled_dot_product_flash_attention_backward" in names


FLASH = "aten::_scaled_dot_product_flash_attention"


@pytest.mark.parametrize("grad", ["grad", "no_grad", "inference_mode"])
def test_sdpa_is_one_fused_kernel_on_cpu_and_meta_in_every_grad_mode(grad):
    """torch picks SDPA's unfused math path on the meta device (bmm, an fp32 softmax and their
    backward); a device runs a fused kernel, and so does the simulation: on meta, SDPA runs as
    the flash-attention op, forward and backward, under grad, no_grad and inference_mode. Every
    fused attention op torch may pick is recorded under one name, the dispatched op kept.

    The gradients keep the layout torch gives them on each device: its CPU flash kernel returns
    them in (batch, sequence, heads, dim) layout, which AccumulateGrad copies into the leaf's
    own, where torch's SDPA on meta returns them contiguous (tests/test_capture_fidelity.py
    holds the meta run to the bare one): that copy is CPU's alone."""

    def run(device):
        q = torch.randn(2, 4, 64, 32, device=device, requires_grad=grad == "grad")
        context = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
                   "inference_mode": torch.inference_mode}[grad]

        def body():
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            if grad == "grad":
                out.sum().backward()

        with context():
            return profiled(body).result

    cpu, meta = run("cpu"), run("meta")
    layout_copy = [row for row in signature(cpu, drop_free=True) if row[0] == "aten::copy_"]
    assert len(layout_copy) == (grad == "grad")
    assert ([row for row in signature(cpu, drop_free=True) if row not in layout_copy]
            == signature(meta, drop_free=True))
    names = [r.name for r in meta.records if r.engine != "-"]
    assert names[0] == FLASH and "aten::bmm" not in names and "aten::_safe_softmax" not in names
    assert (FLASH + "_backward" in names) == (grad == "grad")
    assert meta.records[0].dispatched == "aten::_scaled_dot_product_flash_attention_for_cpu"


def test_the_fused_attention_on_meta_is_undone_when_the_profiler_stops():
    q = torch.randn(1, 2, 8, 4, device="meta", requires_grad=True)
    profiled(lambda: F.scaled_dot_product_attention(q, q, q))
    from torch.utils._python_dispatch import TorchDispatchMode

    class Names(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    with Names():
        F.scaled_dot_product_attention(q, q, q)
    assert "aten::bmm" in Names.seen  # torch's own math path again


# --- inference_mode vs no_grad -------------------------------------------------------------------


@pytest.mark.parametrize("hardware", ["trn2", "h200"])
def test_inference_mode_and_no_grad_record_the_same_ops(hardware):
    model, x = make(requires_grad=False)

    def run(ctx):
        with ctx():
            return profiled(lambda: model(x), hardware=hardware).result

    no_grad, inference = run(torch.no_grad), run(torch.inference_mode)
    names = [r.name for r in inference.records]
    # Composite ops arrive undecomposed under inference_mode; they are recorded as their parts.
    assert "aten::linear" not in names and "aten::layer_norm" not in names
    assert names.count("aten::addmm") == 2 and "aten::native_layer_norm" in names
    assert signature(inference) == signature(no_grad)


class DropoutAttention(nn.Module):
    """Eval-mode dropout around attention, as every Hugging Face layer has it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 48)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        q, k, v = self.proj(x).view(2, 3, 3, 16).unbind(1)
        y = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1))
        return self.drop(y) + F.dropout(x, 0.2, training=False)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_eval_dropout_is_free_and_every_grad_mode_records_the_same_ops(device):
    """Eager PyTorch returns the input of an eval-mode dropout (no kernel); inference_mode used
    to record an aten::clone for it, because the decomposition took torch._decomp's Python
    version (``input.clone()``) instead of the C++ kernel eager runs."""
    import torch._decomp  # noqa: F401  (registers the Python decompositions that misled it)

    model = DropoutAttention().to(device).eval()
    x = torch.randn(2, 3, 16, device=device)
    results = []
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            results.append(profiled(lambda: model(x)).result)
    no_grad, inference = results
    assert signature(no_grad) == signature(inference)
    names = [r.name for r in no_grad.records if r.engine != "-"]
    assert "aten::clone" not in names and "aten::native_dropout" not in names
    assert names == ["aten::addmm", "aten::_scaled_dot_product_flash_attention", "aten::add"]


def test_inference_mode_linear_costs_like_addmm():
    lin, x = nn.Linear(16, 8), torch.randn(4, 16)
    with torch.inference_mode():
        inference = profiled(lambda: lin(x)).result
    grad = profiled(lambda: lin(x)).result
    assert signature(inference, drop_free=True) == signature(grad, drop_free=True)
    (r,) = [r for r in inference.records if r.engine != "-"]
    assert (r.name, r.flops, r.module_path) == ("aten::addmm", 2 * 4 * 16 * 8, "Linear")


# --- module paths, scopes, phases ----------------------------------------------------------------


def test_module_paths_scopes_and_phases():
    model, x = make()

    def fn():
        with torch.profiler.record_function("step"):
            with torch.profiler.record_function("forward"):
                y = model(x)
            y.sum().backward()
        x.detach().add(1)

    result = profiled(fn).result
    where = [(r.name, r.module_path, r.scope, r.phase) for r in result.records if r.engine != "-"]
    forward = [w for w in where if w[3] == "forward"]
    assert forward[:6] == [
        ("aten::native_layer_norm", "norm", "step/forward", "forward"),
        ("aten::addmm", "mlp.up", "step/forward", "forward"),
        ("aten::gelu", "mlp", "step/forward", "forward"),  # F.gelu runs in MLP.forward
        ("aten::addmm", "mlp.down", "step/forward", "forward"),
        ("aten::add", "Block", "step/forward", "forward"),  # the root module is named by its type
        ("aten::_softmax", "Block", "step/forward", "forward"),
    ]
    assert ("aten::sum", "", "step", "forward") in where  # outside any module
    assert where[-1] == ("aten::add", "", "", "forward")  # outside any scope
    backward = [w for w in where if w[3] == "backward"]
    assert {w[0] for w in backward} >= {"aten::mm", "aten::gelu_backward", "aten::native_layer_norm_backward"}
    assert all(w[2] == "step" for w in backward)
    assert [s.name for s in result.scopes] == ["step", "forward"]
    step, fwd = result.scopes
    assert step.start_us <= fwd.start_us <= fwd.end_us <= step.end_us
    in_fwd = [r for r in result.records if r.scope == "step/forward"]
    assert all(fwd.start_us <= r.host_start_us and r.host_start_us + r.cpu_time_us <= fwd.end_us for r in in_fwd)


def test_backward_ops_carry_the_module_of_their_forward():
    """Module hooks do not run in backward: the autograd nodes at module boundaries carry the
    module, and the ops between boundaries take the last one backward passed."""
    model, x = make()
    result = profiled(lambda: model(x).sum().backward()).result
    backward = [(r.name, r.module_path) for r in result.records
                if r.phase == "backward" and r.engine != "-"]
    assert backward[:8] == [
        ("aten::_softmax_backward_data", "Block"),  # the root module is named by its type
        ("aten::mm", "mlp.down"), ("aten::mm", "mlp.down"), ("aten::sum", "mlp.down"),
        ("aten::gelu_backward", "mlp"),  # F.gelu ran in MLP.forward, between up and down
        ("aten::mm", "mlp.up"), ("aten::mm", "mlp.up"), ("aten::sum", "mlp.up"),
    ]
    assert backward[8] == ("aten::native_layer_norm_backward", "norm")


def test_a_shared_child_called_twice_keeps_its_path_and_a_direct_call_is_a_root():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x)))

    model, x = Twice(), torch.randn(2, 4)
    result = profiled(lambda: (model(x), model.lin(x))).result
    where = [(r.name, r.module_path) for r in result.records if r.engine != "-"]
    assert where == [("aten::addmm", "lin"), ("aten::relu", "Twice"), ("aten::addmm", "lin"),
                     ("aten::addmm", "Linear")]  # called directly, the child is a root


# --- torch's key_averages table ------------------------------------------------------------------


def test_key_averages_table_has_neuron_columns_that_add_up():
    prof = profiled(lambda: train_step(*make()))
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=100)
    header = table.splitlines()[1]
    assert "Self NEURON" in header and "NEURON total" in header
    total = float(re.search(r"Self NEURON time total: ([\d.]+)us", table).group(1))
    assert total == pytest.approx(prof.total_device_time_us, abs=5e-4)  # printed to 3 decimals
    # Device kernels (one row per engine::op) carry the whole device time, once each.
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert sum(e.device_time_total for e in kernels) == pytest.approx(prof.total_device_time_us, rel=1e-12)
    assert {e.key for e in kernels} >= {"Tensor::aten::addmm", "Vector::aten::native_layer_norm"}
    by_key = {e.key: e for e in prof.key_averages()}
    mm = [r for r in prof.result.records if r.name == "aten::mm"]
    assert by_key["aten::mm"].count == len(mm) == 4
    assert by_key["aten::mm"].self_device_time_total == pytest.approx(sum(r.device_time_us for r in mm))


def test_record_function_rows_include_their_ops_device_time():
    model, x = make(requires_grad=False)

    def fn():
        with torch.profiler.record_function("fwd"):
            model(x)

    prof = profiled(fn)
    fwd = next(e for e in prof.key_averages() if e.key == "fwd")
    assert fwd.device_time_total == pytest.approx(prof.total_device_time_us)
    assert fwd.self_device_time_total == 0


def test_no_device_columns_without_correlation():
    prof = profiled(lambda: train_step(*make()), correlate_device_time=False)
    table = prof.key_averages().table(sort_by="self_cpu_time_total")
    assert "NEURON" not in table
    assert "aten::addmm" in table
    assert prof.total_device_time_us > 0  # the records still have device time


def test_group_by_input_shapes():
    prof = profiled(lambda: (A @ B, A.t() @ A))
    rows = {(e.key, e.input_shapes.__repr__()) for e in prof.key_averages(group_by_input_shapes=True)
            if e.key == "aten::mm"}
    assert rows == {("aten::mm", "[[8, 16], [16, 8]]"), ("aten::mm", "[[16, 8], [8, 16]]")}


# --- pandas ---------------------------------------------------------------------------------------


def test_to_dataframe_columns_and_counts():
    prof = profiled(lambda: train_step(*make()))
    frame = prof.to_dataframe()
    assert {"name", "count", "engine", "flops", "bytes", "device_time_us", "cpu_time_us"} <= set(frame.columns)
    rows = frame.set_index("name")
    records = prof.result.records
    for name in ("aten::addmm", "aten::mm", "aten::t", "aten::sum"):
        mine = [r for r in records if r.name == name]
        assert rows.loc[name, "count"] == len(mine)
        assert rows.loc[name, "flops"] == sum(r.flops for r in mine)
        assert rows.loc[name, "bytes"] == sum(r.bytes for r in mine)
    assert (rows.loc["aten::mm", "count"], rows.loc["aten::addmm", "count"]) == (4, 2)
    assert rows.loc["aten::addmm", "engine"] == "Tensor"
    assert frame["count"].sum() == len(records)
    assert frame["device_time_us"].sum() == pytest.approx(prof.total_device_time_us)
    assert list(frame["device_time_us"]) == sorted(frame["device_time_us"], reverse=True)
    assert frame["share"].sum() == pytest.approx(1.0)


def test_to_dataframe_by_engine():
    prof = profiled(lambda: train_step(*make()))
    frame = prof.to_dataframe(by="engine").set_index("engine")
    for engine in ("Tensor", "Vector", "Scalar", "-"):
        assert frame.loc[engine, "count"] == sum(1 for r in prof.result.records if r.engine == engine)
    assert frame.loc["-", "device_time_us"] == 0


def test_an_empty_region():
    prof = profiled(lambda: None)
    assert prof.result.records == []
    assert prof.total_device_time_us == 0
    assert prof.to_dataframe().empty
    assert prof.result.uncosted_ops == []


# --- lifecycle -----------------------------------------------------------------------------------


def test_start_stop_and_misuse():
    prof = NeuronProfiler()
    with pytest.raises(RuntimeError, match="not started"):
        prof.result
    with pytest.raises(RuntimeError, match="not running"):
        prof.stop()
    prof.start()
    with pytest.raises(RuntimeError, match="already running"):
        prof.start()
    A + A
    with pytest.raises(RuntimeError, match="still running"):
        prof.result
    result = prof.stop()
    assert [r.name for r in result.records] == ["aten::add"]
    prof.start()  # a profiler can be reused; each run starts empty
    A * A
    assert [r.name for r in prof.stop().records] == ["aten::mul"]


def test_an_exception_in_the_region_stops_capture():
    from torch.nn.modules import module as nn_module

    hooks = len(nn_module._global_forward_hooks), len(nn_module._global_forward_pre_hooks)
    prof = NeuronProfiler()
    with pytest.raises(ZeroDivisionError):
        with prof:
            A + A
            1 / 0
    A * A  # after the region: not captured
    assert [r.name for r in prof.result.records] == ["aten::add"]
    assert (len(nn_module._global_forward_hooks), len(nn_module._global_forward_pre_hooks)) == hooks


def test_the_first_listed_core_runs_the_region():
    prof = profiled(lambda: A + A, capture_enabled_for_nc="3,5-6", hardware="trn2-lnc1")
    assert prof.result.core == 3
    assert prof.config.target_cores == (3, 5, 6)


# --- NeuronConfig ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, cores", [
    ("0", (0,)),
    ("0,1,2-5", (0, 1, 2, 3, 4, 5)),
    ("0, 2-3", (0, 2, 3)),
    ("5,1,1,0-1", (0, 1, 5)),
    ("4-4", (4,)),
    (7, (7,)),
])
def test_core_list_syntax(spec, cores):
    assert parse_core_list(spec) == cores


@pytest.mark.parametrize("spec, hint", [
    ("", "empty"),
    ("a", "'a' is not a core id"),
    ("0,,1", "'' is not a core id"),
    ("1-", "'1-' is not a core id"),
    ("1-2-3", "is not a core id"),
    ("3-1", "must be non-negative and ascending"),
    ("-1", "is not a core id"),
])
def test_bad_core_lists_raise_config_error(spec, hint):
    with pytest.raises(ConfigError) as info:
        NeuronConfig(capture_enabled_for_nc=spec)
    message = str(info.value)
    assert "capture_enabled_for_nc" in message
    assert hint in message
    assert "'0'" in message or "'2-5'" in message  # says what a valid spec looks like


def test_unknown_mode_names_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown mode 'kernel'; valid: device, runtime"):
        NeuronConfig(modes=["device", "kernel"])
    with pytest.raises(ConfigError, match="empty"):
        NeuronConfig(modes=[])


def test_modes_accept_strings_enums_and_a_lone_mode():
    assert NeuronConfig(modes=["runtime", ProfileMode.DEVICE, "device"]).modes == (ProfileMode.RUNTIME, ProfileMode.DEVICE)
    # Regression: a lone mode was iterated character by character ("unknown mode 'd'").
    assert NeuronConfig(modes=ProfileMode.DEVICE).modes == (ProfileMode.DEVICE,)
    assert NeuronConfig(modes="runtime").modes == (ProfileMode.RUNTIME,)


def test_unknown_hardware_raises_naming_the_choices():
    with pytest.raises(HardwareProfileError) as info:
        NeuronProfiler(NeuronConfig(hardware="trn4"))
    assert "'trn4'" in str(info.value)
    assert all(name in str(info.value) for name in ("trn1", "trn2", "trn3", "inf2", "h200"))
    assert isinstance(info.value, ConfigError)
    with pytest.raises(ConfigError):
        NeuronConfig(hardware="")


@pytest.mark.parametrize("hardware, spec, bad", [("trn2-lnc1", "0-8", "[8]"), ("trn2", "0-4", "[4]"), ("trn1", "1,2,3", "[2, 3]"),
                                                  ("h200", "1", "[1]")])
def test_a_core_beyond_the_chip_raises(hardware, spec, bad):
    with pytest.raises(ConfigError) as info:
        NeuronProfiler(NeuronConfig(capture_enabled_for_nc=spec, hardware=hardware))
    assert bad in str(info.value) and hardware in str(info.value)


def test_the_last_core_of_a_chip_is_accepted():
    assert NeuronProfiler(NeuronConfig(capture_enabled_for_nc="0-7", hardware="trn2-lnc1")).config.target_cores == tuple(range(8))
    # LNC=2 (trn2): two physical cores make one logical core, four per chip
    assert NeuronProfiler(NeuronConfig(capture_enabled_for_nc="0-3", hardware="trn2")).config.target_cores == tuple(range(4))


def test_unknown_backend_raises():
    with pytest.raises(ConfigError, match="unknown backend 'quantum'; valid choices: simulated"):
        NeuronProfiler(backend="quantum")
