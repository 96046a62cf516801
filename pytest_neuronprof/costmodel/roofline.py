"""Device time of one op: launch + max(compute, HBM traffic), with the TensorE tile model.

Engines of a NeuronCore run concurrently, so an op that keeps several busy (attention: TensorE
and ScalarE) is as slow as its busiest engine (on a GPU profile, ``tensor.model = "roofline"``,
a fused kernel's elementwise work is part of its tensor-core efficiency instead). Everything here
is a pure function of the OpCost and the hardware profile: the same inputs give the same float on
every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..vocabulary import Engine
from .formulas import OpCost
from .profiles import HardwareProfile, LaneEngine, TensorEngine


@dataclass(frozen=True)
class Timing:
    launch_us: float
    compute_us: float
    memory_us: float
    device_time_us: float
    bound: str  # "compute", "memory" or "none" (free ops)


NO_TIME = Timing(0.0, 0.0, 0.0, 0.0, "none")


def systolic_cycles(m: int, k: int, n: int, tensor: TensorEngine) -> int:
    """Cycles of one m x k @ k x n product on a P x P systolic array (NKI tile model).

    The contraction dim (k) and the stationary dim are padded to P; the moving dim is split into
    chunks of at most ``moving_max`` columns, and each matmul instruction costs
    max(min_cycles, columns) cycles. The compiler picks whichever of m and n is stationary
    costs fewer cycles.
    """
    p, chunk, floor = tensor.partitions, tensor.moving_max, tensor.min_cycles

    def cycles(stationary: int, moving: int) -> int:
        full, rest = divmod(moving, chunk)
        per_tile = full * max(floor, chunk) + (max(floor, rest) if rest else 0)
        return math.ceil(k / p) * math.ceil(stationary / p) * per_tile

    return min(cycles(m, n), cycles(n, m))


def peak_flops_per_us(cost: OpCost, tensor: TensorEngine) -> float:
    """The ceiling an op's TensorE work runs at: a "<kind>.<dtype>" rate of the profile where it
    has one (h200: cuDNN runs float32 convolutions on TF32 tensor cores by default, while float32
    matrix products stay in FP32), else the dtype's rate."""
    kind_rate = tensor.tflops.get(f"{cost.kind}.{cost.dtype}")
    return kind_rate * 1e6 if kind_rate is not None else tensor.flops_per_us(cost.dtype)


def tensor_time_us(cost: OpCost, tensor: TensorEngine) -> float:
    rate = peak_flops_per_us(cost, tensor) * tensor.efficiency.get(cost.kind, 1.0)
    if tensor.model == "roofline":
        work = cost.flops / rate
    else:
        # One cycle moves one column through the P x P array: 2 * P * P flops at peak rate.
        cycles_per_us = rate / (2 * tensor.partitions * tensor.partitions)
        total_cycles = sum(g * systolic_cycles(m, k, n, tensor) for g, m, k, n in cost.matmuls)
        work = total_cycles / cycles_per_us
    return tensor.fixed_us + work


def lane_time_us(elements: int, engine: LaneEngine) -> float:
    return engine.fixed_us + elements / engine.elements_per_us if elements else 0.0


def _lane_engine(hw: HardwareProfile, engine: Engine) -> LaneEngine:
    return {Engine.VECTOR: hw.vector, Engine.SCALAR: hw.scalar, Engine.GPSIMD: hw.gpsimd}[engine]


def read_traffic(cost: OpCost, hw: HardwareProfile) -> float:
    """Bytes the reads move: a strided read pulls whole granules of memory, so runs shorter than
    a granule cost the granule (a transposed copy reads one element per granule)."""
    run, granule = cost.read_run_bytes, hw.strided_granule_bytes
    if not run or not granule or run >= granule:
        return cost.bytes_read
    return cost.bytes_read * granule / run


def device_time(cost: OpCost, hw: HardwareProfile) -> Timing:
    """Simulated device time of one op on ``hw``."""
    if cost.engine is Engine.NONE:
        return NO_TIME
    if cost.engine is Engine.TENSOR:
        compute = tensor_time_us(cost, hw.tensor)
    elif cost.engine is Engine.DMA:
        compute = 0.0
    else:
        compute = lane_time_us(cost.elements, _lane_engine(hw, cost.engine))
    overlapped = cost.overlapped
    if cost.engine is Engine.TENSOR and hw.tensor.model == "roofline":
        # On a GPU the elementwise work of a fused tensor-core kernel (attention's softmax) runs
        # in registers on the same SMs, between the MMAs: its cost is part of the kernel's
        # achieved efficiency[kind]. The lane engines' rates describe standalone kernels.
        overlapped = ()
    for engine, elements in overlapped:
        compute = max(compute, lane_time_us(elements, _lane_engine(hw, engine)))
    memory = (read_traffic(cost, hw) + cost.bytes_written) / hw.hbm_bytes_per_us
    if cost.engine is Engine.DMA:
        memory += hw.dma_fixed_us
    bound = "compute" if compute > memory else "memory"
    return Timing(hw.launch_us, compute, memory, hw.launch_us + max(compute, memory), bound)


def engine_busy(cost: OpCost, hw: HardwareProfile) -> dict[Engine, float]:
    """Compute time of one op per engine: its primary engine's, and each engine working
    alongside (graph mode schedules them separately). DMA ops have none: their time is their
    transfers."""
    if cost.engine in (Engine.NONE, Engine.DMA):
        return {}
    if cost.engine is Engine.TENSOR:
        busy = {Engine.TENSOR: tensor_time_us(cost, hw.tensor)}
        if hw.tensor.model == "roofline":
            return busy  # a GPU's fused elementwise work is part of the kernel's efficiency
    else:
        busy = {cost.engine: lane_time_us(cost.elements, _lane_engine(hw, cost.engine))}
    for engine, elements in cost.overlapped:
        busy[engine] = max(busy.get(engine, 0.0), lane_time_us(elements, _lane_engine(hw, engine)))
    return busy
