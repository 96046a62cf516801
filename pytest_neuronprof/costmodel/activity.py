"""What each op of a region kept TensorE, the lane engines and the DMA doing, from its OpCost and
where its execution mode placed it (execution.py, graph.py): the region's ``Utilisation``
(utilisation.py), with the evidence per op that the recommendations name (recommendations.py).
Computed after the region ends, once per distinct call in eager execution (the calls of a layer
share their OpCost); a pure function of the costs, the records and the schedule.

Per op call:

- model FLOPs: a TensorE op's ``flops`` (2 x the MACs of its logical products), at its dtype's
  peak on the logical core's arrays (``roofline.peak_work``): MFU's numerator in time;
- hardware FLOPs: what the array's instructions occupy (``roofline.array_flops``: the kernel's
  own products and taps, the contraction and stationary dims padded to the partitions, as the
  array is sharded), plus the layout transposes graph execution adds (2 x partitions FLOPs per
  element moved through an identity product); transpose FLOPs: those transposes and a
  kernel's own (``OpCost.transposes``: flash attention's P^T);
- engine time: ``roofline.engine_busy`` (eager: TensorE with the throttling ramp an op alone
  pays, PSUM evacuation on VectorE), or the schedule's (graph: after fusion, absorbed scalar
  ops none, the ramp where TensorE was quiet);
- DMA: the time the op's transfers take on the queue (eager ``roofline.transfer_us``, without
  the DMA's start; graph the schedule's transfers), and its descriptors
  (``roofline.descriptor_bytes``);
- HBM bytes: the record's (graph: what fusion and SBUF residency leave), the schedule's spilled
  and reloaded bytes;
- fixed cost (eager): the kernel's time beyond its engines' work and its transfers (the
  launch, the DMA's start).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..vocabulary import BOUND_FIXED, EAGER, GRAPH, Engine
from . import utilisation as u
from .execution import compiled
from .graph import GraphSchedule
from .opcost import OpCost
from .profiles import HardwareProfile
from .roofline import (array_flops, descriptor_bytes, engine_busy, peak_flops_per_us, throttled_us,
                       transfer_us)

# The NKI DMA bandwidth guide's "minimum recommended" transfer per partition: "≥ 2 KiB per
# partition ... Approaches peak bandwidth" (aws-neuron/aws-neuron-sdk@81ce03ae:
# nki/deep-dives/nki-dma-bandwidth-guide.rst, "Bandwidth vs. Payload Size"); smaller ones are
# what the small-DMA recommendation is about.
SMALL_DMA_BYTES = 2048

# Ops that fill a new tensor with a constant: under an optimizer's step, its state being made
# (torch 2.13 torch/optim/adam.py ``_init_group``: ``state["exp_avg"] = torch.zeros_like(p,
# ...)``, on the first step only), inside the range ``torch.optim.Optimizer`` opens around each
# step (torch/optim/optimizer.py: ``record_function(f"Optimizer.step#{cls}.step")``).
STATE_OPS = frozenset({"aten::zeros_like", "aten::zeros", "aten::ones_like", "aten::full_like",
                       "aten::full", "aten::new_zeros", "aten::new_full", "aten::empty_like"})
OPTIMIZER_STEP = "Optimizer.step#"


def state_creation(record: Any) -> bool:
    """Whether ``record`` makes an optimizer's state: a constant fill inside its step."""
    return record.name in STATE_OPS and OPTIMIZER_STEP in record.scope


class _Work:
    """What one OpCost costs, once per distinct call (shared by every call of it)."""

    __slots__ = ("model", "model_us", "hardware", "hardware_us", "transpose", "transpose_us",
                 "reads", "writes")

    def __init__(self, cost: OpCost, hw: HardwareProfile) -> None:
        tensor = hw.tensor
        self.model = self.model_us = self.hardware = self.hardware_us = 0.0
        self.transpose = self.transpose_us = 0.0
        if cost.engine is Engine.TENSOR and cost.flops:
            rate = peak_flops_per_us(cost, tensor) * tensor.arrays
            products = cost.array_products or cost.matmuls
            flops = [array_flops(*product, tensor) for product in products]
            self.model, self.model_us = float(cost.flops), cost.flops / rate
            self.hardware = cost.taps * sum(flops)
            self.hardware_us = self.hardware / rate
            if cost.transposes and cost.array_products:
                self.transpose = cost.taps * sum(flops[-cost.transposes:])
                self.transpose_us = self.transpose / rate
        self.reads, self.writes = descriptor_bytes(cost, hw)


