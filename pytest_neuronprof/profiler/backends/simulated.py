"""The simulated NeuronCore: capture every ATen op with a TorchDispatchMode, cost it afterwards.

The hot path (``__torch_dispatch__``) only runs the op and appends a tuple of metadata: per-op
decisions are cached per OpOverload, and costing happens after the region ends, so profiling
adds a few microseconds per op. What the process has seen it does not do again: a call's
metadata is made once per distinct call (_Call, found by a key of its tensors' shapes and
dtypes) and costed once per chip, a graph region equal to one costed before reuses its schedule
(_GRAPHS), and the costing runs with the cyclic collector held off (_collector_paused): none of
which changes a number (tests/test_capture_cost.py). Ops on ``meta`` tensors and under ``FakeTensorMode`` are
captured by their shapes like any others. How the ops run together, one after the other or as
one compiled graph, is the cost model's decision (costmodel/execution.py: placements); this
backend captures the ops and applies the placements to their records.

What is recorded is what eager PyTorch dispatches (tests/test_capture_fidelity.py holds the
records against torch.profiler's): a composite op that reaches the mode undecomposed (under
inference_mode, or from backward) runs as eager runs it below autograd, its backend's own kernel
where it has one, else its composite kernel under its caller's dispatch state (_run_composite).
On meta, scaled_dot_product_attention runs as the fused kernel a device runs, returning what
torch returns there (attention.py).

Dispatch modes are thread-local: the ops of the thread that started the profiler are captured
(autograd's backward on CPU runs on the calling thread), and so is the work that thread hands to
others during the region (ThreadPoolExecutor.submit, threading.Thread.start), each under a branch
capture of its own, spliced in where it was handed over (../threads.py). Graph execution links
no tensor across threads: one handed between them counts as read from memory.

Device memory (NeuronConfig.profile_memory, on by default): the hot path also notes each new
storage an op makes or reads (dataflow.StorageLifetimes: a dictionary look-up per tensor, a weak
reference per new storage, whose callback notes its free); the region's peak, resident bytes and
timeline are computed after it ends (costmodel/memory.py). Branches on other threads are not
tracked.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import itertools
import sys
import threading
import time
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from ...costmodel import COST_MODEL_VERSION
from ...costmodel.activity import utilisation as region_utilisation
from ...costmodel.utilisation import Utilisation, combined
from ...costmodel.execution import (GraphOp, OpPlacement, eager_placements, execution_overhead_us,
                                    graph_execution)
from ...costmodel.graph import GraphSchedule
from ...costmodel.memory import RESIDENT, MemoryUsage, dataflow_usage, memory_usage
from ...costmodel.registry import formula_for, generation, is_free, kernel_name, op_cost
from ...costmodel.formulas.collectives import PASS_THROUGH, REUSES_INPUT
from ...costmodel.opcost import OpCost, TensorMeta, iter_tensors
from ...costmodel.profiles import HardwareProfile, load_hardware
from ...costmodel.roofline import collective_algorithm, device_time
from ...defaults import DEFAULT_AUTO_CAST, DEFAULT_EXECUTION, DEFAULT_HARDWARE
from ...vocabulary import BACKWARD, EAGER, FORWARD, GRAPH, SIMULATED, Engine
from .. import compiled
from ..compiled import Executable
from ..modules import ModuleTracker
from ..neuron_device import has_no_values
from ..result import GraphRun, OpRecord, ProfileResult, ScopeRecord
from ..threads import RegionThreads, not_fully_profiled
from .attention import GIVEN, FusedAttentionOnMeta, fused_attention_on_meta
from .dataflow import StorageIdentity, StorageLifetimes, tensors_in

# What the dispatch mode does with an OpOverload; decided once per OpOverload and process.
# The recording plans come first: they are the hot path's common cases (``plan <= _FREE``): ops
# costed by their shapes (_RECORD) or also their layouts (_LAYOUT), views (_VIEW: free, their
# outputs share their input's storage) and other free ops (_FREE).
(_RECORD, _LAYOUT, _VIEW, _FREE, _COMPOSITE, _ATTENTION, _SCOPE_ENTER, _SCOPE_EXIT, _IGNORE,
 _BY_BACKEND) = range(10)
_SCOPE_OPS = {"profiler::_record_function_enter_new": _SCOPE_ENTER,
              "profiler::_record_function_enter": _SCOPE_ENTER,
              "profiler::_record_function_exit": _SCOPE_EXIT}
_DispatchKey = torch._C.DispatchKey
_COMPOSITE_KEY = _DispatchKey.CompositeImplicitAutograd
# Kernels that take precedence over an op's CompositeImplicitAutograd kernel on every backend.
_EXPLICIT_KEYS = (_DispatchKey.CompositeExplicitAutograd,
                  _DispatchKey.CompositeExplicitAutogradNonFunctional)
# Backends whose own kernel of a composite op, where there is one, eager PyTorch runs instead of
# the composite (silu_backward on CPU and meta, mish_backward on CPU only).
_BACKEND_KEYS = tuple(getattr(_DispatchKey, k) for k in (
    "CPU", "CUDA", "Meta", "PrivateUse1", "XPU", "MPS", "HPU", "MTIA", "XLA", "Lazy",
    "SparseCPU", "SparseCUDA", "SparseMeta", "SparseCsrCPU", "SparseCsrCUDA", "SparseCsrMeta",
    "QuantizedCPU", "QuantizedCUDA", "NestedTensorCPU", "NestedTensorCUDA", "NestedTensorMeta")
    if hasattr(_DispatchKey, k))
_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
_dispatch_keys = torch._C._dispatch_keys
# The dispatcher's thread-local state as it was when the op now in __torch_dispatch__ was called
# (a guard; see _run_composite).
_CallersDispatchState = torch._C._RestorePythonTLSSnapshot  # type: ignore[attr-defined]
# The capture: one plain tuple per recorded op, the cheapest thing the hot path can build (a
# NamedTuple's construction costs more), read by these names, or unpacked in their order: the
# OpOverload; the metadata of its arguments, keyword arguments and outputs (None for free ops);
# its module path, record_function scope and phase (False: forward); its host start and end
# (perf_counter_ns); the storage numbers it reads and writes (graph execution; else None); its
# call (_Call: the metadata shared by every call of the op with the same metadata, and their
# costs; None for free ops and calls without a key).
FUNC, ARGS, KWARGS, OUTPUTS, PATH, SCOPE, PHASE, START, END, FLOW, CALL = range(11)
_SDPA = "aten::scaled_dot_product_attention"
# Not recorded: prim::device and friends (FakeTensor's metadata queries, not ATen ops), and
# autograd's bookkeeping, which does nothing on any device and reaches the mode in some grad
# modes only (torch.tensor() under inference_mode dispatches lift_fresh + detach_, under no_grad
# lift_fresh alone), so that every grad mode records the same ops.
_BOOKKEEPING = frozenset({"aten::detach", "aten::detach_", "aten::lift_fresh", "aten::lift"})
# Ops whose cost depends on their tensors' layout, not only shape and dtype: copies (a strided
# read pulls whole memory sectors) and matrix products (a sparse operand has nnz elements).
# Their arguments are captured with strides and sparsity; every other op's with shape and dtype.
_LAYOUT_OPS = frozenset({
    "aten::clone", "aten::_to_copy", "aten::copy", "aten::copy_", "aten::_copy_from",
    "aten::_copy_from_and_resize", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::addmv", "aten::mv",
})

def _overloads(names: tuple[str, ...]) -> frozenset[int]:
    """id() of every overload of the ops named (those this torch has)."""
    found: set[int] = set()
    for name in names:
        namespace, _, op = name.partition("::")
        try:
            packet = getattr(getattr(torch.ops, namespace), op)
        except (AttributeError, RuntimeError):
            continue
        found.update(id(getattr(packet, overload)) for overload in packet.overloads())
    return frozenset(found)


# Free ops that hand back the tensor they were given, which on meta tensors comes back in a
# storage of its own: graph execution follows the dataflow through them (dataflow.alias), and
# device memory counts one tensor (StorageLifetimes.alias). The ids stay valid: the ops live as
# long as torch.ops does.
_PASS_THROUGH = _overloads(PASS_THROUGH)
# Out-of-place collectives whose result may take their input's memory (StorageLifetimes.reuse)
_REUSES_INPUT = _overloads(REUSES_INPUT)

_current_autograd_node = torch._C._current_autograd_node
_now_ns = time.perf_counter_ns
_get_ident = threading.get_ident
_Tensor = torch.Tensor
_NO_ENGINE = Engine.NONE.value
_OpOverload = torch._ops.OpOverload

# id(OpOverload) -> (plan, callable that runs it, the OpOverload). A plan depends on the op
# alone, so it is shared by every region of the process: deciding one (schema and dispatcher
# queries) costs 3-20 us, which a region paid for each of its distinct ops. Keyed by id()
# because OpOverload.__hash__ is Python code; the entry keeps its op alive, so the id stays its
# own.
_PLANS: dict[int, tuple[int, Any, Any]] = {}
# id(OpOverload) of a composite op -> the backend keys with a kernel of its own (_BY_BACKEND);
# (id(OpOverload), True: a kernel of its own on these tensors) -> its plan for them.
_BACKEND_OWN: dict[int, tuple[Any, ...]] = {}
_BACKEND_PLANS: dict[tuple[int, bool], int] = {}


def _plan(func: torch._ops.OpOverload) -> int:
    name = func._schema.name
    if name in _SCOPE_OPS:
        return _SCOPE_OPS[name]
    if func.namespace == "prim" or name in _BOOKKEEPING:
        return _IGNORE
    if name == _SDPA:
        return _ATTENTION
    qualified = func.name()
    if _has_kernel(qualified, _COMPOSITE_KEY) and not any(_has_kernel(qualified, key)
                                                          for key in _EXPLICIT_KEYS):
        # Composite ops (linear, layer_norm, dropout, ...) reach the mode undecomposed under
        # inference_mode (and from backward); decomposing them here as eager PyTorch does below
        # autograd makes every grad mode record the same ops. Eager runs a backend's own kernel
        # of the op where it has one, so those few are decided per call, by their tensors.
        if _BACKEND_OWN.setdefault(id(func), tuple(k for k in _BACKEND_KEYS
                                                   if _has_kernel(qualified, k))):
            return _BY_BACKEND
        return _COMPOSITE
    return _kernel_plan(func)


def _kernel_plan(func: torch._ops.OpOverload) -> int:
    """The plan of an op that runs its own kernel (not a composite): recorded, or free."""
    name = func._schema.name
    if getattr(func, "is_view", False):
        return _VIEW
    if is_free(func):
        return _FREE
    if name in _LAYOUT_OPS or "sparse" in name:
        return _LAYOUT
    returns_tensor = any(isinstance(r.type, (torch.TensorType, torch.ListType, torch.OptionalType))
                         for r in func._schema.returns)
    if not returns_tensor and not func._schema.is_mutable and formula_for(func) is None:
        return _FREE  # host-side queries (sym_size, _fused_sdp_choice, ...); equal is costed
    return _RECORD


def _decide(func: torch._ops.OpOverload, plan: int | None = None) -> tuple[int, Any, Any]:
    # A plain OpOverload's __call__ is ``self._op(*args, **kwargs)``: calling ``_op`` saves a
    # Python frame per op. Subclasses (TorchBindOpOverload) keep their own __call__.
    decided = (_plan(func) if plan is None else plan,
               func._op if type(func) is _OpOverload else func, func)
    _PLANS[id(func)] = decided
    return decided


def _meta(value: Any) -> Any:
    if isinstance(value, _Tensor):
        return TensorMeta(tuple(value.shape), value.dtype)
    if type(value) in (list, tuple) and value:
        if any(isinstance(v, _Tensor) for v in value):
            return [TensorMeta(tuple(v.shape), v.dtype) if isinstance(v, _Tensor) else v for v in value]
        if any(type(v) in (list, tuple) for v in value):  # lists of lists (c10d's Tensor[][])
            return [_meta(v) for v in value]
    return value


def _metas(values: Any) -> list[Any]:
    return [_meta(v) for v in values]


def _layout_meta(value: Any) -> Any:
    if isinstance(value, _Tensor):
        if value.layout is torch.strided:
            return TensorMeta(tuple(value.shape), value.dtype, tuple(value.stride()))
        if value.layout is torch.sparse_coo:
            return TensorMeta(tuple(value.shape), value.dtype, nnz=value._nnz(),
                              sparse_dims=value.sparse_dim())
        return TensorMeta(tuple(value.shape), value.dtype)  # other sparse layouts: as dense
    if type(value) in (list, tuple) and value and any(isinstance(v, _Tensor) for v in value):
        return [_layout_meta(v) for v in value]
    return value


def _layout_metas(values: Any) -> list[Any]:
    return [_layout_meta(v) for v in values]


# -- calls: the metadata of an op call, shared by every call with the same metadata -----------------
#
# A recorded op's arguments, keyword arguments and outputs are made TensorMetas (_meta, or
# _layout_meta with strides) once per distinct call, not once per call: the hot path builds the
# call's key straight from its tensors (shape and dtype, C-level objects that hash and compare
# in C, no TensorMeta made) and finds the _Call made the first time, whose metadata every record
# of that call shares (read-only), and whose costs _cost finds without building a key of its own.
# A key determines the metadata: a tensor's is its shape and dtype (and strides, for _LAYOUT ops;
# a tensor of another layout, or a list of tensors, has no key there), a float, bool or complex
# value is keyed with its type (1, 1.0 and True are equal in Python), other values by themselves
# where they are plain (ints, strings, None, dtypes, devices, ...); a list or tuple one level
# deep. Anything else (a nested list, a SymInt, an object) has no key: that call's metadata is
# made on its own and costed by _cost's own key, as before calls were shared.

class _Unkeyed(Exception):
    """A value with no call key (see above)."""


# Values that key a call by themselves: equal values of these types are the same value.
_PLAIN = frozenset({int, str, type(None), torch.dtype, torch.device, torch.memory_format,
                    torch.layout})
_TYPED = frozenset({float, bool, complex})
_strided = torch.strided


def _scalar_key(value: Any) -> Any:
    kind = type(value)
    if kind in _TYPED:
        return (kind, value)
    raise _Unkeyed


def _value_key(value: Any) -> Any:
    """The key of an argument or output that is neither a tensor nor a plain value (_RECORD)."""
    kind = type(value)
    if kind in _TYPED:
        return (kind, value)
    if kind is list or kind is tuple:
        return (kind, tuple([(v.shape, v.dtype) if isinstance(v, _Tensor) else
                             v if type(v) in _PLAIN else _scalar_key(v) for v in value]))
    raise _Unkeyed


def _layout_value_key(value: Any) -> Any:
    """As _value_key, for _LAYOUT ops: a tensor that is not strided, or a list holding tensors,
    has no key (their metadata is not their shape, dtype and strides)."""
    kind = type(value)
    if kind in _TYPED:
        return (kind, value)
    if kind is list or kind is tuple:
        return (kind, tuple([v if type(v) in _PLAIN else _scalar_key(v) for v in value]))
    raise _Unkeyed


def _record_key(func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> tuple:
    """The key of a _RECORD op's call (the hot path inlines the common case, see there)."""
    return (id(func),
            tuple([(v.shape, v.dtype) if isinstance(v, _Tensor) else
                   v if type(v) in _PLAIN else _value_key(v) for v in args]),
            tuple([(k, (v.shape, v.dtype) if isinstance(v, _Tensor) else
                    v if type(v) in _PLAIN else _value_key(v)) for k, v in kwargs.items()]),
            (out.shape, out.dtype) if isinstance(out, _Tensor) else _value_key(out))


