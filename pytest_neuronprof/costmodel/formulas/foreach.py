"""``_foreach_*`` ops: one launch over lists of tensors, each element costed as the single op.
Every ``_foreach_X`` whose ``X`` has a formula is costed, so the registry declares this family
last (``family``), once the families whose formulas it reuses are registered."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ...vocabulary import Engine
from ..opcost import OpCost
from .common import CostFormula, Family, aten


def _foreach(inner: CostFormula) -> CostFormula:
    def formula(*, outputs: list, **args: Any) -> OpCost:
        count = max((len(v) for v in args.values() if isinstance(v, (list, tuple))), default=0)
        parts = []
        for i in range(count):
            element = {name: value[i] if isinstance(value, (list, tuple)) and len(value) == count
                       else value for name, value in args.items()}
            parts.append(inner(**element, outputs=[outputs[i]] if len(outputs) == count else []))
        if not parts:
            return OpCost(Engine.NONE)
        return OpCost(parts[0].engine, flops=sum(p.flops for p in parts),
                      bytes_read=sum(p.bytes_read for p in parts),
                      bytes_written=sum(p.bytes_written for p in parts),
                      elements=sum(p.elements for p in parts), dtype=parts[0].dtype,
                      costed=all(p.costed for p in parts))

    formula.__qualname__ = f"foreach({getattr(inner, '__qualname__', inner)})"
    return formula


def family(formula_for: Callable[[Any], CostFormula | None]) -> Family:
    """Every ``_foreach_X`` torch has, whose single-tensor ``X`` has a formula (``formula_for``:
    the registry's, once the other families are registered), costed as X on each element of its
    lists, in one launch."""
    found = Family()
    names = {qualified[len("aten::"):].split(".")[0]
             for qualified in torch._C._dispatch_get_all_op_names()
             if qualified.startswith("aten::_foreach_")}
    for name in sorted(names):
        single = getattr(aten, name[len("_foreach_"):], None)
        inner = formula_for(single) if single is not None else None
        if inner is not None:
            found.cost(getattr(aten, name))(_foreach(inner))
    return found
