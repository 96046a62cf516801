"""A simulated ``neuron`` device: code written for Trainium (``model.to("neuron")``,
``torch.randn(..., device="neuron")``) runs unchanged under the simulated backend.

TorchNeuron is a PrivateUse1 backend renamed ``neuron``. ``enable()`` does the same with torch's
Python backend hooks (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``:
the rename, a device module ``torch.neuron``, backend hooks and a device guard, so that
``torch.accelerator``, autograd and ``DataLoader(pin_memory=True)`` find a device), for the rest
of the process: a PrivateUse1 backend cannot be renamed twice, so there is no ``disable()``.

A tensor on the device is a ``NeuronTensor``: a meta tensor underneath (its storage is a meta
storage of the real size, without memory), whose dispatch keys are PrivateUse1's (autograd and
autocast take the device's paths) and whose ``device`` reads ``neuron:0``. Every op on it runs
torch's meta kernel (FakeTensor's mechanism: Python dispatch off, Meta included in the
dispatcher's thread-local keys), so shapes, dtypes and strides are exact and nothing is
allocated or computed; outputs are the meta kernel's, re-wrapped. Views and in-place ops keep
sharing their storage, so the simulated backend sees each storage made, aliased and freed as
on meta (dataflow.py), and the numbers of a test on ``neuron`` equal those of the same test on
``meta``. Reading a value raises ``ValueReadError`` naming the line (value_reads.py).

Where ops come from:

* an op with a neuron tensor among its arguments reaches ``NeuronTensor.__torch_dispatch__``
  (after autograd, autocast and any dispatch mode above it: the simulated backend's capture
  sees it first, as it sees an op on meta);
* a factory with ``device="neuron"`` (``torch.empty``, ``torch.randn``, ``nn.Linear(...,
  device="neuron")``), and ``.to("neuron")`` of a cpu or meta tensor (whose kernel allocates
  with ``empty_strided``), reach the PrivateUse1 backend. The device has a kernel there for
  every op that has a meta kernel (backend_ops), which runs it on meta and wraps what it makes:
  so the dispatcher chooses the same kernels for neuron as for meta (``silu_backward``'s own,
  not its composite), and the capture's per-backend decisions agree. One Python fallback for
  the whole key would be simpler, but torch cannot run a Python fallback while a dispatch mode
  is active or for a tensor with Python dispatch keys (an internal assert in
  torch/csrc/utils/python_dispatch.cpp, torch 2.13): a factory inside a profiled region, and
  ``torch.tensor(..., device="neuron")``, hit it.

Scaled dot-product attention is the simulated backend's to decide (attention.py): it runs as the
fused kernel on tensors without values, meta or neuron (``has_no_values``).

``.cpu()`` / ``.to("cpu")`` of a neuron tensor gives a **meta** tensor of the same shape, dtype
and strides (a device-to-host copy happens, and is costed as the copy it is; its values do not
exist, and reading them raises as on meta); copying a neuron tensor into an existing cpu tensor
(``cpu_t.copy_(x)``) raises ValueReadError, since the cpu tensor would keep stale values.

What ``enable()`` changes in torch, besides the rename and the kernels: ``torch.neuron`` (the
device module: PROVIDED, not NOT_PROVIDED), a CPU kernel of ``_pin_memory`` for the neuron
device (DataLoader's pinning thread), ``torch.clear_autocast_cache`` (which also empties the
device's cache of cast weights), torch.accelerator's functions that need an allocator or a
synchronizing guard (ACCELERATOR_NO_OPS, ACCELERATOR_REFUSED), dynamo's skip of the device's
own dispatch code (_skip_dynamo), and autograd's device threads, off for the thread that calls
``enable()`` (``torch.autograd.set_multithreading_enabled(False)``): backward runs on the
calling thread, as on meta, wherever the process ran a backward before.

``torch.autocast("neuron", dtype=...)`` casts as CUDA's autocast does (TorchNeuron's documented
convention: "automatic datatype conversion following PyTorch CUDA conventions",
aws-neuron/aws-neuron-sdk frameworks/torch/pytorch-native-overview.rst): CUDA's op lists of
torch 2.13 (aten/src/ATen/autocast_mode.h), registered for the AutocastPrivateUse1 key, with
CUDA's cache of cast weights for the autocast region.
"""

from __future__ import annotations

