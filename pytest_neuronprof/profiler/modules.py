"""Which nn.Module is running: one tracker for every backend, via global forward hooks.

Paths read as the records show them: the root module's type name for the root, then the real
attribute path below it, valid for ``root.get_submodule(path)`` ("up", "mlp.down",
"encoder.layer.0.attention.self.query"). A module is named from the modules running around it:
its parent's attribute name for it, or, when the container between them is never called (a
ModuleList, ModuleDict or Sequential indexed in a forward), its path below the nearest running
ancestor ("layer.0"). A module that is not in the root's tree at all (a function made a module
and held in a global, as the ``kernels`` hub's ``use_kernelized_func`` wrappers are, or a module
made inside a forward) has no path ``get_submodule`` would take: it is transparent, and its ops,
and its own submodules', belong to the module running it. Hooks fire on every thread; only the
profiling thread's modules count (a model running on another thread interleaved would push and
pop into this stack: wrong paths, unbounded growth); the others are told to
``on_other_thread`` (threads.py: work the capture may not see). torch.compile's
OptimizedModule wrapper is transparent, so paths match eager runs.

Activation checkpointing runs a module's forward again during backward. Those recomputed ops
belong to the module they recompute, under the path it had in the forward pass, and are marked as
recomputation (``backward_phase`` is RECOMPUTE while such a forward runs), not credited to the
backward module that asked for them.
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_right
from typing import Any, Callable

import torch

from ..vocabulary import BACKWARD, RECOMPUTE

_get_ident = threading.get_ident
# Dynamo traces the global hooks into a compiled forward (with hooks present it inlines
# Module._call_impl): they return at once when it does, so that they add no graph break and
# nothing to the graph; a compiled graph's ops get their modules from the graph
# (profiler/compiled.py), as its ops run where no hook fires.
_is_compiling = torch.compiler.is_compiling
_current_autograd_node = torch._C._current_autograd_node
_COMPILED = "_orig_mod"  # torch.compile's OptimizedModule keeps the module under this name

# Forward hooks do not run in backward. Instead, a backward op belongs to the module that was
# running when its autograd node was made in the forward pass (the op that made the node ran
# there): autograd numbers the nodes a thread makes in order (Node._sequence_nr), and the tracker
# notes the next number at every module boundary, so a node's number says which module made it,
# a view of a projection's output in the attention module that runs it included.
_sequence_nr = torch._C._autograd._get_sequence_nr  # the number the thread's next node gets
_UNNUMBERED = (1 << 64) - 1  # AccumulateGrad's: made when a leaf is first used, not in order


# A module's attribute name in its parent, found by an earlier tracker (region): (id(parent),
# id(child)) -> (weak references to both, the name). Valid while both are alive (their ids
# theirs) and the parent holds the child under that name: a model profiled region after region
# names its modules once. Bounded; only names of a module's own submodules (not paths through
# containers, not compiled wrappers).
_CHILD_NAMES: dict[tuple[int, int], tuple[Any, Any, str]] = {}
_CHILD_NAMES_MAX = 10_000


def _compiled(module: torch.nn.Module) -> Any:
    """``getattr(module, "_orig_mod", None)`` (the module torch.compile's wrapper holds), without
    the AttributeError that nn.Module.__getattr__ raises, and getattr catches, for the modules
    that have none (most: it cost a tracker ~1.5 us per sibling a child's name was looked past).
    An nn.Module keeps a submodule in ``_modules``; any other attribute is looked up as before."""
    own = getattr(module, "__dict__", None)
    if own is None or _COMPILED in own or hasattr(type(module), _COMPILED):
        return getattr(module, _COMPILED, None)
    modules = own.get("_modules")
    if modules is None:
        return getattr(module, _COMPILED, None)
    return modules.get(_COMPILED)


# The ids of the global hooks trackers have installed (their RemovableHandle ids).
_OURS: set[int] = set()


def _hide_from_compile_warning() -> None:
    """torch.compile's OptimizedModule warns, at every call, that global module hooks will fire
    an extra time for it ("Using `torch.compile(module)` when there are global hooks on
    modules", torch._dynamo.eval_frame, asking ``nn.modules.module._has_any_global_hook``); a
    tracker's hooks ignore the OptimizedModule (``_enter``), so they are left out of that
    question: the warning stays for anyone else's global hooks. Once per process."""
    from torch.nn.modules import module as nn_module

    original = nn_module._has_any_global_hook
    if getattr(original, "_neuronprof", False):
        return

    def _has_any_global_hook() -> bool:
        if not _OURS:
            return bool(original())
        return bool(
            nn_module._global_backward_pre_hooks or nn_module._global_backward_hooks
            or nn_module._global_forward_pre_hooks.keys() - _OURS
            or nn_module._global_forward_hooks.keys() - _OURS
            or nn_module._global_forward_hooks_always_called.keys() - _OURS
            or nn_module._global_forward_hooks_with_kwargs.keys() - _OURS)

    _has_any_global_hook._neuronprof = True  # type: ignore[attr-defined]
    _has_any_global_hook.__wrapped__ = original  # type: ignore[attr-defined]
    nn_module._has_any_global_hook = _has_any_global_hook


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


class ModuleTracker:
    """Keeps ``path``, the dotted path of the module running now on the profiling thread.

    ``tag_autograd``: also note the autograd node numbers at module boundaries, so that
    backward ops find their module (``backward_path``). Subclasses react to boundaries in
    ``entered`` and ``exited`` (``recomputing`` says whether the module's forward is a
    recomputation). Make it on the profiling thread."""

    def __init__(self, tag_autograd: bool = False) -> None:
        self._thread = _get_ident()
        self._tag = tag_autograd
        self.path = ""
        self.root_shown = ""  # the path the root module shows: its type name
        self.last_backward_path = ""
        self.backward_phase = BACKWARD  # RECOMPUTE while a checkpointed forward is recomputed
        self.recomputing = False
        # (module, path relative to the root, path shown in records, recomputed, in the root's
        # tree: False for a transparent module, which has its runner's paths)
        self._stack: list[tuple[torch.nn.Module, str, str, bool, bool]] = []
        self._recompute_depth = 0
        self._names: dict[tuple[int, int], str | None] = {}
        self._below: dict[int, dict[int, str]] = {}  # id(module) -> {id(descendant): its path}
        self._forward_paths: dict[int, tuple[str, str]] = {}  # id(module) -> paths in the forward
        # tag_autograd: the autograd node numbers at which the current path changed, and the
        # path from each on (backward_path); ascending.
        self._numbers: list[int] = []
        self._numbered: list[str] = []
        self._handles: list[Any] = []
        # Told of each module whose forward begins on another thread (threads.py: work the
        # capture may not see); None: ignored. Off the profiling thread's path.
        self.on_other_thread: Callable[[torch.nn.Module], None] | None = None

    def install(self) -> None:
        from torch.nn.modules import module as nn_module

        _hide_from_compile_warning()
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._enter),
            nn_module.register_module_forward_hook(self._exit, always_call=True),
        ]
        _OURS.update(handle.id for handle in self._handles)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
            _OURS.discard(handle.id)
        self._handles = []
        while self._stack:  # a region that ended inside a forward: close what it opened
            self._pop()
        self.path = ""

    def running(self) -> tuple[str, str]:
        """(path below the root, path shown in records) of the module running now; ("", "")
        outside any module."""
        if not self._stack:
            return "", ""
        _, relative, shown, _, _ = self._stack[-1]
        return relative, shown

    def relative(self, shown: str) -> str:
        """The path below the root of a module shown as ``shown`` (the root shows its type name,
        every other module its path below the root)."""
        return "" if shown and shown == self.root_shown else shown

    def entered(self, path: str) -> None:
        """A module's forward begins; ``path`` is now the current path."""

    def exited(self) -> None:
        """The innermost module's forward ended."""

    def _descendants(self, module: torch.nn.Module) -> dict[int, str]:
        below = self._below.get(id(module))
        if below is None:
            below = {}
            for name, child in module.named_modules():
                if name and id(child) not in below:
                    parts = [p for p in name.split(".") if p != _COMPILED]
                    below[id(child)] = ".".join(parts)
            self._below[id(module)] = below
        return below

    def _child_name(self, parent: torch.nn.Module, child: torch.nn.Module) -> str | None:
        """``child``'s path below ``parent`` (its attribute name, or a path through containers
        that are never called), or None when it is not below ``parent``."""
        key = (id(parent), id(child))
        if key in self._names:
            return self._names[key]
        known = _CHILD_NAMES.get(key)
        if known is not None and known[0]() is parent and known[1]() is child \
                and parent._modules.get(known[2]) is child:
            name: str | None = known[2]  # found in an earlier region, and held there still
        else:
            name = next((n for n, m in parent._modules.items()
                         if m is child or (m is not None and _compiled(m) is child)), None)
            if name is None:
                name = self._descendants(parent).get(id(child))
            elif parent._modules[name] is child:  # an attribute of its own: for later regions
                if len(_CHILD_NAMES) >= _CHILD_NAMES_MAX:
                    _CHILD_NAMES.clear()
                _CHILD_NAMES[key] = (weakref.ref(parent), weakref.ref(child), name)
        self._names[key] = name
        return name

    def _relative(self, module: torch.nn.Module) -> str | None:
        """The path of ``module`` below the root, from the nearest running ancestor in the
        root's tree that holds it; None when none does (a module outside the root's tree)."""
        for parent, parent_relative, _, _, held in reversed(self._stack):
            if held:
                name = self._child_name(parent, module)
                if name is not None:
                    return _join(parent_relative, name)
        return None

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if _is_compiling():  # Dynamo tracing a forward with the hooks: nothing of them in its graph
            return
        if _get_ident() != self._thread:
            if self.on_other_thread is not None:
                self.on_other_thread(module)
            return
        if type(module).__name__ == "OptimizedModule":
            return
        # A forward run by backward (no recomputation around it yet) is activation checkpointing
        # recomputing it: it gets the path it had in the forward pass.
        recompute = self._recompute_depth == 0 and _current_autograd_node() is not None
        known = self._forward_paths.get(id(module)) if recompute else None
        held = True
        if known is not None:
            relative, shown = known
        elif self._stack:
            found = self._relative(module)
            if found is None:  # outside the root's tree: transparent (see the module)
                held = False
                _, relative, shown, _, _ = self._stack[-1]
            else:
                relative = shown = found
        else:
            relative, shown = "", type(module).__name__
            self.root_shown = shown
        if held and not recompute and self._recompute_depth == 0:
            self._forward_paths[id(module)] = (relative, shown)
        if recompute or self._recompute_depth:
            self._recompute_depth += 1
            self.backward_phase, self.recomputing = RECOMPUTE, True
        self._stack.append((module, relative, shown, recompute or self._recompute_depth > 0, held))
        self.path = shown
        if self._tag:
            self._number()
        self.entered(shown)

    def _number(self) -> None:
        """Nodes autograd makes from now on are made in ``path`` (until the next boundary)."""
        number = _sequence_nr()
        if self._numbers and self._numbers[-1] == number:  # no node made since the last one
            self._numbered[-1] = self.path
        else:
            self._numbers.append(number)
            self._numbered.append(self.path)

    def _pop(self) -> None:
        _, _, _, recomputed, _ = self._stack.pop()
        self.exited()
        if recomputed:
            self._recompute_depth -= 1
            if not self._recompute_depth:
                self.backward_phase, self.recomputing = BACKWARD, False

    def _exit(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _is_compiling():
            return
        if _get_ident() != self._thread:
            return
        stack = self._stack
        if stack and stack[-1][0] is module:
            self._pop()
        self.path = stack[-1][2] if stack else ""
        if self._tag:
            self._number()

    def backward_path(self, node: Any) -> str:
        """The module of a backward op: the recomputed module's while checkpointing recomputes a
        forward; else the module that was running when the autograd node running the op was
        made (by its number among the boundaries'). A node made before the region, or a leaf's
        AccumulateGrad, takes the last module found: backward walks the graph from a module's
        outputs towards its inputs."""
        if self._recompute_depth:
            return self.path
        number = node._sequence_nr()
        if number != _UNNUMBERED:
            at = bisect_right(self._numbers, number) - 1
            if at >= 0:
                self.last_backward_path = path = self._numbered[at]
                return path
        return self.last_backward_path
