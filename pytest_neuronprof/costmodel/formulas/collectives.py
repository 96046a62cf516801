"""Collectives: torch.distributed's functional collectives (``_c10d_functional``) and the
``c10d`` ops of the ProcessGroup API: the bytes each rank sends and the phases of the
collective; the hardware profile's runtime model picks the algorithm (roofline.collective_us);
waiting for one moves nothing."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ...vocabulary import Engine
from ..opcost import OpCost, dtype_key, first_tensor, iter_tensors, nbytes, traffic
from .common import CostFormula, Family

FAMILY = Family()


def ranks_of(group: Any, given: int | None = None) -> int:
    """Ranks in a collective's group: its ``group_size`` argument, a ProcessGroup's size, or the
    size of the group a name resolves to (the process group registered under it)."""
    if given:
        return int(given)
    import torch.distributed as dist

    if not dist.is_available():
        return 1
    if isinstance(group, torch.ScriptObject):  # the c10d ops' boxed ProcessGroup
        group = dist.ProcessGroup.unbox(group)
    if isinstance(group, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        group = _resolve_process_group(group)  # type: ignore[arg-type]  # a GroupName is a str
    return int(group.size())


def _collective(tensor_bytes: int, ranks: int, kind: str, inputs: Sequence[Any],
                outputs: Sequence[Any]) -> OpCost:
    """A collective over ``ranks``. An all-reduce is a reduce-scatter and an all-gather; each
    phase sends (p - 1) / p of the buffer from every rank, whatever the algorithm (Mesh,
    recursive halving-doubling and rings move the same bytes; they differ in steps, which the
    profile's runtime model decides by message size). One rank alone communicates nothing."""
    read, written = traffic(inputs, outputs)
    phases = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1,
              "broadcast": 1}[kind]
    p = max(1, ranks)
    first = first_tensor(inputs) or first_tensor(outputs)
    return OpCost(Engine.COLLECTIVE, bytes_read=read, bytes_written=written,
                  link_bytes=phases * (p - 1) * tensor_bytes // p, ranks=p,
                  phases=phases if p > 1 else 0, dtype=dtype_key(first.dtype if first else None))


def _functional(kind: str, buffer: str) -> CostFormula:
    """A ``_c10d_functional`` op; ``buffer``: whose bytes the algorithm moves, the input's or
    the output's (an all-gather's output is the whole gathered buffer)."""
    def formula(input: Any, *, outputs: list, group_name: Any = None, group_size: int = 0,
                **args: Any) -> OpCost:
        inputs = [input, *args.values()]
        moved = nbytes(inputs if buffer == "input" else outputs)
        return _collective(moved, ranks_of(group_name, group_size), kind, inputs, outputs)

    formula.__qualname__ = f"collective({kind})"
    return formula


def _c10d(kind: str, buffer: str) -> CostFormula:
    """A ``c10d`` op (the ProcessGroup API under torch.distributed.all_reduce and friends)."""
    def formula(*, outputs: list, process_group: Any = None, **args: Any) -> OpCost:
        tensors = list(iter_tensors(args.values()))
        moved = nbytes(tensors if buffer == "input" else outputs) or nbytes(tensors)
        return _collective(moved, ranks_of(process_group), kind, tensors, outputs)

    formula.__qualname__ = f"collective({kind})"
    return formula


def _declare_collectives() -> None:
    functional = torch.ops._c10d_functional
    c10d = torch.ops.c10d
    for kind, buffer, names in (
            ("all_reduce", "input", ("all_reduce", "all_reduce_", "all_reduce_coalesced",
                                     "all_reduce_coalesced_")),
            ("all_gather", "output", ("all_gather_into_tensor", "all_gather_into_tensor_out",
                                      "all_gather_into_tensor_coalesced")),
            ("reduce_scatter", "input", ("reduce_scatter_tensor", "reduce_scatter_tensor_out",
                                         "reduce_scatter_tensor_coalesced")),
            ("all_to_all", "input", ("all_to_all_single",)),
            ("broadcast", "input", ("broadcast", "broadcast_"))):
        FAMILY.cost(*(getattr(functional, name) for name in names))(_functional(kind, buffer))
    for kind, buffer, names in (
            ("all_reduce", "input", ("allreduce_", "allreduce_coalesced_")),
            ("all_gather", "output", ("allgather_", "_allgather_base_", "allgather_coalesced_",
                                      "allgather_into_tensor_coalesced_")),
            ("reduce_scatter", "input", ("reduce_scatter_", "_reduce_scatter_base_",
                                         "reduce_scatter_tensor_coalesced_")),
            ("all_to_all", "input", ("alltoall_", "alltoall_base_")),
            ("broadcast", "input", ("broadcast_",))):
        FAMILY.cost(*(getattr(c10d, name) for name in names))(_c10d(kind, buffer))
    # Waiting for a collective, and autograd's wrapper of its result, move nothing.
    FAMILY.free(functional.wait_tensor)


_declare_collectives()
