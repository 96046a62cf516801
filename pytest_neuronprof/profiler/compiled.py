"""``torch.compile(backend="neuron")`` on the simulated NeuronCore: TorchNeuron's compiled path.

TorchNeuron's Dynamo backend hands AOTAutograd's forward and backward graphs of ATen ops (no
Inductor) to neuronx-cc, each graph one executable (a NEFF): fused work, intermediates kept on
chip, one launch (the Neuron docs, torch/compile/about-torch-compile: "TorchDynamo -> AOT
Autograd -> StableHLO -> neuronx-cc -> NEFF"). ``neuron_backend`` is that backend without the
chip: it compiles through ``torch._dynamo.backends.common.aot_autograd`` and each graph it gets
becomes an ``Executable`` whose runner runs the graph's ATen ops as they are (on cpu, meta or the
simulated neuron device) and tells the capture running on its thread, if any, where the graph
begins and ends and which module each of its ops belongs to (``GraphListener``): the simulated
backend costs the ops between those marks as one compiled graph (costmodel/graph.py), and every
other op of the region eagerly.

It is registered as the ``neuron`` Dynamo backend by the package's entry point
(``torch_dynamo_backends``): ``torch.compile(model, backend="neuron")`` works wherever the package
is installed and no other ``neuron`` backend (TorchNeuron's) was registered first. With the
simulated neuron device (``--neuron-device-alias``, ``teach_dynamo``) it is also torch.compile's
default backend, as TorchNeuron's is on a Neuron device ("auto-selected when running on a Neuron
device", torch/compile/reference-torch-compile), and Dynamo traces neuron tensors as tensors.

Inside a profiled region, Dynamo compiles only while no dispatch mode that wants the eager ops
is active (``any_torch_dispatch_mode_on_stack``, torch 2.10+): the capture answers
``ignore_compile_internals()`` with ``compiles_under_capture``, True for a frame Dynamo is about
to compile with this backend, False otherwise, so other backends step aside as before (their ops
costed one by one, ``stepped_aside`` says so). Dynamo marks a frame it skipped that way skipped
for good (its code, whatever later calls it: ``fullgraph=True`` then failed or passed with test
order); the capture gives those codes back their default when the region ends
(``restore_frames``). The guard Dynamo keeps on that switch makes code compiled outside a region
compile once more inside one (``ignore_compile_internals`` is False as the mode enters):
``neuron_backend`` gives the same graph the same ``Executable``, so counts do not depend on it.

Graph breaks and compiled graphs are facts of each executable, fixed when it is compiled and the
same on every later run (so a test's counts do not depend on what ran before it): the break that
ended its Dynamo graph (``gm.compile_subgraph_reason``) and the one it resumes after (a resume
function's, with Dynamo's reason from ``graph_break_reasons``: so a break before any op, which
ends no graph, counts too), each Dynamo's reason and the user's file and line; and its key (the
function, the phase, its input shapes and dtypes and a digest of its code). Files are kept as
the code names them and shown relative to a root the caller gives (``key_at``, ``GraphBreak.at``:
the plugin's is the folder baseline keys are relative to), never the working directory's.

What the backend changes of Dynamo's graph before AOTAutograd, as the device runs it
(``_as_the_device_runs_it``): ``scaled_dot_product_attention`` on meta and neuron tensors is the
fused kernel eager costs (AOTAutograd would decompose it into its math), and
``torch.tensor(..., device="neuron")`` an empty tensor of its shape (the device has no values).
``dynamic=True`` is rejected, as TorchNeuron rejects it (``_reject_dynamic``).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import torch

from ..errors import ConfigError
from ..vocabulary import BACKWARD, FORWARD

NEURON_BACKEND = "neuron"
# The simulated device's type, neuron_device.NAME (which imports this module: not imported here)
NEURON_DEVICE = "neuron"
# What TorchNeuron uses, for the note a region gives of another backend.
TORCHNEURON_BACKEND = f'backend="{NEURON_BACKEND}"'
MAX_INPUTS_NAMED = 3  # of an executable's inputs (not parameters), in its name
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_(?P<line>\d+)$")
_SOURCE_ROOT = re.compile(r"^[LG]\['(?P<name>[^']*)'\]")
_SUBSCRIPT = re.compile(r"\[['\"]?([^\]'\"]+)['\"]?\]")


@dataclass(frozen=True)
class GraphBreak:
    """Where Dynamo broke a function's graph, and why: the user's line, the user's calls that
    led there from the compiled function, and Dynamo's reason."""

    file: str  # as the code names it (absolute): baselines name it relative to a root (``at``)
    line: int
    reason: str  # Dynamo's reason, its first line
    # The user's call sites from the compiled function down to ``line`` (file, line), outermost
    # first: a helper that breaks the graph, called from two lines, is two breaks, not one
    via: tuple[tuple[str, int], ...] = ()

    def at(self, root: str | None = None) -> str:
        """``tests/test_model.py:12`` (``tests/test_model.py:12 via tests/test_model.py:30`` for
        a break in a function the compiled one called there): files below ``root`` (the
        working directory when None; the plugin passes the folder its baseline keys are
        relative to)."""
        if not self.file:
            return "<unknown>"
        calls = ", ".join(f"{source_path(file, root)}:{line}" for file, line in self.via)
        return f"{source_path(self.file, root)}:{self.line}" + (f" via {calls}" if calls else "")

    def describe(self, root: str | None = None) -> str:
        return f"graph break at {self.at(root)}: {self.reason}"


