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

from ...costmodel.memory import RESIDENT

_Tensor = torch.Tensor
_ref = weakref.ref
# The StorageImpl's address, without making its Python object (untyped_storage() makes one)
_storage_address = torch._C._storage_id  # type: ignore[attr-defined]


def tensors_in(values: Any) -> list[Any]:
    """The tensors among ``values``, one level of lists deep (an op's arguments or outputs)."""
    found = []
    for value in values:
        if isinstance(value, _Tensor):
            found.append(value)
        elif type(value) in (list, tuple):
            found.extend([v for v in value if isinstance(v, _Tensor)])
    return found


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
        deep, and return it. No call per tensor: it runs for every captured op."""
        get, append = self._entries.get, found.append
        for tensor in tensors_in(values):
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


class _StorageRef(weakref.ref):
    """A weak reference to a storage, with its capture-local number."""

    __slots__ = ("number",)
    number: int


class StorageLifetimes:
    """When each storage a region's ops meet is made and freed: the capture's side of device
    memory (costmodel/memory.py computes the peak from it).

    ``op(args, kwargs, out)``, called right after an op returns and before it is appended to
    the capture, so that ``len(raw)`` is its position: a storage among the arguments that the
    capture has never seen is resident (alive before the region), one among the outputs was
    made by the op. ``made(out)``: outputs only (free ops that are not views); ``mark()``: a
    view, which makes nothing but is an op after which frees count. Each new storage
    gets a number, an entry (position, nbytes, shape, dtype) and a weak reference whose
    callback notes its free. PyTorch keeps a storage's Python object for the storage's life
    (PyObject preservation), so the callback fires when the storage itself is freed, not when
    a Python name of it goes; that holds on ``meta`` tensors and under ``FakeTensorMode`` too (a
    FakeTensor's storage is a meta storage; tests/test_memory_tracking.py checks both).

    Where a free happened: one list, ``_events``, gets each op's position (an int, from the
    hot path: one append per op) and each dead reference (the callback is that list's
    ``append`` itself: no Python code runs when a storage is freed), in the order they
    happened; a free counts at the first op position after it, before that op's outputs. The
    pairs are made once, in ``close``. A dead reference stays in the table until its address is
    reused: a live reference found at an address is that storage's (a live storage's address is
    its own), a dead one means a new storage there.

    Cost on the hot path: per tensor the address of its StorageImpl (``torch._C._storage_id``,
    which makes no Python object), a dictionary look-up and a weak reference call; per new
    storage its Python object (``untyped_storage()``), ``nbytes()``, a tuple and a weak
    reference with a callback; per op one append. Tensors without a storage (sparse, wrapper
    subclasses) are not counted. ``close`` (when the region ends) drops the references, so no
    callback runs after it."""

    __slots__ = ("_live", "_raw", "_met", "_events", "_frees", "event", "_refs", "reuses",
                 "_identity", "_names")

    def __init__(self, raw: list, identity: StorageIdentity | None = None) -> None:
        self._live: dict[int, _StorageRef] = {}  # address -> reference to the storage there
        self._raw = raw  # the capture's list of ops: its length is the current position
        self._met: list[tuple] = []  # by number: (position, nbytes, shape tuple, torch.dtype)
        # Graph execution: each storage's number in the capture's dataflow (``identity``), by
        # its number here, so that a compiled graph's buffers can follow the dataflow
        # (costmodel/memory.py's dataflow_usage): one look-up per new storage.
        self._identity = identity
        self._names: list[int] = []
        # op positions (int) and dead references (_StorageRef), in the order they happened
        self._events: list[Any] = []
        # Its append, bound once: every reference's callback, and the hot path's ``mark`` of a
        # view (``event(len(raw))``, without a call of its own)
        self.event = self._events.append
        self._frees: list[tuple[int, int]] | None = None  # made by close()
        # number -> its storages beyond the first (``alias``): freed when the last one dies
        self._refs: dict[int, int] = {}
        # (position, number) of each op that may reuse its input's memory (``reuse``)
        self.reuses: list[tuple[int, int]] = []

    def op(self, args: Any, kwargs: dict[str, Any], out: Any, outputs: list[Any]) -> None:
        """An op that returned ``out``, whose metadata the capture made as ``outputs`` (a
        TensorMeta per output): its unseen arguments are resident, unseen outputs new. The hot
        path: the look-ups of its arguments and of a lone output inline, as ``_meet`` does
        them; a lone output's shape and dtype are its TensorMeta's, made once for both."""
        live = self._live
        for value in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(value, _Tensor):
                try:
                    address = _storage_address(value)
                except (RuntimeError, NotImplementedError):
                    continue
                ref = live.get(address)
                if ref is None or ref() is None:
                    self._new(value, address, RESIDENT)
            elif type(value) in (list, tuple):
                self._meet(value, RESIDENT)
        position = len(self._raw)
        self.event(position)
        if not isinstance(out, _Tensor):  # several outputs, or none
            if isinstance(out, (tuple, list)):
                self._meet(out, position)
            return
        # One output, the common case, inline: as _new does it
        try:
            address = _storage_address(out)
        except (RuntimeError, NotImplementedError):
            return
        ref = live.get(address)
        if ref is not None and ref() is not None:
            return  # in place, or a view: nothing made
        try:
            storage = out.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return
        met = self._met
        ref = live[address] = _StorageRef(storage, self.event)
        ref.number = len(met)
        # The TensorMeta's shape, an exact tuple: the cycle collector untracks a tuple of ints
        # (and this entry with it), never a torch.Size, which tensor.shape would make per storage
        lone = outputs[0]
        met.append((position, storage.nbytes(), lone.shape, lone.dtype))
        if self._identity is not None:
            self._names.append(self._identity(out))

    def mark(self) -> None:
        """A view: frees so far happened before it."""
        self.event(len(self._raw))

    def made(self, out: Any) -> None:
        """A free op (an allocation, not a view) that returned ``out``."""
        position = len(self._raw)
        self.event(position)
        self._meet(out if isinstance(out, (tuple, list)) else (out,), position)

    def alias(self, result: Any, source: Any) -> None:
        """A free op that hands back ``source`` returned ``result`` in a storage of its own
        (``wait_tensor`` on meta tensors): on the device they are one tensor, so ``result``'s
        storage takes ``source``'s number and makes nothing; the number is freed when the last
        of its storages is."""
        position = len(self._raw)
        self.event(position)
        try:
            address = _storage_address(result)
            source_address = _storage_address(source)
        except (RuntimeError, NotImplementedError, TypeError):  # no storage: not counted
            return
        live = self._live
        ref = live.get(address)
        if ref is not None and ref() is not None:
            return  # the same storage (a real tensor handed back), or one counted already
        found = live.get(source_address)
        if found is None or found() is None:  # a source the capture has not met: as before
            self._meet((result,), position)
            return
        try:
            storage = result.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return
        ref = live[address] = _StorageRef(storage, self.event)
        ref.number = found.number
        self._refs[found.number] = self._refs.get(found.number, 0) + 1

    def reuse(self, source: Any) -> None:
        """The op just recorded (``op``) may hand its result the memory of ``source``, its
        input, where nothing reads ``source`` after it (formulas/collectives.py,
        ``REUSES_INPUT``): ``simulated._memory`` decides, once it knows when ``source`` died."""
        try:
            ref = self._live.get(_storage_address(source))
        except (RuntimeError, NotImplementedError, TypeError):
            return
        if ref is not None and ref() is not None:
            self.reuses.append((len(self._raw), ref.number))

    def _meet(self, values: Any, position: int) -> None:
        live = self._live
        for tensor in tensors_in(values):
            try:
                address = _storage_address(tensor)
            except (RuntimeError, NotImplementedError, TypeError):  # no storage: not counted
                continue
            ref = live.get(address)
            if ref is None or ref() is None:  # a live storage's address is its own
                self._new(tensor, address, position)

    def _new(self, tensor: Any, address: int, position: int) -> None:
        """A storage the capture has not seen, at ``address``: its number, entry and reference."""
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # a wrapper: not counted
            return
        met = self._met
        ref = self._live[address] = _StorageRef(storage, self.event)
        ref.number = len(met)
        # The storage's own tensor, not the view the capture met it through: a weight is first
        # met as an argument of mm through its transpose (views are not met), whose shape is
        # not the weight's ([4096,32000] for a [32000,4096] lm_head).
        base = getattr(tensor, "_base", None)
        own = tensor if base is None else base
        met.append((position, storage.nbytes(), tuple(own.shape), own.dtype))
        if self._identity is not None:
            self._names.append(self._identity(tensor))

    @property
    def names(self) -> list[int]:
        """Each storage's number in the dataflow (StorageIdentity), by its number here; empty
        when the capture has no dataflow (eager execution)."""
        return self._names

    @property
    def storages(self) -> list[tuple]:
        """Every storage met, by number: (position, nbytes, shape, torch.dtype), what
        ``costmodel.memory.memory_usage`` reads as a Storage."""
        return self._met

    @property
    def frees(self) -> list[tuple[int, int]]:
        """(position, number) of each storage freed in the region, in order: the frees after an
        op's position, at the next one's; those after the last op at the number of ops (they
        change no op's bytes, but say what the region's code dropped before it ended: a
        compiled graph's intermediates, memory.dataflow_usage)."""
        if self._frees is not None:
            return self._frees
        found: list[tuple[int, int]] = []
        pending: list[int] = []
        left = dict(self._refs)  # aliases still alive, per number
        for event in self._events:
            if type(event) is int:
                if pending:
                    found.extend([(event, number) for number in pending])
                    pending.clear()
            elif left.get(event.number):
                left[event.number] -= 1  # another storage of the number is still alive
            else:
                pending.append(event.number)
        found.extend([(len(self._raw), number) for number in pending])
        return found

    def close(self) -> None:
        """The region has ended: pair its frees with positions, then forget the storages (their
        callbacks with them, so that nothing runs after the region)."""
        self._live.clear()
        self._frees = self.frees
        self._events = []
