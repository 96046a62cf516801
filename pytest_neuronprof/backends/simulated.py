"""The simulated NeuronCore: capture every ATen op with a TorchDispatchMode, cost it afterwards.

The hot path (``__torch_dispatch__``) only runs the op and appends a tuple of metadata: per-op
decisions are cached per OpOverload, and costing happens after the region ends, so profiling
adds a few microseconds per op. Ops on ``meta`` tensors and under ``FakeTensorMode`` are
captured by their shapes like any others.

Only ops issued on the thread that started the profiler are seen: dispatch modes are
thread-local (autograd's backward on CPU runs on the calling thread and is seen).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..costmodel import COST_MODEL_VERSION, HardwareProfile, TensorMeta, device_time, load_hardware, op_cost
from ..costmodel.engines import FREE_OPS, base_name
from ..result import OpRecord, ProfileResult, ScopeRecord

# What the dispatch mode does with an OpOverload; decided once per OpOverload.
_RECORD, _FREE, _COMPOSITE, _SCOPE_ENTER, _SCOPE_EXIT = range(5)
_SCOPE_OPS = {"profiler::_record_function_enter_new": _SCOPE_ENTER,
              "profiler::_record_function_enter": _SCOPE_ENTER,
              "profiler::_record_function_exit": _SCOPE_EXIT}
_COMPOSITE_KEY = torch._C.DispatchKey.CompositeImplicitAutograd

_current_autograd_node = torch._C._current_autograd_node
_now_ns = time.perf_counter_ns
_Tensor = torch.Tensor


def _plan(func: torch._ops.OpOverload) -> int:
    name = func._schema.name
    if name in _SCOPE_OPS:
        return _SCOPE_OPS[name]
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _COMPOSITE_KEY):
        # Composite ops (linear, layer_norm, ...) reach the mode undecomposed under
        # inference_mode; decomposing them here makes both modes record the same ops.
        return _COMPOSITE
    if getattr(func, "is_view", False) or base_name(name) in FREE_OPS:
        return _FREE
    returns = func._schema.returns
    if not any(isinstance(r.type, (torch.TensorType, torch.ListType, torch.OptionalType))
               for r in returns) and not func._schema.is_mutable:
        return _FREE  # returns no tensor and writes none (prim::device, sym_size, ...)
    return _RECORD


def _meta(value: Any) -> Any:
    if isinstance(value, _Tensor):
        return TensorMeta(tuple(value.shape), value.dtype)
    if type(value) in (list, tuple) and value and any(isinstance(v, _Tensor) for v in value):
        return [TensorMeta(tuple(v.shape), v.dtype) if isinstance(v, _Tensor) else v for v in value]
    return value


def _metas(values: Any) -> list[Any]:
    return [_meta(v) for v in values]


class _ModuleTracker:
    """Keeps the dotted path of the nn.Module running now, via global forward hooks."""

    def __init__(self) -> None:
        self.path = ""
        self._stack: list[tuple[torch.nn.Module, str]] = []
        self._names: dict[tuple[int, int], str] = {}
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.nn.modules import module as nn_module

        self._handles = [
            nn_module.register_module_forward_pre_hook(self._enter),
            nn_module.register_module_forward_hook(self._exit, always_call=True),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _child_name(self, parent: torch.nn.Module, child: torch.nn.Module) -> str:
        key = (id(parent), id(child))
        name = self._names.get(key)
        if name is None:
            name = next((n for n, m in parent._modules.items() if m is child), type(child).__name__)
            self._names[key] = name
        return name

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if not self._stack:
            relative = ""
            self.path = type(module).__name__
        else:
            parent, parent_relative = self._stack[-1]
            name = self._child_name(parent, module)
            relative = f"{parent_relative}.{name}" if parent_relative else name
            self.path = relative
        self._stack.append((module, relative))

    def _exit(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._stack and self._stack[-1][0] is module:
            self._stack.pop()
        if self._stack:
            root = self._stack[0][0]
            self.path = self._stack[-1][1] or type(root).__name__
        else:
            self.path = ""


class _CaptureMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # True (torch's default) wraps __torch_dispatch__ at class creation, which imports
        # torch._dynamo (~1 s) on first use of the plugin.
        return False

    def __init__(self, modules: _ModuleTracker) -> None:
        super().__init__()
        self.modules = modules
        self.raw: list[tuple] = []
        self.plans: dict[Any, int] = {}
        self.scope = ""
        self.scope_stack: list[tuple[str, int]] = []
        self.scopes: list[tuple[str, int, int]] = []
        self.origin_ns = _now_ns()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        plan = self.plans.get(func)
        if plan is None:
            plan = self.plans[func] = _plan(func)
        if plan == _COMPOSITE:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
            plan = self.plans[func] = _RECORD
        elif plan == _SCOPE_ENTER:
            self.scope_stack.append((str(args[0]), _now_ns()))
            self.scope = "/".join(name for name, _ in self.scope_stack)
            return func(*args, **kwargs)
        elif plan == _SCOPE_EXIT:
            if self.scope_stack:
                name, start = self.scope_stack.pop()
                self.scopes.append((name, start, _now_ns()))
                self.scope = "/".join(name for name, _ in self.scope_stack)
            return func(*args, **kwargs)
        start = _now_ns()
        out = func(*args, **kwargs)
        end = _now_ns()
        backward = _current_autograd_node() is not None
        if plan == _FREE:
            self.raw.append((func, None, None, None, self.modules.path, self.scope, backward,
                             start, end))
        else:
            outputs = out if isinstance(out, (tuple, list)) else (out,)
            self.raw.append((func, _metas(args), {k: _meta(v) for k, v in kwargs.items()},
                             _metas(outputs), self.modules.path, self.scope, backward, start, end))
        return out


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


class SimulatedBackend:
    """Runs the region on the host and gives each op the device time of the cost model."""

    name = "simulated"

    def __init__(self, hardware: str = "trn2", core: int = 0) -> None:
        self.profile: HardwareProfile = load_hardware(hardware)
        self.core = core
        self._mode: _CaptureMode | None = None
        self._modules: _ModuleTracker | None = None
        self._thread = 0

    @property
    def version(self) -> str:
        return COST_MODEL_VERSION

    def start(self) -> None:
        self._thread = threading.get_ident()
        self._modules = _ModuleTracker()
        self._modules.install()
        self._mode = _CaptureMode(self._modules)
        self._mode.__enter__()

    def stop(self, correlate_device_time: bool = True) -> ProfileResult:
        mode, modules = self._mode, self._modules
        if mode is None or modules is None:
            raise RuntimeError("SimulatedBackend.stop() called before start()")
        if threading.get_ident() != self._thread:
            raise RuntimeError("a NeuronProfiler must be stopped on the thread that started it")
        mode.__exit__(None, None, None)
        modules.remove()
        self._mode = self._modules = None
        records = self._cost(mode)
        origin = mode.origin_ns
        scopes = [ScopeRecord(name, (start - origin) / 1e3, (end - origin) / 1e3)
                  for name, start, end in sorted(mode.scopes, key=lambda s: s[1])]
        return ProfileResult(
            records=records,
            backend=self.name,
            hardware=self.profile.name,
            core=self.core,
            scopes=scopes,
            correlate_device_time=correlate_device_time,
            notes=["ops issued on other threads than the profiling one are not captured"],
        )

    def _cost(self, mode: _CaptureMode) -> list[OpRecord]:
        """Turn captured calls into OpRecords; costs are cached per (op, argument metadata)."""
        cache: dict[Any, tuple] = {}
        records: list[OpRecord] = []
        origin = mode.origin_ns
        device_clock = 0.0
        for index, (func, args, kwargs, outputs, path, scope, backward, start, end) in enumerate(mode.raw):
            name = func._schema.name
            if args is None:
                shapes, dtypes, cost, timing = [], [], None, None
            else:
                key = (func, _freeze(args), _freeze(kwargs))
                try:
                    cached = cache.get(key)
                except TypeError:  # an unhashable argument: cost it without the cache
                    key, cached = None, None
                if cached is None:
                    cost = op_cost(name, args, kwargs, outputs)
                    cached = (cost, device_time(cost, self.profile),
                              [list(a.shape) if type(a) is TensorMeta else [] for a in args],
                              [str(a.dtype).replace("torch.", "") for a in args if type(a) is TensorMeta])
                    if key is not None:
                        cache[key] = cached
                cost, timing, shapes, dtypes = cached
            records.append(OpRecord(
                index=index,
                name=name,
                overload=func._overloadname,
                input_shapes=shapes,
                input_dtypes=dtypes,
                engine=cost.engine.value if cost else "-",
                flops=cost.flops if cost else 0,
                bytes_read=cost.bytes_read if cost else 0,
                bytes_written=cost.bytes_written if cost else 0,
                launch_us=timing.launch_us if timing else 0.0,
                compute_us=timing.compute_us if timing else 0.0,
                memory_us=timing.memory_us if timing else 0.0,
                device_time_us=timing.device_time_us if timing else 0.0,
                bound=timing.bound if timing else "none",
                costed=cost.costed if cost else True,
                module_path=path,
                scope=scope,
                phase="backward" if backward else "forward",
                host_start_us=(start - origin) / 1e3,
                cpu_time_us=(end - start) / 1e3,
                device_start_us=device_clock,
            ))
            if timing:
                device_clock += timing.device_time_us
        return records
