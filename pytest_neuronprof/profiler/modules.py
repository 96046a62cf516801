"""Which nn.Module is running: one tracker for every backend, via global forward hooks.

Paths read as the records show them: the root module's type name for the root, then the real
attribute path below it, valid for ``root.get_submodule(path)`` ("up", "mlp.down",
"encoder.layer.0.attention.self.query"). A module is named from the modules running around it:
its parent's attribute name for it, or, when the container between them is never called (a
ModuleList, ModuleDict or Sequential indexed in a forward), its path below the nearest running
ancestor ("layer.0"). Hooks fire on every thread; only the profiling thread's modules count (a
model running on another thread interleaved would push and pop into this stack: wrong paths,
unbounded growth); the others are told to ``on_other_thread`` (threads.py: work the capture
may not see). torch.compile's OptimizedModule wrapper is transparent, so paths match eager
runs.

Activation checkpointing runs a module's forward again during backward. Those recomputed ops
belong to the module they recompute, under the path it had in the forward pass, and are marked as
recomputation (``backward_phase`` is RECOMPUTE while such a forward runs), not credited to the
backward module that asked for them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from ..vocabulary import BACKWARD, RECOMPUTE

_Tensor = torch.Tensor
_get_ident = threading.get_ident
_current_autograd_node = torch._C._current_autograd_node
_COMPILED = "_orig_mod"  # torch.compile's OptimizedModule keeps the module under this name

# Forward hooks do not run in backward. Instead, the autograd nodes at module boundaries carry
# their module in Node.metadata: a module's outputs are tagged with its path on exit, and its
# inputs with the enclosing path on entry (they were made there). The innermost tag wins.
MODULE_TAG = "pytest_neuronprof.module"


def _tag_grad_fns(values: Any, path: str) -> None:
    for value in values:
        if isinstance(value, _Tensor):
            node = value.grad_fn
            if node is not None:
                node.metadata.setdefault(MODULE_TAG, path)  # type: ignore[attr-defined]  # a dict; the stub says a method


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


class ModuleTracker:
    """Keeps ``path``, the dotted path of the module running now on the profiling thread.

    ``tag_autograd``: also tag the autograd nodes at module boundaries, so that backward ops
    find their module (``backward_path``). Subclasses react to boundaries in ``entered`` and
    ``exited`` (``recomputing`` says whether the module's forward is a recomputation). Make it on
    the profiling thread."""

    def __init__(self, tag_autograd: bool = False) -> None:
        self._thread = _get_ident()
        self._tag = tag_autograd
        self.path = ""
        self.last_backward_path = ""
        self.backward_phase = BACKWARD  # RECOMPUTE while a checkpointed forward is recomputed
        self.recomputing = False
        # (module, path relative to the root, path shown in records, recomputed)
        self._stack: list[tuple[torch.nn.Module, str, str, bool]] = []
        self._recompute_depth = 0
        self._names: dict[tuple[int, int], str | None] = {}
        self._below: dict[int, dict[int, str]] = {}  # id(module) -> {id(descendant): its path}
        self._forward_paths: dict[int, tuple[str, str]] = {}  # id(module) -> paths in the forward
        self._handles: list[Any] = []
        # Told of each module whose forward begins on another thread (threads.py: work the
        # capture may not see); None: ignored. Off the profiling thread's path.
        self.on_other_thread: Callable[[torch.nn.Module], None] | None = None

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
        while self._stack:  # a region that ended inside a forward: close what it opened
            self._pop()
        self.path = ""

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
        if key not in self._names:
            name = next((n for n, m in parent._modules.items()
                         if m is child or getattr(m, _COMPILED, None) is child), None)
            self._names[key] = name if name is not None else self._descendants(parent).get(id(child))
        return self._names[key]

    def _relative(self, module: torch.nn.Module) -> str:
        """The path of ``module`` below the root, from the nearest running ancestor that holds
        it; the type name below the innermost one when none does (a module held elsewhere)."""
        for parent, parent_relative, _, _ in reversed(self._stack):
            name = self._child_name(parent, module)
            if name is not None:
                return _join(parent_relative, name)
        return _join(self._stack[-1][1], type(module).__name__)

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if _get_ident() != self._thread:
            if self.on_other_thread is not None:
                self.on_other_thread(module)
            return
        if type(module).__name__ == "OptimizedModule":
            return
        if self._tag:
            _tag_grad_fns(args, self.path)  # inputs were made where we are now, before entering
        # A forward run by backward (no recomputation around it yet) is activation checkpointing
        # recomputing it: it gets the path it had in the forward pass.
        recompute = self._recompute_depth == 0 and _current_autograd_node() is not None
        known = self._forward_paths.get(id(module)) if recompute else None
        if known is not None:
            relative, shown = known
        elif self._stack:
            relative = shown = self._relative(module)
        else:
            relative, shown = "", type(module).__name__
        if not recompute and self._recompute_depth == 0:
            self._forward_paths[id(module)] = (relative, shown)
        if recompute or self._recompute_depth:
            self._recompute_depth += 1
            self.backward_phase, self.recomputing = RECOMPUTE, True
        self._stack.append((module, relative, shown, recompute or self._recompute_depth > 0))
        self.path = shown
        self.entered(shown)

    def _pop(self) -> None:
        _, _, _, recomputed = self._stack.pop()
        self.exited()
        if recomputed:
            self._recompute_depth -= 1
            if not self._recompute_depth:
                self.backward_phase, self.recomputing = BACKWARD, False

    def _exit(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _get_ident() != self._thread:
            return
        if self._tag:
            _tag_grad_fns(output if isinstance(output, (tuple, list)) else (output,), self.path)
        stack = self._stack
        if stack and stack[-1][0] is module:
            self._pop()
        self.path = stack[-1][2] if stack else ""

    def backward_path(self, node: Any) -> str:
        """The module of a backward op: the recomputed module's while checkpointing recomputes a
        forward; else the tag of the autograd node running it, or, for nodes made inside a module
        between its boundaries (untagged), the last tag seen: backward walks the graph from a
        module's outputs towards its inputs."""
        if self._recompute_depth:
            return self.path
        tag = node.metadata.get(MODULE_TAG)
        if tag is not None:
            self.last_backward_path = tag
        return self.last_backward_path