def _transpose_flops(elements: float, hw: HardwareProfile) -> tuple[float, float]:
    """(FLOPs, their time at TensorE's bfloat16 peak) of ``elements`` moved through the array
    by identity products (``roofline.transpose_busy``'s: 2 x partitions FLOPs per element)."""
    flops = 2.0 * hw.tensor.partitions * elements
    return flops, flops / (hw.tensor.flops_per_us("bfloat16") * hw.tensor.arrays)


def _descriptors(found: u.Utilisation, work: _Work, read: float, written: float) -> float:
    """Count ``read`` and ``written`` bytes' descriptors into ``found``; the bytes of those under
    SMALL_DMA_BYTES."""
    small = 0.0
    for moved, size in ((read, work.reads), (written, work.writes)):
        if moved > 0 and size > 0:
            found.dma_transfer_count += moved / size
            found.dma_transfer_bytes += moved
            if size < SMALL_DMA_BYTES:
                small += moved
    return small


_LANES = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


def _common(found: u.Utilisation, record: Any, work: _Work, cost: OpCost) -> None:
    """What every execution counts of a call the same way: its FLOPs (a lane op's element
    operations) and evidence of them."""
    if cost.engine in _LANES and cost.elements:
        found.elements[record.name] = found.elements.get(record.name, 0.0) + cost.elements
    found.model_flops += work.model
    found.model_peak_us += work.model_us
    found.hardware_flops += work.hardware
    found.hardware_peak_us += work.hardware_us
    found.transpose_flops += work.transpose
    found.transpose_peak_us += work.transpose_us
    found.note(u.TRANSPOSE, record.name, record.module_path, work.transpose_us)
    if state_creation(record):
        found.note(u.STATE, record.name, record.module_path, record.device_time_us)


def eager_utilisation(records: Sequence[Any], costs: Sequence[OpCost | None],
                      hw: HardwareProfile) -> u.Utilisation:
    """Eager execution: each op a kernel of its own, one after the other."""
    found = u.Utilisation(EAGER, hbm_bytes_per_us=hw.hbm_bytes_per_us)
    shared: dict[int, tuple[_Work, dict[Engine, float], float, float, float]] = {}
    # op -> bound -> [device time, calls]: an op's bound is that of the calls with most of its
    # time, as its baseline entry keeps it (gate/summary.py, by profiler/result.heaviest, which
    # this floor cannot import), so the fixed-cost share the rule weighs is the one a failure's
    # utilisation line says from the entries
    bounds: dict[str, dict[str, list[float]]] = {}
    large = hw.hbm_bytes_per_us * hw.dma_efficiency  # what large transfers sustain
    for record, cost in zip(records, costs):
        found.total_time_us += record.device_time_us
        if cost is None or cost.engine is Engine.NONE:
            continue
        known = shared.get(id(cost))
        if known is None:
            busy = engine_busy(cost, hw)
            ramp = 0.0
            if Engine.TENSOR in busy and hw.gpu is None:
                full = busy[Engine.TENSOR]
                busy[Engine.TENSOR] = throttled_us(full, hw.tensor.warmup_us)
                ramp = busy[Engine.TENSOR] - full
            moves = cost.bytes_read or cost.bytes_written
            transfer = transfer_us(cost, hw) if moves else 0.0
            known = shared[id(cost)] = (_Work(cost, hw), busy, ramp, transfer,
                                        max(max(busy.values(), default=0.0), transfer))
        work, busy, ramp, transfer, longest = known
        _common(found, record, work, cost)
        name, module = record.name, record.module_path
        for engine, us in busy.items():
            found.active_us[engine.value] = found.active_us.get(engine.value, 0.0) + us
        if transfer:
            found.active_us[u.DMA] = found.active_us.get(u.DMA, 0.0) + transfer
        found.throttled_us += ramp
        found.hbm_read_bytes += record.bytes_read
        found.hbm_write_bytes += record.bytes_written
        small = _descriptors(found, work, record.bytes_read, record.bytes_written)
        if small:  # what the small descriptors cost beyond large transfers' pace
            found.note(u.SMALL_DMA, name, module, transfer * small / (record.bytes or 1) - small / large)
        fixed = max(0.0, record.device_time_us - longest)
        found.fixed_us += fixed
        tally = bounds.setdefault(name, {}).setdefault(record.bound, [0.0, 0.0])
        tally[0] += record.device_time_us
        tally[1] += 1
        found.kernels += 1
        found.note(u.FIXED, name, module, fixed)
        found.note(u.THROTTLE, name, module, ramp)
        if Engine.TENSOR in busy:  # not model FLOPs, nor transposes (their own rule)
            found.note(u.WASTED, name, module, busy[Engine.TENSOR] - work.model_us - work.transpose_us)
        if cost.engine is Engine.COLLECTIVE:
            found.collectives.setdefault((name, cost.bytes_read), []).append((record.device_time_us, module))
    for tallies in bounds.values():  # the heaviest bound: the most time, then calls, then name
        heaviest = min(tallies.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))[0]
        if heaviest == BOUND_FIXED:
            found.fixed_bound_us += sum(us for us, _ in tallies.values())
    return found