@dataclass
class Executable:
    """One compiled graph, as TorchNeuron makes one executable of it: a forward or backward graph
    of one Dynamo graph of the function ``name`` (defined at ``file``:``line``)."""

    name: str  # "Block.forward"
    file: str  # as its code names it (absolute); shown relative to a root (``function``)
    line: int
    phase: str  # vocabulary.FORWARD or BACKWARD
    inputs: str  # the shapes and dtypes of its inputs that are not parameters or buffers
    digest: str  # of its code and inputs (not of where its file lies): equal graphs, equal digests
    # the breaks that end its Dynamo graph or that it resumes after (graph_breaks), if any
    breaks: tuple[GraphBreak, ...] = ()
    # the type name of the module whose forward was compiled ("" for a function): the module
    # path of its own ops when no module is seen running (its hooks are compiled away)
    root_type: str = ""
    # module paths below the module running it, one per path mark its runner passes
    paths: list[tuple[str, str]] = field(default_factory=list)

    def function(self, root: str | None = None) -> str:
        """``Block.forward (tests/test_model.py:30)``, its file below ``root``."""
        if not self.file:
            return self.name
        return f"{self.name} ({source_path(self.file, root)}:{self.line})"

    def key_at(self, root: str | None = None) -> str:
        """What a baseline names it by: the function, phase and inputs, and the digest; its file
        relative to ``root``, the folder the test's baseline key is relative to."""
        return f"{self.function(root)} {self.phase} [{self.inputs}] {self.digest}"

    def where_at(self, root: str | None = None) -> str:
        """The function and phase: a function compiled for two shapes has two keys, one where."""
        return f"{self.function(root)} {self.phase}"

    @property
    def key(self) -> str:
        return self.key_at()

    @property
    def where(self) -> str:
        return self.where_at()


class GraphListener(Protocol):
    """What a capture does with a compiled graph that runs on its thread."""

    def graph_began(self, executable: Executable) -> None: ...

    def graph_path(self, paths: tuple[str, str]) -> None: ...

    def graph_ended(self, executable: Executable) -> None: ...

    def stepped_aside(self, backend: str, code: types.CodeType | None) -> None: ...


# Thread id -> the capture running there. Set by the simulated backend while a region runs.
_LISTENERS: dict[int, GraphListener] = {}
_get_ident = threading.get_ident


def listen(listener: GraphListener) -> None:
    _LISTENERS[_get_ident()] = listener


def stop_listening(listener: GraphListener) -> None:
    if _LISTENERS.get(_get_ident()) is listener:
        del _LISTENERS[_get_ident()]


