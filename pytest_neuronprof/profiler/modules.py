"""Which nn.Module is running: one tracker for every backend, via global forward hooks.

Paths read as the records show them: the root module's type name for the root, then the
attribute path below it ("up", "mlp.down"). Hooks fire on every thread; only the profiling
thread's modules count (a model running on another thread interleaved would push and pop into
this stack: wrong paths, unbounded growth). torch.compile's OptimizedModule wrapper is
transparent, so paths match eager runs.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

_Tensor = torch.Tensor
_get_ident = threading.get_ident

# Forward hooks do not run in backward. Instead, the autograd nodes at module boundaries carry
# their module in Node.metadata: a module's outputs are tagged with its path on exit, and its
# inputs with the enclosing path on entry (they were made there). The innermost tag wins.
MODULE_TAG = "pytest_neuronprof.module"


def _tag_grad_fns(values: Any, path: str) -> None:
    for value in values:
        if isinstance(value, _Tensor):
            node = value.grad_fn
            if node is not None:
                node.metadata.setdefault(MODULE_TAG, path)


class ModuleTracker:
    """Keeps ``path``, the dotted path of the module running now on the profiling thread.

    ``tag_autograd``: also tag the autograd nodes at module boundaries, so that backward ops
    find their module (``backward_path``). Subclasses react to boundaries in ``entered`` and
    ``exited``. Make it on the profiling thread."""

    def __init__(self, tag_autograd: bool = False) -> None:
        self._thread = _get_ident()
        self._tag = tag_autograd
        self.path = ""
        self.last_backward_path = ""
        # (module, path relative to the root, path shown in records: the root's type name there)
        self._stack: list[tuple[torch.nn.Module, str, str]] = []
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
        while self._stack:  # a region that ended inside a forward: close what it opened
            self._stack.pop()
            self.exited()
        self.path = ""

    def entered(self, path: str) -> None:
        """A module's forward begins; ``path`` is now the current path."""

    def exited(self) -> None:
        """The innermost module's forward ended."""

    def _child_name(self, parent: torch.nn.Module, child: torch.nn.Module) -> str:
        key = (id(parent), id(child))
        name = self._names.get(key)
        if name is None:
            name = next((n for n, m in parent._modules.items()
                         if m is child or getattr(m, "_orig_mod", None) is child),  # compiled
                        type(child).__name__)
            self._names[key] = name
        return name

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if _get_ident() != self._thread or type(module).__name__ == "OptimizedModule":
            return
        if self._tag:
            _tag_grad_fns(args, self.path)  # inputs were made where we are now, before entering
        stack = self._stack
        if stack:
            parent, parent_relative, _ = stack[-1]
            name = self._child_name(parent, module)
            relative = f"{parent_relative}.{name}" if parent_relative else name
            stack.append((module, relative, relative))
            self.path = relative
        else:
            self.path = type(module).__name__
            stack.append((module, "", self.path))
        self.entered(self.path)

    def _exit(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _get_ident() != self._thread:
            return
        if self._tag:
            _tag_grad_fns(output if isinstance(output, (tuple, list)) else (output,), self.path)
        stack = self._stack
        if stack and stack[-1][0] is module:
            stack.pop()
            self.exited()
        self.path = stack[-1][2] if stack else ""

    def backward_path(self, node: Any) -> str:
        """The module of a backward op: the tag of the autograd node running it, or, for nodes
        made inside a module between its boundaries (untagged), the last tag seen: backward
        walks the graph from a module's outputs towards its inputs."""
        tag = node.metadata.get(MODULE_TAG)
        if tag is not None:
            self.last_backward_path = tag
        return self.last_backward_path
