"""Collectives: one collective, one cost, whichever API issued it.

torch issues the same collective through several APIs, each with ops of its own:
``torch.distributed.all_reduce`` the ``c10d`` op ``allreduce_`` (in place, on a list of tensors),
the functional API (``torch.distributed._functional_collectives``, the form ``torch.compile``
traces and DTensor uses) ``_c10d_functional::all_reduce`` (out of place) and its autograd-aware
``_c10d_functional_autograd`` forms, the older ``c10d_functional`` namespace, and
``_dtensor::shard_dim_alltoall``. Each op is declared here with its kind (``KINDS``) and which of
its arguments it reads and which it writes, so that its cost is a function of the kind, the
buffer, its dtype and the group's ranks alone: the same collective costs the same in time and
memory, and its records carry the kind's one name (``KINDS``: the functional op's, what compiled
graphs hold), the op torch dispatched in ``dispatched`` (as the fused attention ops do).

A collective over p ranks moves its buffer in phases (an all-reduce is a reduce-scatter and an
all-gather: 2), each rank sending (p - 1) / p of the buffer per phase, whatever the algorithm
(Mesh, recursive halving-doubling and rings move the same bytes; they differ in steps, which the
profile's runtime model decides by message size: roofline.collective_us). A point-to-point
transfer (send, receive) moves its tensor once, to one peer. Its HBM traffic is the buffer it
reads and the one it writes, as the kind defines them (an all-gather reads its shard and writes
the gathered tensor, whichever API passed it which tensors). One rank alone has nothing to
exchange: no bytes over the links, none in HBM, no steps.

Waiting for a collective (``wait_tensor``) and autograd's wrapper of its result
(``_wrap_tensor_autograd``) move nothing and hand back the tensor they were given
(``PASS_THROUGH``: the simulated backend follows the data and the memory through them).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch

from ...vocabulary import Engine
from ..opcost import POINT_TO_POINT, OpCost, TensorMeta, dtype_key
from .common import Family

FAMILY = Family()

# kind -> (the name its records carry, phases, the buffer it moves: what it reads or writes)
KINDS: dict[str, tuple[str, int, str]] = {
    "all_reduce": ("_c10d_functional::all_reduce", 2, "read"),
    "all_gather": ("_c10d_functional::all_gather_into_tensor", 1, "write"),
    "reduce_scatter": ("_c10d_functional::reduce_scatter_tensor", 1, "read"),
    "all_to_all": ("_c10d_functional::all_to_all_single", 1, "read"),
    "broadcast": ("_c10d_functional::broadcast", 1, "read"),
    # a reduce to one rank: a reduce-scatter, then the root gathers the shards
    "reduce": ("c10d::reduce_", 2, "read"),
    "gather": ("c10d::gather_", 1, "write"),
    "scatter": ("c10d::scatter_", 1, "read"),
    # point to point: the tensor once, to (or from) one peer
    "send": ("_c10d_functional::isend", 1, "read"),
    "recv": ("_c10d_functional::irecv", 1, "write"),
    "send_recv": ("_c10d_functional::batch_p2p_ops", 1, "both"),
    # arrive and release over the group: no bytes
    "barrier": ("c10d::barrier", 2, "none"),
}

# Ops that do nothing on the device and hand back the tensor they were given (on meta tensors
# and under FakeTensorMode, in a storage of their own): the simulated backend makes their result
# the same tensor as their argument, for graph execution's dataflow and for device memory.
PASS_THROUGH = ("_c10d_functional::wait_tensor", "c10d_functional::wait_tensor",
                "_c10d_functional::_wrap_tensor_autograd")

# Out-of-place collectives whose result has the shape and dtype of their input: where the input
# dies as the collective returns, the runtime's in-place collective gives the same result in
# the same memory, as ``dist.all_reduce(x)`` and ``dist.broadcast(x)`` do. torch's compiled code
# does it for the all-reduce (torch/_inductor/fx_passes/reinplace.py, inplaceable_collective_ops:
# ``_c10d_functional.all_reduce`` -> ``all_reduce_`` where the input is not read after it); the
# model gives the broadcast, whose in-place form is dist.broadcast's, the same rule. Device
# memory counts the two as one buffer (profiler/backends/dataflow.py, StorageLifetimes.reuse).
# (Eager PyTorch's functional all-reduce returns a new tensor, "The input tensor is left
# unmodified" (torch/distributed/_functional_collectives.py, all_reduce); what a device's eager
# collective does with an input that dies as it returns is not documented.)
REUSES_INPUT = ("_c10d_functional::all_reduce", "_c10d_functional::broadcast",
                "c10d_functional::all_reduce", "c10d_functional::broadcast")


def ranks_of(group: Any, given: int | None = None) -> int:
    """Ranks in a collective's group: its ``group_size`` argument, a ProcessGroup's size, or the
    size of the group a name resolves to (the process group registered under it)."""
    if given:
        return int(given)
    import torch.distributed as dist

    if not dist.is_available() or group is None:
        return 1
    if isinstance(group, torch.ScriptObject):  # the c10d ops' boxed ProcessGroup
        group = dist.ProcessGroup.unbox(group)
    if isinstance(group, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        group = _resolve_process_group(group)  # type: ignore[arg-type]  # a GroupName is a str
    return int(group.size())


def tensors(values: Iterable[Any]) -> Iterator[TensorMeta]:
    """The TensorMetas among ``values``, lists of lists included (``Tensor[][]``)."""
    for value in values:
        if type(value) is TensorMeta:
            yield value
        elif isinstance(value, (list, tuple)):
            yield from tensors(value)


def _bytes(values: Iterable[Any]) -> int:
    return sum(t.nbytes for t in tensors(values))


def collective_cost(kind: str, ranks: int, read: list[TensorMeta], written: list[TensorMeta],
                    sent: int | None = None) -> OpCost:
    """The OpCost of a collective of ``kind`` over ``ranks`` that reads ``read`` and writes
    ``written`` (the tensors of its buffers, as ``KINDS`` defines them); ``sent``: the bytes a
    batch of point-to-point transfers sends one way (its larger direction)."""
    _, phases, side = KINDS[kind]
    first = next(iter(read or written), None)
    dtype = dtype_key(first.dtype if first is not None else None)
    point_to_point = kind in POINT_TO_POINT
    if ranks <= 1 and not point_to_point:  # one rank alone: nothing to exchange or move
        return OpCost(Engine.COLLECTIVE, dtype=dtype, ranks=1, collective=kind)
    read_bytes, written_bytes = _bytes(read), _bytes(written)
    if point_to_point:
        moved = sent if sent is not None else (read_bytes if side == "read" else written_bytes)
        return OpCost(Engine.COLLECTIVE, bytes_read=read_bytes, bytes_written=written_bytes,
                      link_bytes=moved, ranks=2, phases=1, dtype=dtype, collective=kind)
    buffer = {"read": read_bytes, "write": written_bytes, "none": 0}[side]
    return OpCost(Engine.COLLECTIVE, bytes_read=read_bytes, bytes_written=written_bytes,
                  link_bytes=phases * (ranks - 1) * buffer // ranks, ranks=ranks, phases=phases,
                  dtype=dtype, collective=kind)


def _functional(kind: str) -> Any:
    """A functional collective (``_c10d_functional``, ``_c10d_functional_autograd``,
    ``c10d_functional``, ``_dtensor``): it reads its tensor arguments and writes what it returns;
    its group's size where the op passes it (``group_size``), else the group its name stands for
    (``group_name``)."""
    def formula(*, outputs: list, **args: Any) -> OpCost:
        read = list(tensors(args.values()))
        return collective_cost(kind, ranks_of(args.get("group_name"), args.get("group_size")),
                               read, list(tensors(outputs)))

    formula.__qualname__ = f"collective({kind})"
    return formula


def _c10d(kind: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> Any:
    """A ``c10d`` op (the ProcessGroup API under torch.distributed.all_reduce and friends): it
    reads and writes the arguments named (lists of tensors, lists of lists), in place."""
    def formula(*, outputs: list, process_group: Any = None, **args: Any) -> OpCost:
        read = list(tensors(args.get(name) for name in reads))
        written = list(tensors(args.get(name) for name in writes))
        return collective_cost(kind, ranks_of(process_group), read, written)

    formula.__qualname__ = f"collective({kind})"
    return formula


def _batch_p2p(*, outputs: list, op_list: Any = (), tensors: Any = (), **_: Any) -> OpCost:
    """A batch of sends and receives, run together: each way's bytes over the links at once
    (the links are full duplex), the larger of the two."""
    metas = [t for t in (tensors or ()) if type(t) is TensorMeta]
    sends = [t for op, t in zip(op_list or (), metas) if "send" in str(op)]
    receives = [t for op, t in zip(op_list or (), metas) if "send" not in str(op)]
    return collective_cost("send_recv", 2, sends, receives,
                           sent=max(_bytes(sends), _bytes(receives)))


# The functional ops: (namespace, op names, kind); the group by name, or by size.
_FUNCTIONAL = (
    ("_c10d_functional", ("all_reduce", "all_reduce_", "all_reduce_coalesced",
                          "all_reduce_coalesced_"), "all_reduce"),
    ("_c10d_functional", ("all_gather_into_tensor", "all_gather_into_tensor_out",
                          "all_gather_into_tensor_coalesced"), "all_gather"),
    ("_c10d_functional", ("reduce_scatter_tensor", "reduce_scatter_tensor_out",
                          "reduce_scatter_tensor_coalesced"), "reduce_scatter"),
    ("_c10d_functional", ("all_to_all_single",), "all_to_all"),
    ("_c10d_functional", ("broadcast", "broadcast_"), "broadcast"),
    ("_c10d_functional", ("isend",), "send"),
    ("_c10d_functional", ("irecv",), "recv"),
    ("_c10d_functional_autograd", ("all_gather_into_tensor",), "all_gather"),
    ("_c10d_functional_autograd", ("reduce_scatter_tensor",), "reduce_scatter"),
    ("_c10d_functional_autograd", ("all_to_all_single",), "all_to_all"),
    ("_dtensor", ("shard_dim_alltoall",), "all_to_all"),
    # the older namespace: the group by its size
    ("c10d_functional", ("all_reduce", "all_reduce_coalesced"), "all_reduce"),
    ("c10d_functional", ("all_gather_into_tensor", "all_gather_into_tensor_coalesced"), "all_gather"),
    ("c10d_functional", ("reduce_scatter_tensor", "reduce_scatter_tensor_coalesced"), "reduce_scatter"),
    ("c10d_functional", ("all_to_all_single",), "all_to_all"),
    ("c10d_functional", ("broadcast",), "broadcast"),
    ("c10d_functional", ("isend",), "send"),
    ("c10d_functional", ("irecv",), "recv"),
)

# The c10d ops: name -> (kind, the arguments it reads, the arguments it writes)
_C10D = {
    "allreduce_": ("all_reduce", ("tensors",), ("tensors",)),
    "allreduce_coalesced_": ("all_reduce", ("tensors",), ("tensors",)),
    "allgather_": ("all_gather", ("input_tensors",), ("output_tensors",)),
    "_allgather_base_": ("all_gather", ("input_tensor",), ("output_tensor",)),
    "allgather_coalesced_": ("all_gather", ("input_list",), ("output_lists",)),
    "allgather_into_tensor_coalesced_": ("all_gather", ("inputs",), ("outputs",)),
    "reduce_scatter_": ("reduce_scatter", ("input_tensors",), ("output_tensors",)),
    "_reduce_scatter_base_": ("reduce_scatter", ("input_tensor",), ("output_tensor",)),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", ("inputs",), ("outputs",)),
    "alltoall_": ("all_to_all", ("input_tensors",), ("output_tensors",)),
    "alltoall_base_": ("all_to_all", ("input",), ("output",)),
    "broadcast_": ("broadcast", ("tensors",), ("tensors",)),
    "reduce_": ("reduce", ("tensors",), ("tensors",)),
    "gather_": ("gather", ("input_tensors",), ("output_tensors",)),
    "scatter_": ("scatter", ("input_tensors",), ("output_tensors",)),
    "send": ("send", ("tensors",), ()),
    "recv_": ("recv", (), ("tensors",)),
    "recv_any_source_": ("recv", (), ("tensors",)),
    "barrier": ("barrier", (), ()),
    "monitored_barrier_": ("barrier", (), ()),
}


def _packet(namespace: str, name: str) -> Any:
    """torch.ops.<namespace>.<name>, or None where this torch has no such op."""
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


def _declare_collectives() -> None:
    import torch.distributed as dist

    if dist.is_available():
        # Defines the functional API's ops that live in Python (_wrap_tensor_autograd, the
        # c10d_functional namespace) and the meta kernels of the functional collectives: without
        # it, an all-gather on meta tensors raises NotImplementedError. torch._dynamo imports it
        # as well; it is light (~15 ms).
        import torch.distributed._functional_collectives  # noqa: F401
    for namespace, names, kind in _FUNCTIONAL:
        found = [op for op in (_packet(namespace, name) for name in names) if op is not None]
        if found:
            FAMILY.cost(*found, kernel=KINDS[kind][0])(_functional(kind))
    batch = [op for op in (_packet(ns, "batch_p2p_ops") for ns in ("_c10d_functional", "c10d_functional"))
             if op is not None]
    if batch:
        FAMILY.cost(*batch, kernel=KINDS["send_recv"][0])(_batch_p2p)
    for name, (kind, reads, writes) in _C10D.items():
        op = _packet("c10d", name)
        if op is not None:
            FAMILY.cost(op, kernel=KINDS[kind][0])(_c10d(kind, reads, writes))
    # Waiting for a collective, autograd's wrapper of its result and the c10d NaN check move
    # nothing.
    free = [op for op in (_packet(*name.split("::")) for name in (*PASS_THROUGH, "c10d::check_for_nan"))
            if op is not None]
    FAMILY.free(*free)


_declare_collectives()
