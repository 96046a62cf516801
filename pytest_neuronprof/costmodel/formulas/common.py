"""What the formula families share: ``Family`` (a family's formulas, declared by its module and
registered by ``registry``), ``aten``, ``ops`` (aten ops by name, with their in-place variants)
and ``streaming`` (the generic formula of an op that streams every tensor argument once through
one lane engine)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...vocabulary import Engine
from ..opcost import OpCost, stream

CostFormula = Callable[..., OpCost]
OpTarget = Any  # an OpOverload, an OpOverloadPacket, or its name ("aten::mm", "aten::add.Tensor")

aten = torch.ops.aten


@dataclass
class Family:
    """The built-in formulas of one op family, in the order its module declares them. A family
    module registers nothing itself: ``registry`` imports every family and registers them all
    when it is imported, so the registry is complete whatever was imported first."""

    costed: list[tuple[tuple[OpTarget, ...], CostFormula, str | None]] = field(default_factory=list)
    free_ops: list[tuple[OpTarget, ...]] = field(default_factory=list)

    def cost(self, *targets: OpTarget,
             kernel: str | None = None) -> Callable[[CostFormula], CostFormula]:
        """Decorator, as ``register_cost``: ``formula`` costs every call of ``targets``."""
        def declare(formula: CostFormula) -> CostFormula:
            self.costed.append((targets, formula, kernel))
            return formula

        return declare

    def free(self, *targets: OpTarget) -> None:
        """As ``register_free``: these ops cost nothing on the device."""
        self.free_ops.append(targets)


def ops(*names: str, inplace: bool = True) -> list[Any]:
    """The aten ops of these names and, with ``inplace``, their in-place variants (``add_``)
    where torch has one. A name torch does not know raises: a typo registers nothing."""
    found = []
    for name in names:
        packet = getattr(aten, name)  # AttributeError for a name that is not an op
        found.append(packet)
        if inplace and not name.endswith("_") and hasattr(aten, name + "_"):
            found.append(getattr(aten, name + "_"))
    return found


def streaming(engine: Engine, passes: float = 1.0,
              overlapped: tuple[tuple[Engine, float], ...] = ()) -> CostFormula:
    def formula(*, outputs: list, **args: Any) -> OpCost:
        return stream(engine, args.values(), outputs, passes, overlapped)

    formula.__qualname__ = f"streaming({engine.value}, passes={passes:g})"
    return formula