def _mark_path(index: int) -> None:
    """Called by a compiled graph where its ops' module changes (a node ``_with_path_marks``
    inserts): the running executable's ``paths[index]``."""
    listener = _LISTENERS.get(_get_ident())
    if listener is not None:
        executable = _RUNNING.get(_get_ident())
        if executable is not None:
            listener.graph_path(executable.paths[index])


_RUNNING: dict[int, Executable] = {}  # thread id -> the executable running there


class _Runner:
    """A compiled graph as AOTAutograd calls it (boxed: one list of arguments): its ATen ops run
    as they are, between the marks that tell the thread's capture where the graph is."""

    def __init__(self, gm: torch.fx.GraphModule, executable: Executable,
                 symbols: Sequence[tuple[int, str]] = ()) -> None:
        self._forward = gm.forward  # not gm(): nn.Module hooks would see a GraphModule run
        self.executable = executable
        # A graph Dynamo made dynamic (its automatic dynamic shapes, after a second shape) takes
        # sizes as arguments: (position, symbol) of each. TorchNeuron compiles a graph per shape
        # (dynamic shapes "not yet available", torch/compile/reference-torch-compile): each
        # distinct set of sizes it runs with is an executable of its own (``_concrete``).
        self._symbols = tuple(symbols)
        self._by_sizes: dict[tuple[int, ...], Executable] = {}
        # An attribute of the instance: AOTAutograd wraps the backward (functools.wraps copies
        # the instance's __dict__, not the class's)
        self._boxed_call = True

    def __call__(self, args: list[Any]) -> Any:
        listener = _LISTENERS.get(_get_ident())
        if listener is None:
            return self._forward(*args)
        executable = self._concrete(args) if self._symbols else self.executable
        thread = _get_ident()
        outer = _RUNNING.get(thread)
        _RUNNING[thread] = executable
        listener.graph_began(executable)
        try:
            if _checking_custom_ops():
                # AOTAutograd's check of custom ops' aliasing, a mode it pushes for a compiled
                # function's first call, defers every op on a tensor type it does not know (a
                # neuron tensor) to the tensor, past the capture: it is off while the graph runs
                from torch.utils._python_dispatch import _pop_mode_temporarily

                with _pop_mode_temporarily():
                    return self._forward(*args)
            return self._forward(*args)
        finally:
            listener.graph_ended(executable)
            if outer is None:
                _RUNNING.pop(thread, None)
            else:
                _RUNNING[thread] = outer


    def _concrete(self, args: list[Any]) -> Executable:
        sizes = tuple(int(args[k]) for k, _ in self._symbols)
        found = self._by_sizes.get(sizes)
        if found is None:
            base = self.executable
            inputs = base.inputs
            for (_, symbol), size in zip(self._symbols, sizes):
                inputs = re.sub(rf"\b{re.escape(symbol)}\b", str(size), inputs)
            digest = _digest(base.digest, repr(sizes))
            found = _EXECUTABLES.setdefault((base.file, base.line, digest, base.breaks), Executable(
                base.name, base.file, base.line, base.phase, inputs, digest, base.breaks,
                base.root_type, base.paths))
            self._by_sizes[sizes] = found
        return found


def _checking_custom_ops() -> bool:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return type(_get_current_dispatch_mode()).__name__ == "_AnalyzeCustomOpInputOutputMode"


# -- where a graph comes from ------------------------------------------------------------------

def source_path(filename: str, root: str | None = None) -> str:
    """A file as baselines name it on every machine and from every working directory: below
    site-packages for a library; else below ``root`` (the folder the plugin makes baseline keys
    relative to: the ini file's, or pytest's rootdir; the working directory when None); else its
    name."""
    path = filename.replace(os.sep, "/")
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    base = os.getcwd() if root is None else str(root)
    try:
        relative = os.path.relpath(os.path.realpath(filename), os.path.realpath(base))
    except ValueError:  # another drive
        relative = ""
    relative = relative.replace(os.sep, "/")
    if relative and not relative.startswith("../") and relative != "..":
        return relative
    return os.path.basename(filename)