import threading
import types
import warnings
import weakref
from typing import Any, Callable

import torch

from ..errors import ConfigError
from ..vocabulary import SIMULATED
from .value_reads import meta_read, value_read_error

NAME = "neuron"
_DEVICE = torch.device("meta")  # replaced by neuron:0 at enable()
_META = torch.device("meta")
_Tensor = torch.Tensor
_DispatchKey = torch._C.DispatchKey


class NeuronDeviceError(ConfigError):
    """The simulated neuron device cannot be turned on in this process (torch without the
    Python backend hooks, or a PrivateUse1 backend already registered)."""


# -- what torch must have ----------------------------------------------------------------------

# The pieces of torch the device is built from. The Python backend hooks (torch._C._acc,
# _setup_privateuseone_for_python_backend) came with pytorch/pytorch#157859, still in review
# after 2.9's branch cut (2025-09-10): torch 2.10 is the first release that can have them. They
# are looked for, not inferred from the version number.
REQUIRED = (
    ("torch.utils.backend_registration._setup_privateuseone_for_python_backend",
     lambda: torch.utils.backend_registration._setup_privateuseone_for_python_backend),
    ("torch._C._acc.PrivateUse1Hooks", lambda: torch._C._acc.PrivateUse1Hooks),
    ("torch._C._acc.DeviceGuard", lambda: torch._C._acc.DeviceGuard),
    ("torch._C._set_meta_in_tls_dispatch_include", lambda: torch._C._set_meta_in_tls_dispatch_include),
)
FIRST_TORCH = "2.10"


def missing_pieces() -> list[str]:
    """The names in REQUIRED this torch does not have."""
    missing = []
    for name, get in REQUIRED:
        try:
            get()
        except AttributeError:
            missing.append(name)
    return missing


def unavailable_reason() -> str | None:
    """Why enable() would fail here; None when it can run (or has run)."""
    if _state.enabled:
        return None
    missing = missing_pieces()
    if missing:
        return (f"the simulated neuron device needs torch's Python backend hooks ({', '.join(missing)}), "
                f"which torch {torch.__version__} does not have: they came after torch 2.9 "
                f"(torch>={FIRST_TORCH}); upgrade torch, or leave the option off and build models "
                "on cpu or meta")
    taken = torch._C._get_privateuse1_backend_name()
    if taken != "privateuseone":
        real = " (TorchNeuron is installed: run on its real device, or with --neuron-backend neuron)" \
            if taken == NAME else ""
        return (f"a PrivateUse1 backend is registered already as {taken!r}{real}; the simulated "
                "neuron device would replace it, which torch cannot do in a process: leave "
                "--neuron-device-alias off")
    return None


# -- the tensor ----------------------------------------------------------------------------------

_make_subclass = _Tensor._make_subclass
_meta_in_tls = torch._C._meta_in_tls_dispatch_include
_set_meta_in_tls = torch._C._set_meta_in_tls_dispatch_include
_NoPythonDispatch = torch._C._DisableTorchDispatch
_PreserveKeys = torch._C._PreserveDispatchKeyGuard
_PRIM_DEVICE = torch.ops.prim.device.default


def _wrap(tensor: Any) -> Any:
    """A meta tensor (a kernel's output) as a neuron tensor sharing its storage; anything else
    as it is. Runs inside _on_meta (its detach must not reach Python dispatch)."""
    if type(tensor) is NeuronTensor or not isinstance(tensor, _Tensor):
        return tensor
    if tensor.device.type != "meta":
        return tensor
    return _make_subclass(NeuronTensor, tensor, False, dispatch_device=True,
                          device_for_backend_keys=_DEVICE)


def _wrap_all(out: Any) -> Any:
    if isinstance(out, _Tensor):
        return _wrap(out)
    if type(out) in (tuple, list):
        return type(out)(_wrap(t) if isinstance(t, _Tensor) else t for t in out)
    return out