def _layout_key(func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> tuple:
    """The key of a _LAYOUT op's call: its tensors' strides too."""
    return (id(func),
            tuple([(v.shape, v.dtype, v.stride()) if isinstance(v, _Tensor) and v.layout is _strided
                   else v if type(v) in _PLAIN else _layout_value_key(v) for v in args]),
            tuple([(k, (v.shape, v.dtype, v.stride())
                    if isinstance(v, _Tensor) and v.layout is _strided
                    else v if type(v) in _PLAIN else _layout_value_key(v))
                   for k, v in kwargs.items()]),
            (out.shape, out.dtype, out.stride()) if isinstance(out, _Tensor) and out.layout is _strided
            else _layout_value_key(out))


# A call: (argument metadata, keyword argument metadata, output metadata, its costs: shared-costs
# token (_shared_costs) -> what SimulatedBackend._static returns, its serial number: never
# another call's). A plain tuple: the hot path unpacks it.
_Call = tuple
_serials = itertools.count()
# call key -> _Call. Emptied with the shared costs (clear_cost_cache, a new formula) and when full.
_CALLS: dict[tuple, _Call] = {}
_CALLS_MAX = 100_000
_NO_KWARGS: dict[str, Any] = {}  # the keyword metadata of calls without keyword arguments


def _new_call(key: tuple | None, plan: int, args: Any, kwargs: dict[str, Any], out: Any) -> _Call:
    """The _Call of a call met for the first time (``key`` None: a call without a key)."""
    meta, metas = (_meta, _metas) if plan == _RECORD else (_layout_meta, _layout_metas)
    call: _Call = (metas(args), {k: meta(v) for k, v in kwargs.items()} if kwargs else _NO_KWARGS,
            metas(out) if isinstance(out, (tuple, list)) else [meta(out)], {}, next(_serials))
    if key is not None:
        if len(_CALLS) >= _CALLS_MAX:
            _CALLS.clear()
        _CALLS[key] = call
    return call


def _call_of(plan: int, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> tuple[_Call, bool]:
    """The hot path's slow case: the _Call of a call whose key it did not find, and whether it
    is shared (False: a call without a key, its metadata its own)."""
    try:
        key = (_record_key if plan == _RECORD else _layout_key)(func, args, kwargs, out)
        call = _CALLS.get(key)
    except (_Unkeyed, TypeError, RuntimeError):  # unhashable (SymInt), no strides (sparse)
        return _new_call(None, plan, args, kwargs, out), False
    return (call if call is not None else _new_call(key, plan, args, kwargs, out)), True


def _backend_plan(func: Any, args: Any) -> int:
    """The plan of a _BY_BACKEND op for these arguments: its backend's own kernel where the
    backend of its first tensor has one (recorded as any op), else its composite."""
    tensor = next((t for t in tensors_in(args)), None)
    own = tensor is not None and any(_dispatch_keys(tensor).has(key)
                                     for key in _BACKEND_OWN[id(func)])
    plan = _BACKEND_PLANS.get((id(func), own))
    if plan is None:
        plan = _BACKEND_PLANS[(id(func), own)] = _kernel_plan(func) if own else _COMPOSITE
    return plan


_ExcludeKeys = torch._C._ExcludeDispatchKeyGuard
# Keys above Python whose kernel of an op, where it has one, has run before the mode saw the op
# and left itself out of the op's inner calls: autocast's (linear, matmul: they cast, then run
# the op with autocast excluded) and ADInplaceOrView's (a view op of its own, as chunk is: it
# runs the op below ADInplaceOrView, then makes the outputs views of the input itself).
_RAN_ABOVE_KEYS = tuple(getattr(_DispatchKey, k) for k in dir(_DispatchKey)
                        if k.startswith("Autocast")) + (_DispatchKey.ADInplaceOrView,)
# id(OpOverload) -> DispatchKeySet of its kernels among _RAN_ABOVE_KEYS; None: it has none
_RAN_ABOVE: dict[int, Any] = {}


def _ran_above(func: Any) -> Any:
    """The keys of _RAN_ABOVE_KEYS with a kernel of ``func``'s (see there); None when none."""
    if id(func) not in _RAN_ABOVE:
        found = None
        for key in _RAN_ABOVE_KEYS:
            if _has_kernel(func.name(), key):
                one = torch._C.DispatchKeySet(key)
                found = one if found is None else found | one
        _RAN_ABOVE[id(func)] = found
    return _RAN_ABOVE[id(func)]


def _run_composite(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """The op's C++ CompositeImplicitAutograd kernel: what eager PyTorch runs for it below
    autograd. Not ``func.decompose``, which prefers a Python decomposition where torch._decomp
    has registered one (eval dropout: ``input.clone()`` where eager returns the input itself).

    It runs with the dispatcher's thread-local state of the op's caller, as eager runs it. While
    a mode's ``__torch_dispatch__`` runs, torch's Python fallback excludes every dispatch key
    above Python (ADInplaceOrView, autograd, autocast, functionalization, ...), which eager's
    composite kernel never runs without: its own calls still go through them. Without
    ADInplaceOrView, the composite's ``weight.t()`` under inference_mode came back a plain
    tensor instead of a view of the parameter, so it did not require grad, and ``matmul``
    (whose ``should_fold`` folds a batch into one ``mm`` when the weight requires grad) ran an
    expanded ``bmm`` where eager PyTorch runs ``mm`` (a Llama's ``lm_head`` on the last token,
    a non-contiguous slice). ``_RestorePythonTLSSnapshot`` restores the state that torch's
    Python dispatch snapshotted when the op was called; the keys whose own kernel of the op has
    run above the mode stay excluded, as those kernels exclude them (_RAN_ABOVE_KEYS): without
    that, ``chunk`` of a normal tensor under inference_mode made its outputs views twice
    ("Attempted to make a tensor into a differentiable view, but the tensor already had
    autograd metadata")."""
    with _CallersDispatchState():
        own = _ran_above(func)
        if own is not None:
            with _ExcludeKeys(own):
                return func._op_dk(_COMPOSITE_KEY, *args, **kwargs)
        return func._op_dk(_COMPOSITE_KEY, *args, **kwargs)


class _CaptureMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # True (torch's default) wraps __torch_dispatch__ at class creation, which imports
        # torch._dynamo (~1 s) on first use of the plugin and adds a wrapper to every op.
        # _skip_dynamo_in_dispatch below gives the same skip for free.
        return False

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Dynamo compiles under the capture only for torch.compile(backend="neuron"), whose
        # graphs the capture costs as compiled graphs (profiler/compiled.py); other backends
        # step aside and their ops are captured one by one, as before.
        return compiled.compiles_under_capture()

    def __init__(self, modules: ModuleTracker | Any, dataflow: bool = False,
                 memory: bool = False) -> None:
        super().__init__()
        self.modules = modules
        # Graph execution: also which tensors each op reads and writes, by capture-local
        # storage numbers (dataflow.py); None in eager execution.
        self.identity = StorageIdentity() if dataflow else None
        self.raw: list[tuple] = []
        # Device memory: when each storage is made and freed (dataflow.py); None when off.
        self.lifetimes = StorageLifetimes(self.raw, self.identity) if memory else None
        self._append = self.raw.append  # bound once: one attribute lookup less per op
        self.scope = ""
        self.scope_stack: list[tuple[str, int]] = []
        self.scopes: list[tuple[str, int, int]] = []
        self.origin_ns = _now_ns()
        # Compiled graphs (GraphListener, profiler/compiled.py): (position in raw, executable,
        # True at its start / False at its end); the backends that stepped aside, and the codes
        # Dynamo skipped for good because the capture was on (given back when it ends).
        self.dataflow = dataflow
        self.graph_marks: list[tuple[int, Executable, bool]] = []
        self.other_backends: list[str] = []
        self.skipped_codes: list[Any] = []
        self._outer_modules: list[Any] = []
        self._graph_identity: StorageIdentity | None = None

    # -- compiled graphs (profiler/compiled.py's GraphListener) ------------------------------------

    def graph_began(self, executable: Executable) -> None:
        self.graph_marks.append((len(self.raw), executable, True))
        if self.identity is None:  # the graph's ops need their dataflow, as graph execution does
            if self._graph_identity is None:
                self._graph_identity = StorageIdentity()
            self.identity = self._graph_identity
        self._outer_modules.append(self.modules)
        self.modules = _GraphModules(self.modules, executable)

    def graph_path(self, paths: tuple[str, str]) -> None:
        if isinstance(self.modules, _GraphModules):
            self.modules.enter(paths)

    def graph_ended(self, executable: Executable) -> None:
        self.graph_marks.append((len(self.raw), executable, False))
        if self._outer_modules:
            self.modules = self._outer_modules.pop()
        if not self.dataflow and not self._outer_modules:
            self.identity = None

    def stepped_aside(self, backend: str, code: Any) -> None:
        if backend not in self.other_backends:
            self.other_backends.append(backend)
        if code is not None:
            self.skipped_codes.append(code)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # The hot path: runs for every op of the region. It only times the op and appends a
        # tuple; names, shapes lists and costs are made in SimulatedBackend._cost afterwards.
        __tracebackhide__ = True  # an op's own error shows the test's line, not this frame
        if kwargs is None:
            kwargs = _NO_KWARGS
        plan, call, _ = _PLANS.get(id(func)) or _decide(func)
        if plan == _BY_BACKEND:  # a composite op some backends have a kernel of their own for
            plan = _backend_plan(func, args)
        if plan <= _FREE:
            start = _now_ns()
            out = call(*args, **kwargs)
            end = _now_ns()
            node = _current_autograd_node()  # not None: the op runs in backward
            if node is None:
                path, phase = self.modules.path, False  # False: forward
            else:
                modules = self.modules
                path, phase = modules.backward_path(node), modules.backward_phase
            # Tuples in the order FUNC ... CALL (see there).
            if plan <= _LAYOUT:  # also the metadata of arguments and outputs, for the cost model
                # The call's metadata, made once per distinct call (see _Call). Inline: the key
                # of the common call (no keyword arguments, one tensor out) as _record_key or
                # _layout_key makes it; every other call, and a call not seen yet, in _call_of.
                entry = key = None
                if not kwargs and isinstance(out, _Tensor):
                    try:
                        if plan == _RECORD:
                            key = (id(func), tuple([
                                (v.shape, v.dtype) if isinstance(v, _Tensor) else
                                v if type(v) in _PLAIN else _value_key(v) for v in args]), (),
                                (out.shape, out.dtype))
                        elif out.layout is _strided:
                            key = (id(func), tuple([
                                (v.shape, v.dtype, v.stride())
                                if isinstance(v, _Tensor) and v.layout is _strided else
                                v if type(v) in _PLAIN else _layout_value_key(v) for v in args]),
                                (), (out.shape, out.dtype, out.stride()))
                        if key is not None:
                            entry = _CALLS.get(key)
                    except (_Unkeyed, TypeError, RuntimeError):
                        key = None
                shared = True
                if entry is None:
                    if key is not None:  # a new call
                        entry = _new_call(key, plan, args, kwargs, out)
                    else:
                        entry, shared = _call_of(plan, func, args, kwargs, out)
                metas, kwarg_metas, outputs, _, _ = entry
                identity = self.identity  # graph execution: which storages it reads and writes
                flow = identity.flow(args, kwargs, out) if identity is not None else None
                if self.lifetimes is not None:  # shares the outputs' metadata
                    self.lifetimes.op(args, kwargs, out, outputs)
                    if id(func) in _REUSES_INPUT:
                        self.lifetimes.reuse(args[0])
                self._append((func, metas, kwarg_metas, outputs, path, self.scope, phase, start,
                              end, flow, entry if shared else None))
            else:  # free: only the op's name, place and time are kept
                if plan == _VIEW:
                    if self.lifetimes is not None:  # a view makes nothing, but frees count
                        self.lifetimes.event(len(self.raw))  # as lifetimes.mark(), inline
                elif id(func) in _PASS_THROUGH:  # one tensor on the device: its argument
                    if self.identity is not None:
                        self.identity.alias(out, args[0])
                    if self.lifetimes is not None:
                        self.lifetimes.alias(out, args[0])
                elif self.lifetimes is not None:
                    self.lifetimes.made(out)
                self._append((func, None, None, None, path, self.scope, phase, start, end, None,
                              None))
            return out
        if plan == _COMPOSITE:
            with self:
                return _run_composite(func, args, kwargs)
        if plan == _ATTENTION:  # SDPA under inference_mode: the device's own choice, fused on meta
            with self:
                if has_no_values(args[0]):
                    return fused_attention_on_meta(*args, **kwargs)
                return _run_composite(func, args, kwargs)
        if plan == _IGNORE:
            return call(*args, **kwargs)
        if plan == _SCOPE_ENTER:
            self.scope_stack.append((str(args[0]), _now_ns()))
            self.scope = "/".join(name for name, _ in self.scope_stack)
        else:  # _SCOPE_EXIT
            if self.scope_stack:
                name, start = self.scope_stack.pop()
                self.scopes.append((name, start, _now_ns()))
                self.scope = "/".join(name for name, _ in self.scope_stack)
        return call(*args, **kwargs)


# The flash-attention ops return the outputs the simulation gives them where it computed those
# itself (attention.py: SDPA on meta); otherwise they run.
for _flash in (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
               torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default):
    _PLANS[id(_flash)] = (_plan(_flash), GIVEN[id(_flash)], _flash)
# SDPA on meta runs as the fused kernel while a capture runs on the calling thread.
_META_ATTENTION = FusedAttentionOnMeta(
    lambda: isinstance(_get_current_dispatch_mode(), _CaptureMode))


def _skip_dynamo_in_dispatch() -> None:
    """Tell dynamo never to compile __torch_dispatch__ or what it calls, as torch's default
    ``_should_skip_dynamo`` would, without importing torch._dynamo: the C-level switch is in
    torch._C. Without it, a torch.compile'd function called in a region had dynamo compile
    this hot path as a frame of its own (the mode is off the stack while it runs): graph breaks
    on perf_counter_ns, recompile-limit warnings, and fullgraph=True failing with dynamo's
    Unsupported error (tests/test_robustness.py)."""
    try:
        from torch._C._dynamo.eval_frame import (_FrameAction, _FrameExecStrategy,
                                                 set_code_exec_strategy)
    except ImportError:  # a torch without dynamo's C part: nothing can compile the frame
        return
    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)  # this frame and callees
    set_code_exec_strategy(_CaptureMode.__torch_dispatch__.__code__, skip)


_skip_dynamo_in_dispatch()


def _key(values: list[Any]) -> tuple:
    """A hashable key of captured values, equal for equal metadata: what _freeze gives, but a
    TensorMeta is keyed by its (shape, dtype, layout), which hashes and compares in C where
    TensorMeta's own __hash__ and __eq__ run Python code, and lists (int[] sizes, Tensor[])
    are made tuples one level deep only: deeper ones fail to hash and the caller takes _freeze.
    """
    return tuple([(TensorMeta, v.shape, v.dtype, v.strides, v.nnz) if type(v) is TensorMeta
                  else tuple(v) if type(v) is list else v for v in values])


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector held off while a region's capture is costed: a pure
    computation over the capture that allocates many small containers and frees them again,
    whose allocations set off collections that traverse the whole process's heap, the user's
    model and data included (Llama-2-7B on meta, graph execution: its schedule took 143 ms with
    the collector running, 67 ms without). Nothing it makes outlives it in a cycle; the
    collector runs again after it, as it would have, if it was on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _GraphModules:
    """The module tracker's stand-in while a compiled graph runs: the graph's ops belong to the
    modules its nodes name (``nn_module_stack``, passed in by the graph's path marks,
    profiler/compiled.py) below the module running the graph, in the phase of the graph (a
    backward graph's ops are backward ops, whichever autograd node runs them). The capture's hot
    path reads ``path``, ``backward_path(node)`` and ``backward_phase``, as of a ModuleTracker."""

    __slots__ = ("path", "backward_phase", "recomputing", "_relative", "_shown", "_root_type")
    _relative: str
    _shown: str

    def __init__(self, outer: Any, executable: Executable) -> None:
        relative: str
        shown: str
        if isinstance(outer, _GraphModules):
            relative, shown = outer._relative, outer._shown
        elif executable.phase == BACKWARD:
            node = _current_autograd_node()
            shown = outer.backward_path(node) if node is not None else outer.path
            relative = outer.relative(shown)
        else:
            relative, shown = outer.running()
        self._relative, self._shown, self._root_type = relative, shown, executable.root_type
        self.backward_phase = BACKWARD
        self.recomputing = False
        self.path = shown or executable.root_type

    def enter(self, paths: tuple[str, str]) -> None:
        root_type, below = paths
        if self._shown:
            self.path = (f"{self._relative}.{below}" if self._relative else below) if below \
                else self._shown
        else:
            self.path = below or root_type or self._root_type

    def backward_path(self, node: Any) -> str:
        return self.path


def _discard(_: tuple) -> None:
    """A sealed branch's append: the region has ended."""


class _Branch:
    """Work a region handed to another thread (../threads.py), captured on that thread: a mode
    and module paths of its own, timed from the region's start."""

    def __init__(self, origin_ns: int, dataflow: bool) -> None:
        self.modules = ModuleTracker(tag_autograd=True)  # made on the thread that runs the work
        self.mode = _CaptureMode(self.modules, dataflow)
        self.mode.origin_ns = origin_ns
        self.raw = self.mode.raw

    def __enter__(self) -> "_Branch":
        self.modules.install()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if _get_current_dispatch_mode() is self.mode:  # else the work left a mode on: ours stays, sealed
            self.mode.__exit__(None, None, None)
        else:
            self.seal()
        self.modules.remove()

    def seal(self) -> None:
        self.mode._append = _discard


# Storage numbers (dataflow.py) are capture-local: the k-th branch's are moved to start at
# k * _BRANCH_IDS, so that no number names two storages of different threads.
_BRANCH_IDS = 1 << 48


def _offset_flows(ops: list[tuple], k: int) -> list[tuple]:
    base = k * _BRANCH_IDS
    return [op if op[FLOW] is None else
            op[:FLOW] + (tuple([n + base for n in ids] for ids in op[FLOW]),) + op[FLOW + 1:]
            for op in ops]


class SimulatedBackend:
    """Runs the region on the host and gives each op the device time of the cost model."""

    name = SIMULATED

    def __init__(self, hardware: str = DEFAULT_HARDWARE, core: int = 0,
                 execution: str = DEFAULT_EXECUTION, auto_cast: str = DEFAULT_AUTO_CAST,
                 profile_memory: bool = True) -> None:
        self.profile: HardwareProfile = load_hardware(hardware)
        self.core = core
        self.execution = execution
        # Device memory (NeuronConfig.profile_memory): the result's ``memory``; None when off.
        self.profile_memory = profile_memory
        # neuronx-cc's --auto-cast, for graph execution only: eager kernels keep the model's
        # dtypes (NeuronConfig), so eager costs, cached per profile (_shared_costs), never
        # depend on it.
        self.auto_cast = auto_cast
        # Calibration scripts set keep_capture to retime the last region on other profiles; off
        # by default, so that a profiler does not hold its capture beside its result.
        self.keep_capture = False
        self.last_capture: Capture | None = None
        self._mode: _CaptureMode | None = None
        self._modules: ModuleTracker | None = None
        self._threads: RegionThreads | None = None
        self._thread = 0

    @property
    def version(self) -> str:
        return COST_MODEL_VERSION

    def start(self) -> None:
        _forget_stale_costs()
        self._thread = threading.get_ident()
        self._modules = ModuleTracker(tag_autograd=True)
        self._modules.install()
        _META_ATTENTION.acquire()
        self._mode = _CaptureMode(self._modules, dataflow=self.execution == GRAPH,
                                  memory=self.profile_memory)
        self._threads = RegionThreads(self._mode, functools.partial(
            _Branch, self._mode.origin_ns, self.execution == GRAPH))
        self._modules.on_other_thread = self._threads.other_thread_module
        compiled.listen(self._mode)
        self._mode.__enter__()
        self._threads.open()

    def stop(self, correlate_device_time: bool = True) -> ProfileResult:
        mode, modules, threads = self._mode, self._modules, self._threads
        if mode is None or modules is None or threads is None:
            raise RuntimeError("SimulatedBackend.stop() called before start()")
        if threading.get_ident() != self._thread:
            raise RuntimeError("a NeuronProfiler must be stopped on the thread that started it")
        if _get_current_dispatch_mode() is not mode:
            # Exiting would pop the innermost mode, not ours: the still-running inner profiler
            # would lose its capture and ours would stay on, capturing the rest of the process.
            raise RuntimeError(
                "NeuronProfiler.stop(): a profiler (or another TorchDispatchMode) started after "
                "this one is still running; stop nested profilers innermost first")
        mode.__exit__(None, None, None)
        compiled.stop_listening(mode)
        compiled.restore_frames(mode.skipped_codes)
        if mode.lifetimes is not None:
            mode.lifetimes.close()  # frees after the region are not its own
        threads.close()
        modules.remove()
        modules.on_other_thread = None  # a cycle through the mode: its ops would wait for gc
        _META_ATTENTION.release()
        self._mode = self._modules = self._threads = None
        with _collector_paused():
            return self._result(mode, threads, correlate_device_time)

    def _result(self, mode: _CaptureMode, threads: RegionThreads,
                correlate_device_time: bool) -> ProfileResult:
        """The ProfileResult of a region that has ended: its records costed, placed and its
        device memory (after the region, see stop)."""
        scopes = list(mode.scopes)

        def adopt(k: int, branch: _Branch, ops: list[tuple]) -> list[tuple]:
            scopes.extend(branch.mode.scopes)
            return _offset_flows(ops, k) if self.execution == GRAPH else ops
        mode.raw, owners = threads.splice(adopt)
        records, costs = self._cost(mode)
        if owners is not None:
            for record, owner in zip(records, owners):
                record.thread = owner
        segments = _segments(mode.graph_marks, len(mode.raw), owners)
        capture = Capture(records, costs, mode.raw, segments, mode.lifetimes, owners)
        if self.keep_capture:
            self.last_capture = capture
        schedule: GraphSchedule | None = None
        if self.execution == GRAPH or segments:  # the eager records are placed already
            records, schedule = capture.placed(self.profile, self.execution, self.auto_cast)
        memory = capture.memory(records, schedule)
        utilisation = capture.utilisation(records, schedule, self.profile, self.auto_cast)
        origin = mode.origin_ns
        uncaptured = threads.uncaptured
        scope_records = [ScopeRecord(name, (start - origin) / 1e3, (end - origin) / 1e3)
                         for name, start, end in sorted(scopes, key=lambda s: s[1])]
        notes = [not_fully_profiled(uncaptured)] if uncaptured else []
        notes += [compiled.other_backend_note(name) for name in mode.other_backends]
        return ProfileResult(
            records=records,
            backend=self.name,
            hardware=self.profile.name,
            core=self.core,
            scopes=scope_records,
            correlate_device_time=correlate_device_time,
            notes=notes,
            uncaptured=uncaptured,
            execution=self.execution,
            execution_overhead_us=_overhead_us(self.profile, self.execution, segments),
            auto_cast=self.auto_cast if self.execution == GRAPH or segments else DEFAULT_AUTO_CAST,
            memory=memory,
            utilisation=utilisation,
            graphs=_graph_runs(records, segments),
        )

    def result_for(self, result: ProfileResult, hardware: str) -> ProfileResult:
        """``result`` (this backend's last region, captured with ``keep_capture``) as the
        ``hardware`` profile costs it, in the same execution mode and auto-cast, without running
        the code again: every field but the records, the hardware and the graph's fixed cost is
        the original's (its memory too, which is the code's, not the chip's; in graph execution
        that of this chip's schedule, whose order the buffers follow, with its SBUF high-water
        mark and spill)."""
        capture = self.last_capture
        if capture is None:
            raise RuntimeError("result_for(): no capture kept; set keep_capture before start()")
        profile = load_hardware(hardware)
        retimed = copy.copy(result)  # every attribute, fields or not (memory)
        with _collector_paused():
            retimed.records, schedule = capture.placed(profile, self.execution, self.auto_cast)
            # graph execution: the buffers follow this chip's schedule of the dataflow
            retimed.memory = capture.memory(retimed.records, schedule) if schedule else result.memory
            retimed.utilisation = capture.utilisation(retimed.records, schedule, profile, self.auto_cast)
        retimed.hardware = profile.name
        retimed.execution_overhead_us = _overhead_us(profile, self.execution, capture.segments)
        retimed.graphs = _graph_runs(retimed.records, capture.segments)
        return retimed

    def _cost(self, mode: _CaptureMode) -> tuple[list[OpRecord], list[OpCost | None]]:
        """Turn captured calls into OpRecords, as eager execution costs them, and each one's
        OpCost (None for free ops). What a record takes from the cost model is a pure function
        of the op and the metadata of its arguments and outputs, so it is cached by them across
        regions (_shared_costs): repeated layers and steps are costed once.

        Each record is made from its call's prototype (the values of a record built by name,
        _prototype, once per distinct call and cached with its costs; a free op's once per
        region) and its own index, place and times, by _make_record: faster than copying a
        dict of its fields, and its attributes set in field order share the class's keys, as
        OpRecord(...) makes them (64 bytes a record less than a dict of its own)."""
        shared, token = _shared_costs(self.profile)
        free = _FREE_PROTOTYPES
        records: list[OpRecord] = []
        costs: list[OpCost | None] = []
        append, append_cost = records.append, costs.append
        make = _make_record
        origin = mode.origin_ns
        device_clock = 0.0
        for index, captured in enumerate(mode.raw):
            # Unpacked in the order FUNC ... CALL: a few microseconds a region less than
            # reading by index, and a tuple of another width fails here, not silently.
            func, args, kwargs, outputs, path, scope, backward, start, end, _, call = captured
            if args is None:
                prototype = free.get(id(func))
                if prototype is None:  # id(func) is safe in a key: _PLANS keeps every op seen alive
                    prototype = free[id(func)] = _prototype(_free_prototype(func))
                cost = None
                device_us = 0.0
            else:
                if call is not None:  # a shared call (_Call): its costs on this profile, if known
                    cached = call[3].get(token)
                    if cached is None:
                        cached = call[3][token] = self._static(func, args, kwargs, outputs)
                else:  # a call without a key of its own: by its metadata, as the hot path
                    # could not. Outputs are in the key because data-dependent ops (nonzero,
                    # masked_select) vary with them.
                    try:
                        key = (id(func), _key(args), _freeze(kwargs) if kwargs else (),
                               _key(outputs))
                        cached = shared.get(key)
                    except TypeError:
                        try:
                            key = (id(func), _freeze(args), _freeze(kwargs), _freeze(outputs))
                            cached = shared.get(key)
                        except TypeError:  # an unhashable argument: cost it without the cache
                            key, cached = None, None
                    if cached is None:
                        cached = self._static(func, args, kwargs, outputs)
                        if key is not None:
                            if len(shared) >= _SHARED_COSTS_MAX:
                                shared.clear()
                            shared[key] = cached
                prototype, device_us, cost = cached
            # The per-call fields by name (_PER_CALL); the shapes lists stay shared: read-only.
            # BACKWARD or RECOMPUTE in backward (modules.py).
            append(make(prototype, index=index, module_path=path, scope=scope,
                        phase=backward or FORWARD, host_start_us=(start - origin) / 1e3,
                        cpu_time_us=(end - start) / 1e3, device_start_us=device_clock))
            append_cost(cost)
            device_clock += device_us
        return records, costs

    def _static(self, func: Any, args: list[Any], kwargs: dict[str, Any],
                outputs: list[Any]) -> tuple[tuple[Any, ...], float, OpCost]:
        """A costed call's prototype (_prototype of its record, built by name: every field that
        depends on the call alone, eager-timed), its device time, its OpCost."""
        name, dispatched = kernel_name(func), func._schema.name
        cost = op_cost(func, args, kwargs, outputs)
        timing = device_time(cost, self.profile)
        collective = cost.engine is Engine.COLLECTIVE
        return _prototype(OpRecord(
            index=0, name=name, overload=func._overloadname,
            input_shapes=[_shapes(a) for a in args],
            input_dtypes=[str(t.dtype).replace("torch.", "") for t in iter_tensors(args)],
            ranks=cost.ranks if collective else 0, link_bytes=cost.link_bytes if collective else 0,
            algorithm=collective_algorithm(cost, self.profile),
            engine=cost.engine.value, flops=cost.flops, bytes_read=cost.bytes_read,
            bytes_written=cost.bytes_written, launch_us=timing.launch_us,
            compute_us=timing.compute_us, memory_us=timing.memory_us,
            device_time_us=timing.device_time_us, bound=timing.bound, costed=cost.costed,
            peak_fraction=timing.peak_fraction,
            module_path="", scope="", phase=FORWARD, host_start_us=0.0, cpu_time_us=0.0,
            dispatched="" if dispatched == name else dispatched)), timing.device_time_us, cost


def _shapes(value: Any) -> Any:
    """An argument's entry in a record's ``input_shapes``: a tensor's shape, the shapes of a
    list's tensors (c10d's ``Tensor[]``, ``aten::cat``'s), [] for anything else."""
    if type(value) is TensorMeta:
        return list(value.shape)
    if type(value) is list and any(type(v) is TensorMeta or type(v) is list for v in value):
        return [_shapes(v) for v in value if type(v) is TensorMeta or type(v) is list]
    return []


# The fields of a record that _cost sets per call; every other one comes from its prototype.
_PER_CALL = ("index", "module_path", "scope", "phase", "host_start_us", "cpu_time_us",
             "device_start_us")
_FIELDS = tuple(f.name for f in dataclasses.fields(OpRecord))
_PROTOTYPE = tuple(name for name in _FIELDS if name not in _PER_CALL)
assert set(_PER_CALL) <= set(_FIELDS), "a per-call field is no longer an OpRecord field"


def _prototype(record: OpRecord) -> tuple[Any, ...]:
    """A record's values of the fields not set per call, in _PROTOTYPE's order (read by name)."""
    return tuple(getattr(record, name) for name in _PROTOTYPE)


def _record_maker(given: tuple[str, ...], source: str) -> Any:
    """A function that makes an OpRecord without its __init__ (whose defaults and keywords
    cost a third more): the fields named in ``given``, every other from its first argument.
    ``source`` "prototype": make(prototype, **given), a _prototype tuple and keywords; "record":
    make(record, values), a record to copy and a tuple of the ``given`` fields in that order (a
    named tuple whose _fields ``given`` is, so read by name too). Generated from
    dataclasses.fields(OpRecord), so each value goes to its field by name whatever the fields'
    order, and each attribute is set in field order, as __init__ sets them: the instance
    shares the class's keys (a dict of its own, as a copied dict is, costs 64 bytes more)."""
    assert set(given) <= set(_FIELDS), f"not OpRecord fields: {set(given) - set(_FIELDS)}"
    rest = [name for name in _FIELDS if name not in given]
    if source == "prototype":
        lines = [f"def make(src, *, {', '.join(given)}):", f"    ({', '.join(rest)},) = src"]
        lines += ["    record = new(OpRecord)"] + [f"    record.{name} = {name}" for name in _FIELDS]
    else:
        lines = ["def make(src, given):", f"    ({', '.join(given)},) = given",
                 "    record = new(OpRecord)"]
        lines += [f"    record.{name} = {name if name in given else 'src.' + name}"
                  for name in _FIELDS]
    lines.append("    return record")
    namespace = {"new": object.__new__, "OpRecord": OpRecord}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the field names only
    return namespace["make"]


# make(prototype, index=..., module_path=..., ...) -> OpRecord, for _cost.
_make_record = _record_maker(_PER_CALL, "prototype")
# place(record, placement) -> a copy of record with an OpPlacement's fields, for _placed.
_place_record = _record_maker(OpPlacement._fields, "record")


def _free_prototype(func: Any) -> OpRecord:
    """A free op's prototype record (see SimulatedBackend._cost): its names, no work."""
    return OpRecord(
        index=0, name=func._schema.name, overload=func._overloadname, input_shapes=[],
        input_dtypes=[], engine=_NO_ENGINE, flops=0, bytes_read=0, bytes_written=0,
        launch_us=0.0, compute_us=0.0, memory_us=0.0, device_time_us=0.0, bound="none",
        costed=True, module_path="", scope="", phase=FORWARD, host_start_us=0.0,
        cpu_time_us=0.0)


def _memory(lifetimes: StorageLifetimes, records: list[OpRecord], owners: list[int] | None,
            raw: list[tuple], schedule: GraphSchedule | None = None) -> MemoryUsage:
    """The region's device memory from its capture's storage lifetimes. Their positions count
    the region's own thread's ops; where work handed to other threads was spliced in
    (``owners``), they move to the records' indexes (its ops' storages are not tracked). In
    graph execution (``schedule``) the buffers follow the dataflow in the graph's order
    (memory.dataflow_usage); eager execution keeps Python's lifetimes, which are real there."""
    storages, frees = lifetimes.storages, lifetimes.frees
    if lifetimes.reuses:
        frees = _reused(frees, lifetimes.reuses, records, owners)
    if owners is not None:
        index = [k for k, owner in enumerate(owners) if owner == 0] + [len(owners)]
        storages = [s if s[0] == RESIDENT else (index[s[0]], *s[1:]) for s in storages]
        frees = [(index[position], number) for position, number in frees]

    def made_by(k: int) -> tuple[str, str]:
        return records[k].name, records[k].module_path

    if schedule is not None:
        def touches(k: int) -> list[int]:
            flow = raw[k][FLOW]
            return [*flow[0], *flow[1]] if flow is not None else []
        return dataflow_usage(storages, frees, schedule.order, touches, lifetimes.names, made_by)
    return memory_usage(storages, frees, len(records), made_by)


def _reused(frees: list[tuple[int, int]], reuses: list[tuple[int, int]], records: list[OpRecord],
            owners: list[int] | None) -> list[tuple[int, int]]:
    """``frees`` where each out-of-place collective whose input died before the next op that
    does work (free ops, such as waiting for it, do none) hands its result the input's memory,
    as the in-place collective does (formulas/collectives.py, ``REUSES_INPUT``): the input is
    freed where the collective is, before its result is counted. An input alive when the
    region's last op ends may be its result: it keeps its memory. Positions are the region's
    own thread's (``owners``: where other threads' work was spliced in)."""
    works = [r.engine != _NO_ENGINE for r, owner in zip(records, owners or [0] * len(records))
             if owner == 0]
    moved = {}
    for position, number in reuses:
        after = next((k for k in range(position + 1, len(works)) if works[k]), None)
        if after is not None:
            moved[number] = (position, after)
    adjusted = []
    for position, number in frees:
        found = moved.get(number)
        if found is not None and found[0] < position <= found[1]:
            position = found[0]
        adjusted.append((position, number))
    return adjusted


# Graph execution of the regions costed last: their key (_graph_key) -> what graph_execution
# returned for it. Read-only: the placements are tuples, and nothing changes a schedule.
_GRAPHS: dict[tuple, tuple[list[OpPlacement | None], GraphSchedule]] = {}
_GRAPHS_MAX = 4


def _graph_key(raw: list[tuple], hw: HardwareProfile, auto_cast: str) -> tuple | None:
    """What graph execution of a capture is a pure function of: the chip (its token in the
    shared costs, new when they are emptied), the auto-cast, and each op's call (its serial
    number, _Call: the op, its metadata and its OpCost) and the storages it reads and writes;
    None where an op has no shared call. Equal regions (the steps of a loop, a test's rounds, a
    region costed again on the chip it ran on) are scheduled once: for Llama-2-7B on meta,
    ~70 ms a region."""
    key: list[Any] = [_shared_costs(hw)[1], auto_cast]
    append = key.append
    for captured in raw:
        if captured[ARGS] is None:
            append(None)
            continue
        call, flow = captured[CALL], captured[FLOW]
        if call is None:
            return None
        append((call[4], tuple(flow[0]), tuple(flow[1])))
    return tuple(key)


def _with_schedule(memory: MemoryUsage | None, schedule: GraphSchedule | None) -> MemoryUsage | None:
    """``memory`` with the SBUF high-water mark and spills of the graph's ``schedule`` (graph
    execution: they depend on the chip); as it is without one."""
    if memory is None or schedule is None:
        return memory
    return dataclasses.replace(memory, sbuf_peak_bytes=schedule.sbuf_peak_bytes,
                               spilled_bytes=schedule.spilled_bytes)


def _graph_ops(costs: list[OpCost | None], raw: list[tuple]) -> list[GraphOp | None]:
    """The region's ops as graph execution needs them (costmodel/execution.py); None: free."""
    return [None if cost is None else GraphOp(
        cost=cost, op=captured[FUNC], args=captured[ARGS], kwargs=captured[KWARGS],
        outputs=captured[OUTPUTS], reads=captured[FLOW][0], writes=captured[FLOW][1])
        for cost, captured in zip(costs, raw)]


def _placed(records: list[OpRecord], placements: list[OpPlacement] | list[OpPlacement | None]
            ) -> list[OpRecord]:
    """``records`` with what an execution mode decided for each (None: kept as it is): a
    placement's fields are named as the record's (tests/test_execution.py checks it)."""
    placed, place_record = [], _place_record
    for record, place in zip(records, placements):
        if place is not None:
            record = place_record(record, place)
        placed.append(record)
    return placed


@dataclasses.dataclass
class Capture:
    """What a simulated region captured, independent of the hardware profile and execution mode:
    its records (eager-timed on the profile it ran with), each op's OpCost (None for free ops),
    and the raw capture (with the tensors' storage numbers, dataflow.py, when it ran in graph
    mode). ``retime`` costs it on another profile or mode without running the code again (the
    calibration scripts); ``auto_cast`` applies to graph execution only, as in the backend."""

    records: list[OpRecord]
    costs: list[OpCost | None]
    raw: list[tuple]
    # Compiled graphs that ran (torch.compile(backend="neuron")): (first op, end, executable)
    segments: list[Segment] = dataclasses.field(default_factory=list)
    # Device memory (None when off): the storages' lifetimes, and where work handed to other
    # threads was spliced in (the owner of each record; None: none was)
    lifetimes: StorageLifetimes | None = None
    owners: list[int] | None = None

    def memory(self, records: list[OpRecord], schedule: GraphSchedule | None) -> MemoryUsage | None:
        """The region's device memory (None when not tracked): Python's lifetimes in eager
        execution; with a graph's ``schedule``, the dataflow's in its order, and its SBUF."""
        if self.lifetimes is None:
            return None
        return _with_schedule(_memory(self.lifetimes, records, self.owners, self.raw, schedule), schedule)

    def utilisation(self, records: list[OpRecord], schedule: GraphSchedule | None,
                    hw: HardwareProfile, auto_cast: str) -> Utilisation:
        """The region's Explorer metrics (costmodel/activity.py) as ``placed`` ran it: the
        whole region by the graph's ``schedule``; else the eager ops as kernels and each
        compiled graph's ops by that graph's own schedule, one after the other ("mixed")."""
        if schedule is not None or not self.segments:
            return region_utilisation(records, self.costs, hw, schedule, auto_cast)
        parts: list[tuple[Utilisation, float]] = []
        done, clock = 0, 0.0
        for first, end, _ in self.segments:
            if first < done or end <= first:
                continue
            if done < first:
                parts.append((region_utilisation(records[done:first], self.costs[done:first], hw, None,
                                                 auto_cast), clock))
                clock += sum(r.device_time_us for r in records[done:first])
            # placed() scheduled this graph just now: _scheduled finds it in _GRAPHS
            graph = _scheduled(self.costs[first:end], self.raw[first:end], hw, auto_cast)[1]
            parts.append((region_utilisation(records[first:end], self.costs[first:end], hw, graph,
                                             auto_cast), clock))
            clock += sum(r.device_time_us for r in records[first:end])
            done = end
        if done < len(records):
            parts.append((region_utilisation(records[done:], self.costs[done:], hw, None, auto_cast),
                          clock))
        # the records keep the region's op indexes: no part's are shifted
        joined = combined((part, start, 0) for part, start in parts)
        assert joined is not None  # every part has one
        return joined

    def retime(self, hw: HardwareProfile, execution: str,
               auto_cast: str = DEFAULT_AUTO_CAST) -> list[OpRecord]:
        return self.placed(hw, execution, auto_cast)[0]

    def placed(self, hw: HardwareProfile, execution: str,
               auto_cast: str = DEFAULT_AUTO_CAST) -> tuple[list[OpRecord], GraphSchedule | None]:
        """``retime``'s records, with the graph's schedule (None in eager execution). In eager
        execution each compiled graph's ops are placed as graph execution places them, one
        graph after the other between the eager ops."""
        if execution == GRAPH:
            if any(cost is not None and captured[FLOW] is None
                   for cost, captured in zip(self.costs, self.raw)):
                raise ValueError("this capture ran in eager mode: it has no dataflow to schedule")
            placements, schedule = _scheduled(self.costs, self.raw, hw, auto_cast)
            return _graph_numbered(_placed(self.records, placements), self.segments), schedule
        eager = eager_placements(self.costs, hw)
        if self.segments:
            eager = _with_graphs(eager, self.segments, self.costs, self.raw, hw, auto_cast)
        return _graph_numbered(_placed(self.records, eager), self.segments), None


# A compiled graph's run in a capture: its first op, the op after its last, its executable.
Segment = tuple[int, int, Executable]


def _scheduled(costs: list[OpCost | None], raw: list[tuple], hw: HardwareProfile,
               auto_cast: str) -> tuple[list[OpPlacement | None], GraphSchedule]:
    """graph_execution of ``raw``'s ops, found in _GRAPHS where an equal graph was scheduled."""
    key = _graph_key(raw, hw, auto_cast)
    found = _GRAPHS.pop(key, None) if key is not None else None
    if found is None:
        found = graph_execution(_graph_ops(costs, raw), hw, auto_cast=auto_cast)
    if key is not None:  # the most recent last
        if len(_GRAPHS) >= _GRAPHS_MAX:
            del _GRAPHS[next(iter(_GRAPHS))]
        _GRAPHS[key] = found
    return found


def _with_graphs(placements: list[OpPlacement], segments: list[Segment],
                 costs: list[OpCost | None], raw: list[tuple], hw: HardwareProfile,
                 auto_cast: str) -> list[OpPlacement]:
    """Eager ``placements`` with each compiled graph's ops placed by graph execution
    (costmodel/graph.py: fusion, SBUF residency, overlap, no per-op launch): the device runs
    the eager ops one after the other and each graph as one block, its ops where its schedule
    puts them from the block's start."""
    starts = {first: (end, _scheduled(costs[first:end], raw[first:end], hw, auto_cast)[0])
              for first, end, _ in segments}
    out: list[OpPlacement] = []
    clock, k = 0.0, 0
    while k < len(placements):
        if k in starts:
            end, scheduled = starts[k]
            for place in scheduled:
                if place is None:
                    out.append(OpPlacement(device_start_us=clock))
                else:
                    out.append(place._replace(device_start_us=clock + place.device_start_us,
                                              group=place.group + k if place.group >= 0 else -1))
            clock += sum(place.device_time_us for place in scheduled if place is not None)
            k = max(end, k + 1) if end > k else k + 1
            continue
        place = placements[k]
        out.append(place._replace(device_start_us=clock))
        clock += place.device_time_us
        k += 1
    return out


def _graph_numbered(records: list[OpRecord], segments: list[Segment]) -> list[OpRecord]:
    """``records`` with the compiled graph run each belongs to (OpRecord.graph)."""
    for number, (first, end, _) in enumerate(segments):
        for record in records[first:end]:
            record.graph = number
    return records


def _segments(marks: list[tuple[int, Executable, bool]], length: int,
              owners: list[int] | None) -> list[Segment]:
    """The compiled graphs' runs from a capture's marks (positions among the region's own
    thread's ops; moved to the records' indexes where work of other threads was spliced in),
    empty ones left out."""
    index = None
    if owners is not None:
        index = [k for k, owner in enumerate(owners) if owner == 0] + [len(owners)]
    found: list[Segment] = []
    open_at: tuple[int, Executable] | None = None
    for position, executable, begins in marks:
        at = index[min(position, len(index) - 1)] if index is not None else position
        if begins:
            if open_at is None:
                open_at = (at, executable)
        elif open_at is not None and open_at[1] is executable:
            if at > open_at[0]:
                found.append((open_at[0], at, executable))
            open_at = None
    if open_at is not None and length > open_at[0]:  # the region ended inside a graph
        found.append((open_at[0], length, open_at[1]))
    return found


def _graph_runs(records: list[OpRecord], segments: list[Segment]) -> list[GraphRun]:
    runs = []
    for first, end, executable in segments:
        ops = records[first:end]
        runs.append(GraphRun(
            key=executable.key, where=executable.where, phase=executable.phase,
            inputs=executable.inputs, first=first, end=end,
            breaks=tuple((b.at(), b.reason) for b in executable.breaks), executable=executable,
            device_start_us=min((r.device_start_us for r in ops), default=0.0),
            device_time_us=sum(r.device_time_us for r in ops)))
    return runs


def _overhead_us(hw: HardwareProfile, execution: str, segments: list[Segment]) -> float:
    """The fixed costs beside the ops' device time: one graph execution per region in graph
    execution, one per compiled graph run in eager execution."""
    if execution == GRAPH or not segments:
        return execution_overhead_us(hw, execution)
    return len(segments) * execution_overhead_us(hw, GRAPH)


# Costed calls shared by the regions of the process, per hardware profile: what _static returns
# for a call. The cost model is a pure function of an op and the metadata of its arguments and
# outputs, so the next call, test or step with the same metadata skips it (~10 us). A shared call
# (_Call) keeps its costs itself, under its profile's token; a call without a key is found by its
# metadata in the profile's dict, (op, argument, keyword and output metadata) -> costs. Emptied,
# with the calls, when a formula is registered (the registry's generation changes); a dict when
# it is full, the calls when they are.
_SHARED_COSTS: dict[int, tuple[HardwareProfile, dict[Any, tuple], int]] = {}
_SHARED_COSTS_MAX = 100_000  # entries per dict
_shared_generation = generation()
_shared_groups: tuple[tuple[str, int], ...] = ()  # _process_groups() at the last check
_tokens = itertools.count()  # a profile's token: never one of an emptied cache's again
# id(OpOverload) -> a free op's prototype (_free_prototype): its names, the same in every region
_FREE_PROTOTYPES: dict[int, tuple[Any, ...]] = {}


def _process_groups() -> tuple[tuple[str, int], ...]:
    """The process groups registered now, (name, ranks) each. A functional collective names its
    group (``group_name``, a str in its call's key) and is costed by the ranks that name
    resolves to; a group destroyed and made again with other ranks takes the same name ("0")."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return ()
    from torch.distributed.distributed_c10d import _world

    return tuple(sorted((str(name), int(group.size())) for group, name in _world.pg_names.items()))


def _forget_stale_costs() -> None:
    """Empty the shared costs and calls if a formula was registered, or the process groups (and
    with them the ranks a collective's group name stands for) changed, since they were made.
    Checked when a region starts, before its calls are made, and when it is costed."""
    global _shared_generation, _shared_groups
    groups = _process_groups()
    if _shared_generation != generation() or groups != _shared_groups:
        clear_cost_cache()
        _shared_generation, _shared_groups = generation(), groups


def _shared_costs(profile: HardwareProfile) -> tuple[dict[Any, tuple], int]:
    """The shared costs of ``profile``: its dict of calls without a key, and its token in the
    shared calls' costs (_forget_stale_costs)."""
    _forget_stale_costs()
    entry = _SHARED_COSTS.get(id(profile))
    if entry is None:  # the entry keeps the profile alive: its id stays its own
        entry = _SHARED_COSTS[id(profile)] = (profile, {}, next(_tokens))
    return entry[1], entry[2]


def clear_cost_cache() -> None:
    """Forget the costs shared between regions (after mutating a profile object in place), and
    the calls that keep them."""
    _SHARED_COSTS.clear()
    _CALLS.clear()
    _GRAPHS.clear()