def _first_line(text: str) -> str:
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line[:200]


def _function(code: types.CodeType | None) -> tuple[str, str, int]:
    """(name, file, first line) of the function being compiled: ``Block.forward``; a resume
    function Dynamo made after a break is named after the function it resumes."""
    if code is None:
        return "<unknown>", "", 0
    found = _RESUME.match(code.co_name)
    if found is not None:
        original = _resumed_code(code)
        if original is not None:  # the function it resumes, as its first graph names it
            code = original
        else:
            return found.group("name"), code.co_filename, code.co_firstlineno
    return getattr(code, "co_qualname", code.co_name), code.co_filename, code.co_firstlineno


def _resumed_code(code: types.CodeType) -> types.CodeType | None:
    """The code of the function a resume function Dynamo made resumes (its
    ``ContinueExecutionCache`` keeps it), or None."""
    try:
        from torch._dynamo.resume_execution import ContinueExecutionCache

        meta = ContinueExecutionCache.generated_code_metadata.get(code)
    except (ImportError, AttributeError, TypeError):
        return None
    original = getattr(meta, "code", None)
    return original if isinstance(original, types.CodeType) else None


def _frame() -> tuple[types.CodeType | None, str, str]:
    """The code Dynamo is compiling now (the backend runs inside its translation), the name of
    its first argument, and that argument's type name where it is a module (the module whose
    forward it is: what names the ops outside its submodules)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except (ImportError, AttributeError, IndexError, AssertionError):
        return None, "", ""
    code = getattr(tx, "f_code", None)
    if code is None or not code.co_argcount:
        return code, "", ""
    local = getattr(tx, "f_locals", None) or {}
    # a method's self; a resume function Dynamo made after a break takes it among its arguments
    for name in ("self", code.co_varnames[0]):
        if isinstance(local.get(name), torch.nn.Module):
            return code, name, type(local[name]).__name__
    return code, code.co_varnames[0], ""


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _break(reason: Any) -> GraphBreak:
    """A break from Dynamo's ``GraphCompileReason``: its reason's first line, at the user's
    innermost line, with the user's call sites that led there (torch's own frames, such as
    ``nn.Module.__call__``, left out: they differ between torch versions, not between changes)."""
    stack = [(frame.filename, frame.lineno) for frame in getattr(reason, "user_stack", None) or ()]
    file, line = stack[-1] if stack else ("", 0)
    via = tuple(frame for frame in stack[:-1] if not frame[0].startswith(_TORCH_DIR))
    return GraphBreak(file, line, _first_line(getattr(reason, "reason", "")) or "graph break", via)


def _resumed_after(code: types.CodeType | None) -> GraphBreak | None:
    """The break a resume function Dynamo made resumes after (its name says the line: 
    ``torch_dynamo_resume_in_forward_at_12``), with Dynamo's reason for it (its
    ``graph_break_reasons``, whose stack passes that line). A break before any op was traced
    (a ``print`` first thing in ``forward``) ends no graph that reaches a backend: only the
    graph after it says it."""
    found = _RESUME.match(code.co_name) if code is not None else None
    if code is None or found is None:
        return None
    line = int(found.group("line"))
    try:
        from torch._dynamo.utils import graph_break_reasons
    except ImportError:  # pragma: no cover - torch without it
        graph_break_reasons = []
    for reason in reversed(graph_break_reasons):
        if any(frame.filename == code.co_filename and frame.lineno == line
               for frame in getattr(reason, "user_stack", None) or ()):
            return _break(reason)
    return GraphBreak(code.co_filename, line, "graph break")


def _breaks_of(gm: torch.fx.GraphModule, code: types.CodeType | None) -> tuple[GraphBreak, ...]:
    """The graph breaks of this Dynamo graph: the one that ended it (``compile_subgraph_reason``)
    and the one its function resumes after, where there are; the same break seen from both
    sides is one (a test's breaks are a set)."""
    found: list[GraphBreak] = []
    resumed = _resumed_after(code)
    if resumed is not None:
        found.append(resumed)
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is not None and getattr(reason, "graph_break", False):
        ended = _break(reason)
        if ended not in found:
            found.append(ended)
    return tuple(found)


def _is_parameter(node: torch.fx.Node) -> bool:
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    name: Any = getattr(source, "name", "") if source is not None else ""
    try:
        name = name() if callable(name) else name  # a method in some torch versions
    except (AttributeError, TypeError):
        name = ""
    name = name if isinstance(name, str) else str(name)
    return "_parameters" in name or "_buffers" in name


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    return repr(value)


def _inputs(gm: torch.fx.GraphModule) -> tuple[str, list[Any]]:
    """The shapes and dtypes of the graph's inputs other than parameters and buffers (at most
    MAX_INPUTS_NAMED, then "+N more"), and Dynamo's fake value of every input."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = [n.meta.get("example_value") for n in placeholders]
    named = [_describe(v) for n, v in zip(placeholders, fakes)
             if isinstance(v, torch.Tensor) and not _is_parameter(n)]
    more = len(named) - MAX_INPUTS_NAMED
    text = ", ".join(named[:MAX_INPUTS_NAMED]) + (f", +{more} more" if more > 0 else "")
    return text, fakes


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\n".join(parts).encode("utf-8", "backslashreplace"),
                           digest_size=4).hexdigest()


def _module_path(stack: Any, self_name: str) -> tuple[str, str]:
    """(root module's type name, path below it) of a node's innermost module (its
    ``nn_module_stack``): ``L['self'].block.layers.0`` -> ("", "block.layers.0"); a module that
    is not the compiled frame's ``self`` is named from its outermost module, whose type names the
    root (as the records name a region's first module)."""
    if not stack:
        return "", ""
    entries = list(stack.values())
    first, last = str(entries[0][0]), str(entries[-1][0])

    def below(path: str) -> tuple[str, str]:
        found = _SOURCE_ROOT.match(path)
        root = found.group("name") if found else ""
        rest = _SUBSCRIPT.sub(r".\1", path[found.end():] if found else path)
        parts = [p for p in rest.replace("._modules.", ".").split(".")
                 if p and p not in ("_orig_mod", "_modules")]
        return root, ".".join(parts)

    root, inner = below(last)
    if root == self_name:  # the compiled frame's own module: relative to the running one
        return "", inner
    _, outer = below(first)
    kind = entries[0][1]
    type_name = getattr(kind, "__name__", str(kind).rsplit(".", 1)[-1])
    relative = inner[len(outer) + 1:] if outer and inner.startswith(outer + ".") else (
        "" if inner == outer else inner)
    return type_name, relative


def _with_path_marks(gm: torch.fx.GraphModule, phase: str, self_name: str) -> list[tuple[str, str]]:
    """Insert a ``_mark_path(k)`` call before each node whose module differs from the one
    before it; the paths, in mark order."""
    key = "nn_module_stack" if phase == FORWARD else "fwd_nn_module_stack"
    paths: list[tuple[str, str]] = []
    current: tuple[str, str] | None = None
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        stack = node.meta.get(key) or node.meta.get("nn_module_stack")
        path = _module_path(stack, self_name)
        if path != current:
            with gm.graph.inserting_before(node):
                gm.graph.call_function(_mark_path, (len(paths),))
            paths.append(path)
            current = path
    if paths:
        gm.recompile()
    return paths


# Executables by function, code and breaks: a graph compiled again (the guard on the capture's
# dispatch-mode switch, torch._dynamo.reset()) is the same executable.
_EXECUTABLES: dict[tuple[str, int, str, tuple[GraphBreak, ...]], Executable] = {}


def _compiler(function: tuple[str, str, int], inputs: str, breaks: tuple[GraphBreak, ...],
              phase: str, self_name: str, root_type: str
              ) -> Callable[[torch.fx.GraphModule, Sequence[Any]], _Runner]:
    name, file, line = function

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> _Runner:
        signature = ", ".join(_describe(v) for v in example_inputs)
        # of the function's name and line, not of where its file lies: the same on every machine
        digest = _digest(f"{name}:{line}", phase, signature, gm.code)
        found = (file, line, digest, breaks)
        executable = _EXECUTABLES.get(found)
        fresh = Executable(name, file, line, phase, inputs, digest, breaks, root_type)
        fresh.paths = _with_path_marks(gm, phase, self_name)
        if executable is None or executable.paths != fresh.paths:
            executable = _EXECUTABLES[found] = fresh
        symbols = [(k, str(v)) for k, v in enumerate(example_inputs) if isinstance(v, torch.SymInt)]
        return _Runner(gm, executable, symbols)
    return compile_graph


class DynamicShapesRejected(ConfigError):
    """``torch.compile(..., backend="neuron", dynamic=True)``: rejected, as TorchNeuron rejects it."""


def _reject_dynamic() -> None:
    """TorchNeuron's backend reference (aws-neuron-sdk torch/compile/reference-torch-compile.rst,
    its table of torch.compile parameters): "dynamic: Unsupported. dynamic=True is rejected
    during compilation. Shapes that vary between steps run, recompiling per new shape". Dynamo
    compiles a ``dynamic=True`` function with ``assume_static_by_default`` off (its
    ``make_set_enable_dynamic``), as it does everything when that setting is turned off."""
    from torch._dynamo import config as dynamo_config

    if getattr(dynamo_config, "assume_static_by_default", True):
        return
    raise DynamicShapesRejected(
        'torch.compile(..., backend="neuron", dynamic=True): TorchNeuron rejects dynamic=True during '
        "compilation (its torch.compile reference: native dynamic shapes are not yet available), "
        "and so does the simulated neuron backend. Leave dynamic unset (or dynamic=False): a new "
        "input shape then compiles a graph of its own, as on Trainium (pad or bucket inputs to "
        "keep their number down); torch._dynamo.config.assume_static_by_default=False is "
        "dynamic=True for every function")


# -- what TorchNeuron compiles that AOTAutograd would not give it as such ----------------------

def _fusable(query: Any, key: Any, value: Any, attn_mask: Any, enable_gqa: bool) -> bool:
    """Whether scaled_dot_product_attention on these tensors is one fused kernel, costed as
    eager costs it on a device without values (backends/attention.py): 4-d query, key and
    value on meta or the simulated neuron device, the value's head dimension the query's (the
    kernel's output is laid out as the query), heads equal or grouped (``enable_gqa``), and no
    mask that needs a gradient (which the kernel does not give, as eager falls back for)."""
    tensors = (query, key, value)
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in tensors):
        return False
    if query.device.type not in ("meta", NEURON_DEVICE):
        return False
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        return False
    heads, kv_heads = query.shape[1], key.shape[1]
    same = bool(heads == kv_heads) or (enable_gqa and bool(heads % kv_heads == 0))
    return same and bool(value.shape[-1] == query.shape[-1]) and bool(key.shape[-1] == query.shape[-1])


def _fused_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                     enable_gqa: bool = False) -> Any:
    """``scaled_dot_product_attention`` in a compiled graph: the fused flash kernel eager and
    ``execution="graph"`` record for it on meta and on the simulated neuron device (its
    forward and backward ops, which AOTAutograd keeps as they are), where torch would have
    AOTAutograd decompose it into its math (the attention matrix built: no fused kernel is
    registered for those devices); elsewhere torch's own."""
    if _fusable(query, key, value, attn_mask, enable_gqa):
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
        return flash(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return torch._C._nn.scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _as_the_device_runs_it(gm: torch.fx.GraphModule) -> None:
    """Dynamo's graph as TorchNeuron's compiler takes it: attention as the fused kernel
    (``_fused_attention``), and ``torch.tensor(...)`` of the simulated neuron device as the
    empty tensor of its shape it is there (the device has no values; a constant it holds is
    part of the executable)."""
    attention = (torch._C._nn.scaled_dot_product_attention,
                 torch.nn.functional.scaled_dot_product_attention)
    factories = (torch.tensor, torch.as_tensor)
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in attention:
            node.target = _fused_attention
            changed = True
        elif node.target in factories:
            value = node.meta.get("example_value")
            if not (isinstance(value, torch.Tensor) and value.device.type == NEURON_DEVICE
                    and all(isinstance(n, int) for n in (*value.shape, *value.stride()))):
                continue
            with gm.graph.inserting_before(node):
                made = gm.graph.call_function(torch.empty_strided, (
                    tuple(value.shape), tuple(value.stride())), {
                    "dtype": value.dtype, "device": value.device,
                    "requires_grad": bool(node.kwargs.get("requires_grad", False))})
            made.meta.update(node.meta)
            node.replace_all_uses_with(made)
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
    """TorchNeuron's ``torch.compile`` backend on the simulated chip: AOTAutograd's forward and
    backward graphs of ATen ops, each an ``Executable``; no Inductor."""
    from torch._dynamo.backends.common import aot_autograd

    _reject_dynamic()
    code, self_name, root_type = _frame()
    function = _function(code)
    inputs, fakes = _inputs(gm)
    breaks = _breaks_of(gm, code)
    _as_the_device_runs_it(gm)
    # AOTAutograd fakes the inputs it is given: Dynamo's fake values of them where it has them
    # (a neuron tensor cannot be faked again under the fake mode AOTAutograd runs in).
    given = fakes if fakes and all(f is not None for f in fakes) else list(example_inputs)
    backend = aot_autograd(fw_compiler=_compiler(function, inputs, breaks, FORWARD, self_name,
                                                 root_type),
                           bw_compiler=_compiler(function, inputs, breaks, BACKWARD, self_name,
                                                 root_type),
                           keep_inference_input_mutations=True)
    return backend(gm, given)


neuron_backend.compiler_name = NEURON_BACKEND  # type: ignore[attr-defined]


# -- which compiles happen under a capture -----------------------------------------------------

_CATCH_ERRORS: list[types.CodeType] = []  # CatchErrorsWrapper.__call__'s code, once found


def _catch_errors_code() -> types.CodeType | None:
    if not _CATCH_ERRORS:
        module = sys.modules.get("torch._dynamo.convert_frame")
        wrapper = getattr(module, "CatchErrorsWrapper", None)
        if wrapper is None:
            return None
        _CATCH_ERRORS.append(wrapper.__call__.__code__)
    return _CATCH_ERRORS[0]


def backend_name(backend: Any) -> str:
    """The name torch.compile was given for ``backend`` (a Dynamo callback or a backend)."""
    seen = 0
    while backend is not None and seen < 8:
        seen += 1
        if backend is neuron_backend or getattr(backend, "compiler_fn", None) is neuron_backend:
            return NEURON_BACKEND
        name = getattr(backend, "compiler_name", None)
        if isinstance(name, str):
            return name
        inner = getattr(backend, "_torchdynamo_orig_backend", None)
        if inner is None:
            break
        backend = inner
    return getattr(backend, "__name__", type(backend).__name__)


def compiles_under_capture() -> bool:
    """The capture's ``ignore_compile_internals()``: True when Dynamo asks (its frame callback,
    ``CatchErrorsWrapper.__call__``, is the caller's caller) about a frame it would compile with
    ``neuron_backend``, so that the compiled graphs run under the capture; False otherwise (the
    mode entering, or another backend: Dynamo steps aside and the ops run one by one, which the
    thread's capture is told of)."""
    frame: Any = sys._getframe(2)  # whoever asked the capture (its classmethod is frame 1)
    if frame.f_code.co_name != "any_torch_dispatch_mode_on_stack":
        return False  # the mode entering: Dynamo's guard on the switch (see the module)
    code = _catch_errors_code()
    if code is None:
        return False
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code is code:
            break
        frame = frame.f_back
    else:
        return False
    local = frame.f_locals
    name = backend_name(local.get("self"))
    if name == NEURON_BACKEND:
        return True
    listener = _LISTENERS.get(_get_ident())
    if listener is not None:
        user = local.get("frame")
        skipped = None if local.get("is_skipfile") else getattr(user, "f_code", None)
        listener.stepped_aside(name, skipped)
    return False


def restore_frames(codes: Sequence[types.CodeType]) -> None:
    """Give the codes Dynamo skipped because a capture was running their default strategy back:
    Dynamo's skip of a frame under a dispatch mode applies to its code for good, so a function
    called once in a region was never compiled again (``fullgraph=True`` failing after, and only
    after, a profiled test ran the same code)."""
    if not codes:
        return
    try:
        from torch._C._dynamo.eval_frame import (_FrameAction, _FrameExecStrategy,
                                                 set_code_exec_strategy)
    except ImportError:
        return
    default = _FrameExecStrategy(_FrameAction.DEFAULT, _FrameAction.DEFAULT)
    for code in codes:
        set_code_exec_strategy(code, default)


def other_backend_note(backend: str) -> str:
    """What a profile says once of a compile with another backend inside it."""
    return (f"torch.compile(backend={backend!r}) ran op by op under the simulated backend (each op "
            f"costed as eager); TorchNeuron compiles with {TORCHNEURON_BACKEND}, which the profile "
            "costs as compiled graphs: pass it to torch.compile")


def supported() -> bool:
    """Whether this torch lets a dispatch mode keep Dynamo compiling under it
    (``ignore_compile_internals``, consulted by ``any_torch_dispatch_mode_on_stack``)."""
    from torch.utils import _python_dispatch

    return hasattr(_python_dispatch, "any_torch_dispatch_mode_on_stack")


# -- the simulated neuron device ---------------------------------------------------------------

_TAUGHT: list[bool] = []


def _answer_device_queries(tensor_type: type) -> None:
    """FakeTensorMode answers a tensor's device query itself, for fake tensors only: AOTAutograd
    fakes a backend's real inputs under it (``aot_eager``, any ``aot_autograd`` backend), and a
    neuron tensor's device is a query its own ``__torch_dispatch__`` answers. The fake mode's
    handler passes neuron tensors on to it; every other tensor goes to torch's."""
    from torch._subclasses import fake_tensor

    handlers = fake_tensor._DISPATCH_META_HANDLERS
    query = torch.ops.prim.device.default
    original = handlers[query]

    def device_handler(args: Sequence[object]) -> Any:
        if len(args) == 1 and type(args[0]) is tensor_type:
            with torch.utils._python_dispatch._disable_current_modes():
                return args[0].device  # type: ignore[attr-defined]
        return original(args)

    handlers[query] = device_handler


def teach_dynamo(tensor_type: type) -> None:
    """What TorchNeuron's device gives Dynamo, for the simulated one's tensors (``tensor_type``):
    Dynamo traces them as tensors (not as objects it graph-breaks on: it only takes a subclass
    with a ``__torch_dispatch__`` of its own for a tensor when it is a traceable wrapper
    subclass), and torch.compile's default backend is ``neuron``. Imports torch._dynamo."""
    if _TAUGHT:
        return
    import torch._dynamo  # noqa: F401
    from torch._dynamo.backends import registry
    from torch._dynamo.variables.builder import VariableBuilder

    impl = getattr(VariableBuilder, "_type_dispatch_impl", None)
    tables = [impl(flag) for flag in (False, True)] if impl is not None else [
        VariableBuilder._type_dispatch()]
    for table in tables:
        table[tensor_type] = VariableBuilder.wrap_tensor
    _answer_device_queries(tensor_type)
    if NEURON_BACKEND not in registry._COMPILER_FNS:
        registry._lazy_import()  # the entry point, where the package is installed
        if NEURON_BACKEND not in registry._BACKENDS:
            registry.register_backend(neuron_backend, name=NEURON_BACKEND)
    set_default = getattr(registry, "set_default_backend", None)
    if set_default is not None and registry.get_default_backend() == "inductor":
        set_default(NEURON_BACKEND)
    _TAUGHT.append(True)