def _on_meta(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """Run ``func`` with torch's meta kernels (neuron tensors read as meta inside) and wrap
    what it makes as neuron tensors. A value read it runs into raises ValueReadError."""
    __tracebackhide__ = True
    with _NoPythonDispatch(), _PreserveKeys():
        _set_meta_in_tls(True)
        try:
            return _wrap_all(func(*args, **kwargs))
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            raise _renamed(exc) from None


def _renamed(exc: BaseException) -> BaseException:
    """torch's error for a value read on meta, said of the neuron device (ValueReadError,
    naming the line); any other error as it is."""
    what = meta_read(exc)
    return exc if what is None else value_read_error(what, NAME)


def _neuron_target(value: Any) -> bool:
    """``value`` (a device argument) names the neuron device; its one core, or an error."""
    if value is None:
        return False
    device = torch.device(value)
    if device.type != NAME:
        return False
    if device.index not in (None, 0):
        raise RuntimeError(f"the simulated neuron device has one NeuronCore, neuron:0 (asked for "
                           f"{device}); profiles of several cores: NeuronConfig("
                           "capture_enabled_for_nc=...) and --neuron-hardware")
    return True


def _to_copy(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``.to(...)`` of a neuron tensor: to neuron (or a dtype), a neuron tensor; to meta or any
    other device (``.cpu()``), a meta tensor: the values never existed."""
    device = kwargs.get("device")
    if device is None or _neuron_target(device):
        return _on_meta(func, args, {k: v for k, v in kwargs.items() if k != "device"})
    with _NoPythonDispatch(), _PreserveKeys():
        _set_meta_in_tls(True)
        return func(*args, **{k: v for k, v in kwargs.items() if k not in ("device", "pin_memory")})


def _copy_(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    destination = args[0]
    if type(destination) is not NeuronTensor and destination.device.type != "meta":
        raise value_read_error(f"the values (copy_ into a {destination.device.type} tensor)", NAME)
    return _on_meta(func, args, kwargs)


def _item(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    raise value_read_error("a value (.item(), bool(), int(), float())", NAME)


def _equal(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    raise value_read_error("the values (torch.equal)", NAME)


def _lift(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``torch.tensor(data, device="neuron")`` lifts the neuron tensor it made (``lift_fresh``)
    to give modes their turn. A fake tensor mode (Dynamo tracing a function that makes one:
    transformers' KV cache starts as ``torch.tensor([], device=...)``) steps aside for a tensor
    type it does not know, and the neuron tensor itself would have come back into the trace
    as a real tensor among fake ones ("Dynamo meets a neuron tensor it did not fake"): under
    one, the lift is the fake of it, as a cpu tensor's lift is."""
    __tracebackhide__ = True
    fake_mode = torch._C._get_dispatch_mode(_FAKE_MODE_KEY)
    if fake_mode is not None and len(args) == 1 and type(args[0]) is NeuronTensor:
        return fake_mode.fake_tensor_converter.from_real_tensor(fake_mode, args[0])
    return _on_meta(func, args, kwargs)


_aten = torch.ops.aten
_FAKE_MODE_KEY = torch._C._TorchDispatchModeKey.FAKE
# Ops a neuron tensor handles itself instead of running their meta kernel.
_SPECIAL: dict[Any, Callable[[Any, Any, dict[str, Any]], Any]] = {
    _aten._to_copy.default: _to_copy,
    _aten.copy_.default: _copy_,
    _aten._local_scalar_dense.default: _item,
    _aten.equal.default: _equal,
    _aten.lift_fresh.default: _lift,
    _aten.lift_fresh_copy.default: _lift,
}


def _refused(what: str) -> Any:
    """A tensor method that reads ``what``: it raises ValueReadError naming the caller's line."""
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # the error points at the line that read
        raise value_read_error(what, NAME)
    return read


class NeuronTensor(_Tensor):
    """A tensor of the simulated neuron device: a meta tensor that reads ``neuron:0`` as its
    device and dispatches as a PrivateUse1 tensor (see the module). Shapes, dtypes and strides,
    no values."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
        __tracebackhide__ = True
        if func is _PRIM_DEVICE:  # a device query: meta while a meta kernel runs, else neuron
            return _META if _meta_in_tls() else _DEVICE
        special = _SPECIAL.get(func)
        if special is not None:
            return special(func, args, kwargs or {})
        # _on_meta inline: the hot path of every op on the device
        with _NoPythonDispatch(), _PreserveKeys():
            _set_meta_in_tls(True)
            try:
                out = func(*args, **kwargs) if kwargs else func(*args)
            except (RuntimeError, NotImplementedError, TypeError) as exc:
                raise _renamed(exc) from None
            if type(out) is NeuronTensor:  # in place: the tensor itself
                return out
            return _wrap_all(out)

    # Value reads, each named after what the code called (_refused makes them).
    item = _refused("a value (.item())")
    tolist = _refused("the values (.tolist())")
    numpy = _refused("the values (.numpy())")
    __array__ = _refused("the values (numpy.asarray)")
    __bool__ = _refused("a value (bool(), as an if or while does)")
    __int__ = _refused("a value (int())")
    __float__ = _refused("a value (float())")
    __index__ = _refused("a value (as an index)")
    __str__ = _refused("the values (print() or str())")
    __format__ = _refused("the values (format() or an f-string)")

    def __coerce_same_metadata_as_tangent__(self, expected_metadata: Any,
                                            expected_type: Any = None) -> "NeuronTensor":
        """A compiled backward (AOTAutograd) expects its incoming gradient to be the type its
        trace saw, a plain tensor of the neuron device (Dynamo's fake of it): a neuron tensor is
        one, with no metadata of a subclass of its own to convert."""
        return self

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        """As torch shows a meta tensor: no values, the device, shape and dtype (for debuggers
        and pytest's assertion messages; print() is a value read)."""
        parts = [f"device='{self.device}'", f"size={tuple(self.shape)}"]
        if self.dtype != torch.get_default_dtype():
            parts.append(f"dtype={self.dtype}")
        if self.grad_fn is not None:
            parts.append(f"grad_fn=<{type(self.grad_fn).__name__}>")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        return f"tensor(..., {', '.join(parts)})"


# -- the PrivateUse1 backend: factories and .to("neuron") ---------------------------------------

def _dispatch(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """An op on neuron tensors: its handler (_SPECIAL) or its meta kernel, wrapped."""
    __tracebackhide__ = True
    special = _SPECIAL.get(func)
    if special is not None:
        return special(func, args, kwargs)
    return _on_meta(func, args, kwargs)


def _backend_kernel(name: str) -> Callable[..., Any]:
    """The PrivateUse1 kernel of the op ``name`` ("aten::add.Tensor"), one with a meta kernel:
    what reaches the backend (factories with device="neuron", the allocation of
    ``.to("neuron")``, ops on neuron tensors with Python dispatch off) runs on meta, wrapped.
    So the neuron device has a kernel exactly where meta has one, and the dispatcher picks
    the same kernels for both (silu_backward's own, not its composite)."""
    found: list[Any] = []

    def kernel(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if not found:
            packet, _, overload = name[len("aten::"):].partition(".")
            found.append(getattr(getattr(_aten, packet), overload or "default"))
        if kwargs.get("device") is not None:
            _neuron_target(kwargs["device"])  # its one core, or an error
            kwargs["device"] = _META
        return _dispatch(found[0], args, kwargs)
    return kernel


def backend_ops() -> list[str]:
    """The aten ops the neuron device has a kernel for: those with a meta kernel."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted(n for n in torch._C._dispatch_get_all_op_names()
                  if n.startswith("aten::") and has(n, "Meta") and not has(n, "PrivateUse1"))


def _copy_from(source: Any, destination: Any, non_blocking: bool = False) -> Any:
    """``destination.copy_(source)`` at the backend (``_copy_from``: its device-to-device
    part): into a neuron tensor, nothing to do (no values); out of one, a value read."""
    __tracebackhide__ = True
    if type(destination) is not NeuronTensor:
        raise value_read_error(f"the values (a copy into a {destination.device.type} tensor)", NAME)
    return destination


def _pin_memory(tensor: Any, device: Any = None) -> Any:
    """``pin_memory()`` of a cpu tensor while the neuron device is the accelerator (what
    ``DataLoader(pin_memory=True)`` does): a copy in ordinary host memory. Pinned memory is
    what a real backend's allocator gives, which a Python backend cannot register; the
    simulation does not time host transfers, so nothing changes but ``is_pinned()`` (False)."""
    if device is not None and torch.device(device).type not in (NAME, "privateuseone"):
        return _aten._pin_memory.default._op_dk(_DispatchKey.CompositeExplicitAutograd, tensor,
                                                 device)
    return tensor.clone()


# -- autocast("neuron"): CUDA's conventions ------------------------------------------------------

# CUDA's op lists, aten/src/ATen/autocast_mode.h of torch 2.13 (AT_FORALL_LOWER_PRECISION_FP,
# AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE; norm's fp32_append_dtype
# overloads are left out: they are deprecated and need a different overload to redispatch to).
LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution",
    "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention")
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa")
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList")
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
           "index_put", "tensordot", "scatter_add")

_AUTOCAST_KEY = torch._C.DispatchKeySet(getattr(_DispatchKey, "AutocastPrivateUse1"))
_no_autocast = torch._C._ExcludeDispatchKeyGuard
# CUDA's cache of cast weights (at::autocast::cached_cast): the cast of a float32 leaf that
# needs a gradient is made once per autocast region. id(tensor) -> (weak reference, its cast).
_CAST_CACHE: dict[int, tuple[weakref.ref, Any]] = {}


def _eligible(value: Any) -> bool:
    return (isinstance(value, _Tensor) and value.dtype.is_floating_point
            and value.dtype is not torch.float64 and value.device.type == NAME)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    if not _eligible(value) or value.dtype == dtype:
        return value
    if (dtype == torch.get_autocast_dtype(NAME) and value.dtype is torch.float32
            and value.requires_grad and value.is_leaf and value._base is None
            and torch.is_autocast_cache_enabled()):
        cached = _CAST_CACHE.get(id(value))
        if cached is not None and cached[0]() is value:
            return cached[1]
        cast = value.to(dtype)
        _CAST_CACHE[id(value)] = (weakref.ref(value), cast)
        return cast
    return value.to(dtype)


def _promoted(args: Any, kwargs: dict[str, Any]) -> torch.dtype:
    """The widest floating dtype among the eligible tensors (autocast's promote_type)."""
    dtype = torch.get_autocast_dtype(NAME)
    for value in [*args, *kwargs.values()]:
        for tensor in (value if isinstance(value, (list, tuple)) else (value,)):
            if _eligible(tensor) and tensor.dtype is torch.float32:
                return torch.float32
    return dtype


def _dtype_given(op: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a call of ``op`` names its ``dtype``: by keyword, or by position where the schema
    lets it (``F.softmax(x, -1, dtype=torch.float32)`` reaches ``softmax.int`` as a third
    positional argument, where adding the keyword made four)."""
    if kwargs.get("dtype") is not None:
        return True
    for position, argument in enumerate(op._schema.arguments):
        if argument.name == "dtype":
            return not argument.kwarg_only and position < len(args) and args[position] is not None
    return False


def _autocast_kernel(op: Any, policy: str) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with _no_autocast(_AUTOCAST_KEY):
            if policy == "lower":
                dtype = torch.get_autocast_dtype(NAME)
            elif policy == "fp32":
                dtype = torch.float32
            elif policy == "promote":
                dtype = _promoted(args, kwargs)
            else:  # fp32_set_opt_dtype: the output's dtype, unless one is given
                if args and _eligible(args[0]) and not _dtype_given(op, args, kwargs):
                    kwargs = {**kwargs, "dtype": torch.float32}
                return op(*args, **kwargs)
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})
    return kernel


def _clear_cast_cache_too(clear: Callable[[], None]) -> Callable[[], None]:
    def clear_autocast_cache() -> None:
        clear()
        _CAST_CACHE.clear()
    clear_autocast_cache.__doc__ = clear.__doc__
    clear_autocast_cache.__wrapped__ = clear  # type: ignore[attr-defined]
    return clear_autocast_cache


# -- torch.neuron --------------------------------------------------------------------------------

PROVIDED = ("is_available", "is_initialized", "device_count", "current_device", "set_device",
            "device", "synchronize", "manual_seed", "manual_seed_all", "seed", "seed_all",
            "initial_seed", "get_amp_supported_dtype", "is_bf16_supported", "empty_cache")
NOT_PROVIDED = ("memory_allocated", "max_memory_allocated", "memory_stats", "Stream", "Event",
                "current_stream", "get_rng_state", "set_rng_state")


def _device_module() -> types.ModuleType:
    """``torch.neuron``: what torch and device-generic code ask a device module (PROVIDED);
    the rest (NOT_PROVIDED: memory statistics, streams, events, RNG state) raises
    AttributeError, as a missing function of a device module does."""
    module = types.ModuleType("torch.neuron", "The simulated neuron device "
                              "(pytest-neuronprof --neuron-device-alias): one NeuronCore, neuron:0.")
    seed = {"value": 0}

    def check_index(device: Any) -> int:
        index = device.index if isinstance(device, torch.device) else device
        index = 0 if index is None else int(index)
        if index != 0:
            raise RuntimeError(f"the simulated neuron device has one NeuronCore, neuron:0 "
                               f"(asked for {index})")
        return 0

    class device:  # noqa: N801 - torch.cuda.device's name
        def __init__(self, index: Any) -> None:
            check_index(index)

        def __enter__(self) -> "device":
            return self

        def __exit__(self, *exc: Any) -> None:
            return None

    def manual_seed(value: int) -> None:
        seed["value"] = int(value)

    functions: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_is_in_bad_fork": lambda: False,
        "_lazy_init": lambda: None,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": check_index,
        "device": device,
        "synchronize": lambda device=None: None,  # nothing runs: nothing to wait for
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "initial_seed": lambda: seed["value"],
        "get_amp_supported_dtype": lambda: [torch.float16, torch.bfloat16],
        "is_bf16_supported": lambda *args, **kwargs: True,
        "empty_cache": lambda: None,
    }
    for name, value in functions.items():
        setattr(module, name, value)
    return module


class _Hooks(torch._C._acc.PrivateUse1Hooks if hasattr(torch._C, "_acc") else object):  # type: ignore[misc]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard if hasattr(torch._C, "_acc") else object):  # type: ignore[misc]
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


# -- torch.accelerator ---------------------------------------------------------------------------

# torch.accelerator's functions that need what a Python backend cannot register (a device
# guard's synchronizeDevice, a caching allocator, device capabilities; torch 2.13): with the
# neuron device as the accelerator, synchronize and empty_cache do nothing (nothing runs, nothing
# is cached) and the memory statistics raise an error that says where the simulation's memory
# is. Everything else (is_available, current_accelerator, device_count, the device index,
# streams, events) works as torch has it.
ACCELERATOR_NO_OPS = ("synchronize", "empty_cache", "empty_host_cache")
ACCELERATOR_REFUSED = ("memory_allocated", "max_memory_allocated", "memory_reserved",
                       "max_memory_reserved", "memory_stats", "reset_peak_memory_stats",
                       "reset_accumulated_memory_stats", "get_memory_info",
                       "get_device_capability")


def _on_neuron(device: Any) -> bool:
    if device is None:
        return torch._C._get_accelerator().type == NAME
    if isinstance(device, int):
        return torch._C._get_accelerator().type == NAME
    return torch.device(device).type == NAME


def _accelerator_function(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def function(device: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not _on_neuron(device):
            return original(device, *args, **kwargs)
        if name in ACCELERATOR_NO_OPS:
            return None
        raise NeuronDeviceError(
            f"torch.accelerator.{name}(): the simulated neuron device (--neuron-device-alias) "
            "has no allocator to ask: nothing is allocated. The profile tracks device memory "
            "(neuron_profile.result.memory: peak, resident bytes and what makes up the peak)")
    function.__name__ = name
    function.__doc__ = original.__doc__
    function.__wrapped__ = original  # type: ignore[attr-defined]
    return function


def _patch_accelerator() -> None:
    accelerator = torch.accelerator
    for name in (*ACCELERATOR_NO_OPS, *ACCELERATOR_REFUSED):
        original = getattr(accelerator, name, None)
        if original is not None:
            setattr(accelerator, name, _accelerator_function(name, original))


# -- torch.compile -----------------------------------------------------------------------------

def _skip_dynamo(*codes: types.CodeType) -> None:
    """Tell dynamo never to compile these frames or what they call (as simulated.py does for
    its capture): without it, a torch.compile'd model called on neuron tensors outside a
    profiled region had dynamo compile the device's own dispatch code as frames of their own,
    and fail there (FakeTensor refuses to be made with Python dispatch off)."""
    try:
        from torch._C._dynamo.eval_frame import (_FrameAction, _FrameExecStrategy,
                                                 set_code_exec_strategy)
    except ImportError:  # a torch without dynamo's C part: nothing can compile them
        return
    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    for code in codes:
        set_code_exec_strategy(code, skip)


# -- turning it on -------------------------------------------------------------------------------

class _State:
    enabled = False
    libraries: list[Any] = []
    lock = threading.Lock()


_state = _State()


def is_enabled() -> bool:
    return _state.enabled


def enable() -> None:
    """Turn the simulated neuron device on for the rest of the process (idempotent). Raises
    NeuronDeviceError where it cannot be (unavailable_reason)."""
    global _DEVICE
    with _state.lock:
        if _state.enabled:
            return
        reason = unavailable_reason()
        if reason is not None:
            raise NeuronDeviceError(f"--neuron-device-alias: {reason}")
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        _setup_privateuseone_for_python_backend(rename=NAME, backend_module=_device_module(),
                                                hook=_Hooks(), device_guard=_Guard())
        _DEVICE = torch.device(NAME, 0)
        # One kernel per op, not one Python fallback for the key: torch runs a Python fallback
        # only when no dispatch mode is active and no argument has Python dispatch keys (an
        # internal assert in torch/csrc/utils/python_dispatch.cpp otherwise, torch 2.13), and
        # both happen here (a factory inside a profiled region, torch.tensor(..., device=
        # "neuron") copying into a neuron tensor with Python dispatch off).
        aten = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in backend_ops():
                aten.impl(name[len("aten::"):], _backend_kernel(name), "PrivateUse1")
            aten.impl("_copy_from", _copy_from, "PrivateUse1")
            aten.impl("_copy_from_and_resize", _copy_from, "PrivateUse1")
            aten.impl("_pin_memory", _pin_memory, "CPU")
            for names, policy in ((LOWER_PRECISION_FP, "lower"), (FP32, "fp32"),
                                  (FP32_SET_OPT_DTYPE, "set_opt_dtype"), (PROMOTE, "promote")):
                for name in names:
                    op_name, _, overload = name.partition(".")
                    packet = getattr(_aten, op_name, None)
                    op = getattr(packet, overload or "default", None) if packet is not None else None
                    if op is not None:
                        aten.impl(name, _autocast_kernel(op, policy), "AutocastPrivateUse1")
        # Ops outside the lists pass autocast by: torch registers this fallthrough for the
        # autocast keys of its own devices, not for PrivateUse1's (torch 2.13).
        passing = torch.library.Library("_", "IMPL")
        passing.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
        torch.clear_autocast_cache = _clear_cast_cache_too(torch.clear_autocast_cache)
        _patch_accelerator()
        # Backward of neuron tensors on the calling thread, as on meta and cpu. Autograd hands a
        # PrivateUse1 device's backward to a thread of its own, from a pool it sizes by the
        # devices registered at the process's first backward: a backward before enable() left
        # the device none (an internal assert in torch/csrc/autograd/engine.cpp, torch 2.13).
        # Thread-local: the thread that turns the device on (pytest's, at pytest_configure).
        torch._C._set_multithreading_enabled(False)
        _skip_dynamo(NeuronTensor.__torch_dispatch__.__code__, _backend_kernel("").__code__,
                     _copy_from.__code__, _pin_memory.__code__,
                     _autocast_kernel(None, "").__code__)
        # torch.compile on the device, as TorchNeuron's: Dynamo traces neuron tensors, and the
        # default backend is TorchNeuron's neuron (compiled.py)
        from . import compiled

        compiled.teach_dynamo(NeuronTensor)
        _state.libraries = [aten, passing]
        _state.enabled = True


def session_alias(backend: str) -> str:
    """``--neuron-device-alias`` at a pytest session's start (pytest_configure, before any test
    module is imported): turn the simulated neuron device on for the ``backend`` the session
    uses, or leave it off where a real device is there to use. Returns the session header's
    line saying which; raises NeuronDeviceError where torch lacks the hooks."""
    if backend != SIMULATED:
        return (f"neuron device alias: off, the {backend} backend measures a real device "
                "(--neuron-device-alias applies to the simulated backend)")
    if not _state.enabled:
        taken = torch._C._get_privateuse1_backend_name()  # after torch's autoload of backends
        if taken != "privateuseone":
            return (f"neuron device alias: off, PrivateUse1 is registered already as {taken!r} "
                    "(TorchNeuron, or another backend): its real device is used, ops on it are "
                    "simulated as captured")
        enable()
    return ("neuron device alias: on, torch.device('neuron') is the simulated NeuronCore: shapes, "
            "no values (--neuron-device-alias)")


def has_no_values(tensor: Any) -> bool:
    """A tensor that has shapes but no values: on meta, or on the simulated neuron device (the
    real TorchNeuron device's tensors have values)."""
    return type(tensor) is NeuronTensor or tensor.device.type == "meta"
