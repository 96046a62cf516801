"""Cost formulas by op, in a registry like ``torch.utils.flop_counter``'s: each formula is a small
pure function from one call's arguments to an :class:`OpCost`, registered for op overloads.

    from pytest_neuronprof.costmodel import Engine, OpCost, register_cost

    @register_cost(torch.ops.mylib.fused_mlp)         # every overload; or .default for one
    def fused_mlp_cost(x, w1, w2, *, outputs, **_):
        ...
        return OpCost(Engine.TENSOR, flops=..., bytes_read=..., bytes_written=..., matmuls=...)

A formula gets the op's arguments by name, as the op's schema names them, with defaults filled
in (``out=`` arguments are left out: they are the outputs); tensors arrive as TensorMeta (shape
and dtype). ``outputs`` is the list of what the op returned, tensors as TensorMeta. Arguments are
bound through the schema after the profiled region ends, so capture pays nothing for it.

Registration raises on what is not an op (a typo) and on an op that already has a formula
(``replace=True`` to override one, e.g. a built-in). A formula that raises is a bug and is
reported as one (CostFormulaError), never hidden as an uncosted op. Ops without a formula are
costed by their bytes on VectorE and listed as uncosted.

Importing this module registers the built-in formulas (the ``formulas`` package, one module per
op family, each declaring its formulas), whatever was imported first: a look-up sees them, and a
user's registration meets them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from ..errors import CostFormulaError, CostRegistrationError
from ..vocabulary import Engine
from .formulas import attention, collectives, copies, foreach, indexing, matmul, pointwise, pooling
from .formulas.common import CostFormula, Family, OpTarget
from .opcost import OpCost, stream

_OpOverload = torch._ops.OpOverload
_OpOverloadPacket = torch._ops.OpOverloadPacket
_FORMULAS: dict[Any, CostFormula] = {}  # OpOverload or OpOverloadPacket -> formula
_FREE: set[Any] = set()  # ops that cost nothing on the device (allocation, relabelling)
_KERNELS: dict[Any, str] = {}  # op -> the name its records carry, where several ops are one kernel
_generation = 0  # bumped on every change, so that caches of costs know to forget


def resolve(target: OpTarget) -> Any:
    """The OpOverload or OpOverloadPacket ``target`` names; CostRegistrationError if none."""
    if isinstance(target, (_OpOverload, _OpOverloadPacket)):
        return target
    if isinstance(target, str):
        namespace, sep, rest = target.partition("::")
        name, _, overload = rest.partition(".")
        try:
            if not sep:
                raise AttributeError(target)
            packet = getattr(getattr(torch.ops, namespace), name)
            return getattr(packet, overload) if overload else packet
        except (AttributeError, RuntimeError):
            pass
        raise CostRegistrationError(
            f"{target!r} is not an op torch knows (expected 'namespace::name' or "
            "'namespace::name.overload', e.g. 'aten::mm'); is its library loaded?")
    raise CostRegistrationError(f"{target!r} is not an op: register a cost formula for an "
                                "OpOverload (torch.ops.aten.mm.default), an OpOverloadPacket "
                                "(torch.ops.aten.mm) or an op name ('aten::mm')")


def _name(op: Any) -> str:
    if isinstance(op, _OpOverload):
        overload = op._overloadname
        return op._schema.name + ("" if overload == "default" else f".{overload}")
    return op._qualified_op_name


def _claim(targets: Iterable[OpTarget], replace: bool) -> list[Any]:
    """Resolve ``targets`` and free their places in the registry; refuses a taken place unless
    ``replace``."""
    global _generation
    ops = [resolve(t) for t in targets]
    if not ops:
        raise CostRegistrationError("register a cost formula for at least one op")
    for op in ops:
        if not replace and (op in _FORMULAS or op in _FREE):
            raise CostRegistrationError(f"{_name(op)} has a cost formula already; pass "
                                        "replace=True to replace it")
    for op in ops:
        _FORMULAS.pop(op, None)
        _FREE.discard(op)
        _KERNELS.pop(op, None)
    _generation += 1
    return ops


def register_cost(*targets: OpTarget, replace: bool = False,
                  kernel: str | None = None) -> Callable[[CostFormula], CostFormula]:
    """Decorator: ``formula`` costs every call of ``targets`` (op overloads, packets or names).

    ``kernel``: the name the records of these ops carry, when they are one kernel reached by
    different paths (the fused attention ops torch picks per device and grad mode), so that
    baselines and tables see one name whatever path torch took."""
    ops = _claim(targets, replace)

    def wrap(formula: CostFormula) -> CostFormula:
        for op in ops:
            _FORMULAS[op] = formula
            if kernel is not None:
                _KERNELS[op] = kernel
        return formula

    return wrap


def register_free(*targets: OpTarget, replace: bool = False) -> None:
    """These ops cost nothing on the device (they allocate or relabel storage, or only ask)."""
    _FREE.update(_claim(targets, replace))


def unregister(*targets: OpTarget) -> None:
    """Forget the formulas (or free marks) of these ops: they are uncosted again."""
    global _generation
    for op in map(resolve, targets):
        _FORMULAS.pop(op, None)
        _FREE.discard(op)
        _KERNELS.pop(op, None)
    _generation += 1


def generation() -> int:
    """Changes whenever a formula is registered: a cache of costs made before is stale."""
    return _generation


def formula_for(op: Any) -> CostFormula | None:
    """The formula of an op overload (its own, else its packet's), or of a packet."""
    formula = _FORMULAS.get(op)
    if formula is None and isinstance(op, _OpOverload):
        formula = _FORMULAS.get(op.overloadpacket)
    return formula


def kernel_name(op: _OpOverload) -> str:
    """The name an op's records carry: its kernel's (register_cost's ``kernel``), else its own."""
    return _KERNELS.get(op) or _KERNELS.get(op.overloadpacket) or op._schema.name


def is_free(op: _OpOverload) -> bool:
    return op in _FREE or op.overloadpacket in _FREE


# id(OpOverload) -> ((name, positional, has default, default), ...) of its non-out arguments.
_SIGNATURES: dict[int, tuple[Any, tuple[tuple[str, bool, bool, Any], ...]]] = {}


def _signature(op: _OpOverload) -> tuple[tuple[str, bool, bool, Any], ...]:
    entry = _SIGNATURES.get(id(op))
    if entry is None:
        params = tuple((a.name, not a.kwarg_only, a.has_default_value(),
                        a.default_value if a.has_default_value() else None)
                       for a in op._schema.arguments if not a.is_out)
        entry = _SIGNATURES[id(op)] = (op, params)  # the op kept alive: its id stays its own
    return entry[1]


def bind(op: _OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name, in schema order, defaults filled in, ``out=`` left out."""
    bound: dict[str, Any] = {}
    position = 0
    for name, positional, has_default, default in _signature(op):
        if positional and position < len(args):
            bound[name] = args[position]
            position += 1
        elif name in kwargs:
            bound[name] = kwargs[name]
        else:
            bound[name] = default if has_default else None
    return bound


def op_cost(op: _OpOverload | str, args: Sequence[Any], kwargs: dict[str, Any],
            outputs: Sequence[Any]) -> OpCost:
    """The OpCost of one call. Ops without a formula are costed by their bytes on VectorE and
    marked uncosted; a formula that raises is reported as CostFormulaError."""
    if isinstance(op, str):
        resolved = resolve(op)
        if isinstance(resolved, _OpOverloadPacket):
            if "default" not in resolved.overloads():
                raise CostRegistrationError(
                    f"{op} has no default overload; name one, e.g. "
                    f"{op}.{resolved.overloads()[0]}")
            resolved = resolved.default
        op = resolved
    assert not isinstance(op, str)  # resolved above (for the type checker)
    bound = bind(op, args, kwargs)
    formula = formula_for(op)
    if formula is None:
        return stream(Engine.VECTOR, bound.values(), outputs, costed=False)
    try:
        return formula(**bound, outputs=list(outputs))
    except Exception as exc:
        where = getattr(formula, "__qualname__", repr(formula))
        raise CostFormulaError(
            f"the cost formula {where} of {_name(op)} raised {type(exc).__name__}: {exc} "
            f"(arguments {bound!r:.300}, outputs {list(outputs)!r:.200})") from exc


def _register(family: Family) -> None:
    for targets, formula, kernel in family.costed:
        register_cost(*targets, kernel=kernel)(formula)
    for targets in family.free_ops:
        register_free(*targets)


def _register_builtins() -> None:
    """The built-in formulas, family by family; ``_foreach_*`` last, as the single ops they reuse."""
    for family in (matmul, attention, pointwise, indexing, copies, pooling, collectives):
        _register(family.FAMILY)
    _register(foreach.family(formula_for))


_register_builtins()
