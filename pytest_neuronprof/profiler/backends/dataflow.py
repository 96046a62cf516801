"""Which memory each tensor of a captured region lives in: the identity graph execution follows.

Graph execution (costmodel/graph.py) links an op to the ops that produced the tensors it reads,
so the capture names each tensor's memory. Views, ``.data`` and ``detach()`` share their base's
storage, so the name is the storage's, not the Python tensor's. But a storage's address
(``untyped_storage()._cdata``) is reused once the storage is freed: a new tensor allocated where
a dead intermediate was looked like that intermediate, gained its producer as a dependency and
its residency, and the bytes a baseline recorded changed with the allocator's luck (test order,
earlier tests, hash seed).

``StorageIdentity`` gives each storage a capture-local number the first time the capture sees
it (an op's output, or an input alive before the region), counting from 0 in the order the
capture meets them. Each number is kept with a weak reference to its storage: a storage found at
a known address is that number's only while the reference still points to it, so a storage
allocated where a freed one lived gets a number of its own. The numbers are a pure function of
the region's op sequence: equal runs give equal numbers, whatever the addresses, and nothing is
kept alive (a storage's Python object lives exactly as long as the storage: PyTorch preserves
it, so one storage is always the same object; a storage whose object were not preserved would
get a new number at each sight, never another storage's). Tensors without a storage (sparse) are named by
the tensor object, in the same way. Graph execution's schedule and any order-invariant
scheduling built on it take these numbers as the tensors' names.

Cost: a dictionary look-up and a weak reference call per tensor; a fresh storage adds a weak
reference (no callback: nothing runs when the storage is freed). The table holds one entry per
distinct address seen, freed or not, so it is bounded by the allocator's footprint during the
region, not by its number of ops; it goes with the capture.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

_Tensor = torch.Tensor
_ref = weakref.ref


class StorageIdentity:
    """Capture-local numbers of the storages a region's ops read and write (see the module).
    Call it with a tensor for its number; ``flow`` numbers what an op reads and writes."""

    __slots__ = ("_entries", "_count")

    def __init__(self) -> None:
        # address -> (number, weak reference to the storage that had it when numbered)
        self._entries: dict[int, tuple[int, weakref.ref]] = {}
        self._count = 0

    def __call__(self, tensor: Any) -> int:
        return self.number((tensor,), [])[0]

    def flow(self, args: Any, kwargs: dict[str, Any], out: Any) -> tuple[list[int], list[int]]:
        """The numbers of the tensors an op reads (its arguments, then its keyword arguments)
        and writes (its outputs): in the order iter_tensors gives their TensorMetas, so graph
        execution pairs each number with its tensor's bytes. The capture's hot path."""
        read = self.number(args, [])
        if kwargs:
            self.number(kwargs.values(), read)
        return read, self.number(out if isinstance(out, (tuple, list)) else (out,), [])

    def number(self, values: Any, found: list[int]) -> list[int]:
        """Append to ``found`` the number of each tensor among ``values``, one level of lists
        deep, and return it. One loop, no call per tensor: it runs for every captured op."""
        get, append = self._entries.get, found.append
        for value in values:
            if isinstance(value, _Tensor):
                tensors: Any = (value,)
            elif type(value) in (list, tuple):
                tensors = [v for v in value if isinstance(v, _Tensor)]
            else:
                continue
            for tensor in tensors:
                try:
                    owner = tensor.untyped_storage()
                    address = owner._cdata
                except (RuntimeError, NotImplementedError):  # no storage (sparse): the object
                    owner, address = tensor, id(tensor)
                entry = get(address)
                if entry is not None and entry[1]() is owner:
                    append(entry[0])
                else:  # first seen, or a new storage where a freed one lived
                    number = self._count
                    self._count = number + 1
                    self._entries[address] = (number, _ref(owner))
                    append(number)
        return found

    def alias(self, result: Any, source: Any) -> None:
        """A free op (it does nothing on the device) returned ``result`` in a storage of its
        own where the device would hand back ``source`` (``wait_tensor`` on meta tensors):
        ``result`` takes ``source``'s number, so its readers depend on ``source``'s producer."""
        if not isinstance(result, _Tensor) or not isinstance(source, _Tensor):
            return
        try:
            owner = result.untyped_storage()
            if owner._cdata == source.untyped_storage()._cdata:
                return  # a view: the same storage, the same number already
        except (RuntimeError, NotImplementedError):
            return
        self._entries[owner._cdata] = (self(source), _ref(owner))

    def alive(self) -> int:
        """How many storages numbered by the capture are still alive (tests, memory checks)."""
        return sum(1 for _, ref in self._entries.values() if ref() is not None)