def graph_utilisation(records: Sequence[Any], costs: Sequence[OpCost | None], schedule: GraphSchedule,
                      hw: HardwareProfile, auto_cast: str) -> u.Utilisation:
    """Graph execution: the schedule's engine time, transfers, spills and transposes per op; its
    transfers (the DMA queue) kept for the trace."""
    found = u.Utilisation(GRAPH, hbm_bytes_per_us=hw.hbm_bytes_per_us)
    shared: dict[int, _Work] = {}
    large = hw.hbm_bytes_per_us * hw.dma_efficiency
    intervals: list[tuple[float, float, int]] = []
    for index, (record, cost) in enumerate(zip(records, costs)):
        found.total_time_us += record.device_time_us
        place = schedule.placements.get(index)
        if cost is None or place is None:
            continue
        work = shared.get(id(cost))
        if work is None:
            work = shared[id(cost)] = _Work(compiled(cost, hw, auto_cast), hw)
        _common(found, record, work, cost)
        name, module = record.name, record.module_path
        flops, flops_us = _transpose_flops(place.transposed, hw)
        found.hardware_flops += flops
        found.hardware_peak_us += flops_us
        found.transpose_flops += flops
        found.transpose_peak_us += flops_us
        found.note(u.TRANSPOSE, name, module, flops_us)
        for engine, us in place.busy.items():
            found.active_us[engine.value] = found.active_us.get(engine.value, 0.0) + us
        tensor_us = place.busy.get(Engine.TENSOR, 0.0)
        if tensor_us:
            found.note(u.WASTED, name, module, tensor_us - work.model_us - work.transpose_us - flops_us)
        found.throttled_us += place.throttled_us
        found.note(u.THROTTLE, name, module, place.throttled_us)
        found.hbm_read_bytes += record.bytes_read
        found.hbm_write_bytes += record.bytes_written
        found.spill_save_bytes += place.spill_written
        found.spill_reload_bytes += place.spill_read
        found.note(u.SPILL, name, module, place.spill_written + place.spill_read)
        small = _descriptors(found, work, record.bytes_read, record.bytes_written)
        moved = record.bytes_read + record.bytes_written
        if small and moved and place.memory_us:
            found.note(u.SMALL_DMA, name, module, (place.memory_us - moved / large) * small / moved)
        intervals += [(start, end, record.index) for start, end in place.transfers if end > start]
        found.kernels += 1
        if cost.engine is Engine.COLLECTIVE:  # its buffers move through DMA rings of its own
            if place.memory_us > 0:
                intervals.append((place.start_us, place.start_us + place.memory_us, record.index))
            found.collectives.setdefault((name, cost.bytes_read), []).append((place.duration_us, module))
    found.transfers = sorted(intervals)
    found.active_us[u.DMA] = _union(found.transfers)
    if not found.active_us[u.DMA]:
        del found.active_us[u.DMA]
    return found


def _union(intervals: Sequence[tuple[float, float, int]]) -> float:
    """The time covered by ``intervals`` (sorted by start)."""
    covered, end = 0.0, float("-inf")
    for start, stop, _ in intervals:
        if stop <= end:
            continue
        covered += stop - max(start, end)
        end = stop
    return covered


def utilisation(records: Sequence[Any], costs: Sequence[OpCost | None], hw: HardwareProfile,
                schedule: GraphSchedule | None, auto_cast: str) -> u.Utilisation:
    """A region's utilisation in the execution its ``schedule`` says (None: eager)."""
    if schedule is None:
        return eager_utilisation(records, costs, hw)
    return graph_utilisation(records, costs, schedule, hw, auto_cast)

