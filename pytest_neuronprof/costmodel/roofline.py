"""Device time of one op: launch + max(compute, HBM traffic), with the TensorE tile model.

Engines of a NeuronCore run concurrently, so an op that keeps several busy (attention: TensorE
and ScalarE) is as slow as its busiest engine (on a GPU profile, ``tensor.model = "roofline"``,
a fused kernel's elementwise work is part of its tensor-core efficiency instead). A GPU profile
with a ``[gpu]`` table adds what a GPU does with the same work (``gpu_time``): GEMM tiles in
waves over the SMs, row-wise kernels with a block per row, the L2 cache. Everything here is a
pure function of the OpCost and the hardware profile: the same inputs give the same float on
every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..vocabulary import (BOUND_COLLECTIVE, BOUND_FIXED, BOUND_GPSIMD, BOUND_HBM, BOUND_NONE,
                          BOUND_SCALAR, BOUND_TENSOR, BOUND_VECTOR, Engine)
from .opcost import POINT_TO_POINT, OpCost
from .profiles import GpuModel, HardwareProfile, LaneEngine, TensorEngine


@dataclass(frozen=True)
class Timing:
    launch_us: float
    compute_us: float
    memory_us: float
    device_time_us: float
    bound: str  # what limits it: one of vocabulary.BOUNDS
    peak_fraction: float = 0.0  # the share of its bound's peak it reaches


NO_TIME = Timing(0.0, 0.0, 0.0, 0.0, BOUND_NONE)

# Float32 elements per partition of one PSUM bank: the most one matmul writes, and so the size
# of the copies that move its results to SBUF (the NKI architecture guide: "a single PSUM
# bank, which can only hold 512 FP32 elements per PSUM partition").
PSUM_BANK_ELEMENTS = 512

# The limit an engine's busy time stands for (vocabulary.BOUNDS).
ENGINE_BOUNDS = {Engine.TENSOR: BOUND_TENSOR, Engine.VECTOR: BOUND_VECTOR,
                 Engine.SCALAR: BOUND_SCALAR, Engine.GPSIMD: BOUND_GPSIMD,
                 Engine.COLLECTIVE: BOUND_COLLECTIVE, Engine.DMA: BOUND_HBM}


def systolic_cycles(m: int, k: int, n: int, tensor: TensorEngine) -> float:
    """Cycles of one m x k @ k x n product on a P x P systolic array (NKI tile model).

    The contraction dim (k) and the stationary dim are padded to P (a partial tile pays for the
    whole array); the moving dim is split into chunks of at most ``moving_max`` columns, and
    each matmul instruction costs max(min_cycles, columns) cycles plus its fixed
    ``instruction_cycles``. The compiler picks whichever of m and n is stationary costs fewer
    cycles.
    """
    p, chunk, floor = tensor.partitions, tensor.moving_max, tensor.min_cycles
    extra = tensor.instruction_cycles

    def cycles(stationary: int, moving: int) -> float:
        full, rest = divmod(moving, chunk)
        per_tile = full * (max(floor, chunk) + extra) + ((max(floor, rest) + extra) if rest else 0)
        return math.ceil(k / p) * math.ceil(stationary / p) * per_tile

    return min(cycles(m, n), cycles(n, m))


def sharded_cycles(g: int, m: int, k: int, n: int, tensor: TensorEngine) -> float:
    """Cycles of ``g`` m x k @ k x n products on a logical core of ``tensor.arrays`` physical
    cores (LNC=2 on Trainium2 and 3): the compiler shards the work over the arrays along the
    batch, m or n (never k, whose partial sums would have to be added across cores), taking the
    cheapest split; the slowest shard sets the time."""
    arrays = tensor.arrays
    if arrays == 1:
        return g * systolic_cycles(m, k, n, tensor)
    options = [g * systolic_cycles(-(-m // arrays), k, n, tensor),
               g * systolic_cycles(m, k, -(-n // arrays), tensor)]
    if g >= arrays:
        options.append(-(-g // arrays) * systolic_cycles(m, k, n, tensor))
    return min(options)


def array_flops(g: int, m: int, k: int, n: int, tensor: TensorEngine) -> float:
    """FLOPs the array's instructions occupy for ``g`` m x k @ k x n products, as
    ``sharded_cycles`` runs them: split over the arrays the way it picks, each shard with its
    contraction and stationary dims padded to the partitions (a partial tile occupies the
    whole array's rows and columns), the moving dim as it is. A roofline (GPU) profile pads
    nothing: 2 g m k n."""
    if tensor.model == "roofline":
        return 2.0 * g * m * k * n
    p = tensor.partitions

    def one(a: int, b: int) -> float:  # a product on one array, stationary as systolic_cycles picks
        first, second = _orientation_cycles(a, k, b, tensor), _orientation_cycles(b, k, a, tensor)
        stationary, moving = (a, b) if first <= second else (b, a)
        return 2.0 * -(-k // p) * p * -(-stationary // p) * p * moving

    arrays = tensor.arrays
    if arrays == 1:
        return g * one(m, n)
    options = [(g * systolic_cycles(-(-m // arrays), k, n, tensor), arrays * g * one(-(-m // arrays), n)),
               (g * systolic_cycles(m, k, -(-n // arrays), tensor), arrays * g * one(m, -(-n // arrays)))]
    if g >= arrays:
        options.append((-(-g // arrays) * systolic_cycles(m, k, n, tensor), g * one(m, n)))
    return min(options, key=lambda option: option[0])[1]


def _orientation_cycles(stationary: int, k: int, moving: int, tensor: TensorEngine) -> float:
    """``systolic_cycles`` of one orientation: ``stationary`` on the array, ``moving`` through it."""
    p, chunk, floor, extra = tensor.partitions, tensor.moving_max, tensor.min_cycles, tensor.instruction_cycles
    full, rest = divmod(moving, chunk)
    per_tile = full * (max(floor, chunk) + extra) + ((max(floor, rest) + extra) if rest else 0)
    return math.ceil(k / p) * math.ceil(stationary / p) * per_tile


def peak_flops_per_us(cost: OpCost, tensor: TensorEngine) -> float:
    """The ceiling an op's TensorE work runs at on one array: a "<kind>.<dtype>" rate of the
    profile where it has one (h200: cuDNN runs float32 convolutions on TF32 tensor cores by
    default, while float32 matrix products stay in FP32), else the dtype's rate."""
    kind_rate = tensor.tflops.get(f"{cost.kind}.{cost.dtype}")
    return kind_rate * 1e6 if kind_rate is not None else tensor.flops_per_us(cost.dtype)


def tensor_time_us(cost: OpCost, tensor: TensorEngine) -> float:
    rate = peak_flops_per_us(cost, tensor) * tensor.efficiency.get(cost.kind, 1.0)
    if tensor.model == "roofline":
        work = cost.flops / rate
    else:
        # One cycle moves one column through the P x P array: 2 * P * P flops at peak rate.
        cycles_per_us = rate / (2 * tensor.partitions * tensor.partitions)
        if cost.array_products:  # what the kernel issues: once per tap of a convolution
            total_cycles = cost.taps * sum(sharded_cycles(g, m, k, n, tensor)
                                           for g, m, k, n in cost.array_products)
        else:
            total_cycles = sum(sharded_cycles(g, m, k, n, tensor) for g, m, k, n in cost.matmuls)
        work = total_cycles / cycles_per_us
    return tensor.fixed_us + work


def throttled_us(work_us: float, ramp_us: float) -> float:
    """Time of ``work_us`` of TensorE work (at full rate) started on a throttled array, whose
    rate ramps linearly from half to full over ``ramp_us`` (NeuronCore-v3/v4 after a quiet
    window): the ramp does 3/4 of its length's work."""
    if ramp_us <= 0 or work_us <= 0:
        return work_us
    if work_us >= 0.75 * ramp_us:
        return work_us + 0.25 * ramp_us
    # 0.5 t + 0.25 t^2 / ramp = work
    return 2.0 * ramp_us * (math.sqrt(0.25 + work_us / ramp_us) - 0.5)


def lane_time_us(elements: int, engine: LaneEngine, dtype: str = "float32", operands: int = 1,
                 free: int = 0) -> float:
    """``elements`` element operations (per input element, on an input-bound engine) of
    instructions reading ``operands`` tensors: the engine's rate, at least each instruction's
    minimum issue interval, plus each instruction's fixed cycles."""
    if not elements:
        return 0.0
    instructions = engine.instructions(elements, free)
    work = max(elements / engine.rate(dtype, operands),
               instructions * engine.min_cycles / (engine.clock_ghz * 1e3))
    return engine.fixed_us + instructions * engine.instruction_us + work


def psum_elements(cost: OpCost) -> int:
    """Elements a TensorE op's products leave in PSUM, which a lane engine must copy to SBUF
    before anything else can use them: each output once (a convolution's taps accumulate in
    place), a flash attention's P^T and O blocks (its S blocks leave through the exp on
    ScalarE, already in its ``overlapped`` work)."""
    if cost.kind == "conv" or not cost.array_products:
        return sum(g * m * n for g, m, _, n in cost.matmuls)
    products = cost.array_products[1:] if cost.kind == "attention" else cost.array_products
    return sum(g * m * n for g, m, _, n in products)


def evacuation_us(elements: int, hw: HardwareProfile) -> float:
    """VectorE time to copy ``elements`` float32 results from PSUM to SBUF (``tensor_copy``,
    one input, PSUM bank-sized instructions of 512 elements per partition)."""
    return lane_time_us(elements, hw.vector, "float32", 1, PSUM_BANK_ELEMENTS)


def transpose_busy(elements: int, hw: HardwareProfile) -> dict[Engine, float]:
    """A partition/free transpose of ``elements`` on TensorE (an identity product per 128 x 128
    block, 128 columns each) and the copy of its result out of PSUM on VectorE."""
    tensor = hw.tensor
    p = tensor.partitions
    cycles = -(-elements // (p * p)) * max(tensor.min_cycles, p) / tensor.arrays
    cycles_per_us = tensor.flops_per_us("bfloat16") / (2 * p * p)
    return {Engine.TENSOR: cycles / cycles_per_us, Engine.VECTOR: evacuation_us(elements, hw)}


def _lane_engine(hw: HardwareProfile, engine: Engine) -> LaneEngine:
    return {Engine.VECTOR: hw.vector, Engine.SCALAR: hw.scalar, Engine.GPSIMD: hw.gpsimd}[engine]


def read_traffic(cost: OpCost, hw: HardwareProfile) -> float:
    """Bytes the reads move: a strided read pulls whole granules of memory, so runs shorter than
    a granule cost the granule (a transposed copy reads one element per granule)."""
    run, granule = cost.read_run_bytes, hw.strided_granule_bytes
    if not run or not granule or run >= granule:
        return cost.bytes_read
    return cost.bytes_read * granule / run


def dma_share(size_bytes: float, hw: HardwareProfile) -> float:
    """The share of the HBM bandwidth DMA transfers of ``size_bytes`` per partition reach: each
    descriptor's fixed cost weighs like ``dma_half_bytes`` of data (the NKI DMA guide: under
    256 B per partition a transfer is overhead-bound; 2-4 KiB reach the peak), times what large
    transfers sustain (``dma_efficiency``)."""
    size = min(size_bytes, hw.dma_chunk_bytes) if hw.dma_chunk_bytes else size_bytes
    if hw.dma_half_bytes <= 0 or size <= 0:
        return hw.dma_efficiency
    return hw.dma_efficiency * size / (size + hw.dma_half_bytes)


def transfer_us(cost: OpCost, hw: HardwareProfile, read_bytes: float | None = None,
                written_bytes: float | None = None) -> float:
    """HBM time of an op's transfers (without the DMA's start): its tensors spread over the
    partitions, each descriptor as large as a tensor's share of a partition (at most a chunk);
    a strided read moves its contiguous runs, one descriptor each. ``read_bytes`` and
    ``written_bytes``: what is left of them (graph execution keeps some on chip)."""
    read = read_traffic(cost, hw) if read_bytes is None else read_bytes
    written = cost.bytes_written if written_bytes is None else written_bytes
    if not read and not written:
        return 0.0
    bandwidth = hw.hbm_bytes_per_us
    if hw.dma_half_bytes <= 0:
        return (read + written) / (bandwidth * hw.dma_efficiency)
    tensors = cost.operands + 1
    size = (cost.bytes_read + cost.bytes_written) / tensors / hw.vector.partitions
    read_size = min(size, cost.read_run_bytes) if cost.read_run_bytes else size
    return read / (bandwidth * dma_share(read_size, hw)) + written / (bandwidth * dma_share(size, hw))


def descriptor_bytes(cost: OpCost, hw: HardwareProfile) -> tuple[float, float]:
    """(bytes per DMA descriptor of an op's reads, of its writes), as ``transfer_us`` sizes
    them: each tensor spread over the partitions, at most a chunk per descriptor, a strided read
    one per contiguous run; (0, 0) when it moves nothing."""
    tensors = cost.operands + 1
    size = (cost.bytes_read + cost.bytes_written) / tensors / hw.vector.partitions
    if size <= 0:
        return 0.0, 0.0
    read_size = min(size, cost.read_run_bytes) if cost.read_run_bytes else size
    if hw.dma_chunk_bytes:
        return min(read_size, hw.dma_chunk_bytes), min(size, hw.dma_chunk_bytes)
    return read_size, size


def dma_share_of(cost: OpCost, hw: HardwareProfile) -> float:
    """The share of the HBM bandwidth an op's transfers reach, all of them together (its
    ``transfer_us`` as a rate; graph execution scales what is left of them by it)."""
    moved = read_traffic(cost, hw) + cost.bytes_written
    us = transfer_us(cost, hw)
    return moved / (us * hw.hbm_bytes_per_us) if us > 0 else hw.dma_efficiency


def device_time(cost: OpCost, hw: HardwareProfile) -> Timing:
    """Simulated device time of one op on ``hw``, run alone (eager execution): launch +
    max(compute, HBM traffic), where the compute is that of its busiest engine (engines of a
    NeuronCore run concurrently, so an op that keeps several busy, attention's TensorE and
    ScalarE, is as slow as the busiest) and the traffic pays its DMA's start. An op alone on a
    throttled TensorE (NeuronCore-v3/v4) pays the array's ramp."""
    if cost.engine is Engine.NONE:
        return NO_TIME
    if hw.gpu is not None:
        return gpu_time(cost, hw, hw.gpu)
    busy = engine_busy(cost, hw)
    if Engine.TENSOR in busy:
        busy[Engine.TENSOR] = throttled_us(busy[Engine.TENSOR], hw.tensor.warmup_us)
    compute = max(busy.values(), default=0.0)
    # a collective that moves nothing (over one rank, a barrier) starts no DMA
    idle = cost.engine is Engine.COLLECTIVE and not (cost.bytes_read or cost.bytes_written)
    memory = 0.0 if idle else transfer_us(cost, hw) + hw.dma_fixed_us
    device = hw.launch_us + max(compute, memory)
    bound, fraction = bound_of(busy, memory, peak_work(cost, hw), device)
    return Timing(hw.launch_us, compute, memory, device, bound, fraction)


def peak_work(cost: OpCost, hw: HardwareProfile, read_bytes: float | None = None,
              written_bytes: float | None = None) -> dict[str, float]:
    """What each limit an op meets would take at its peak, by bound name: its flops at TensorE's
    peak, its element operations at each lane engine's rate, its bytes at HBM's documented
    bandwidth, a collective's bytes at the links' bus bandwidth. No fixed costs."""
    work: dict[str, float] = {}
    if cost.engine is Engine.TENSOR and cost.flops:
        tensor = hw.tensor
        work[BOUND_TENSOR] = cost.flops / (peak_flops_per_us(cost, tensor) * tensor.arrays)
    elif cost.engine in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD) and cost.elements:
        lanes = _lane_engine(hw, cost.engine)
        streamed = cost.elements * (cost.operands if lanes.input_bound else 1)
        work[ENGINE_BOUNDS[cost.engine]] = streamed / lanes.rate(cost.dtype, cost.operands)
    elif cost.engine is Engine.COLLECTIVE and cost.link_bytes and hw.collectives.bus_gbps:
        work[BOUND_COLLECTIVE] = cost.link_bytes / (hw.collectives.bus_gbps * 1e3)
    for engine, elements in cost.overlapped:
        lanes = _lane_engine(hw, engine)
        work[ENGINE_BOUNDS[engine]] = max(work.get(ENGINE_BOUNDS[engine], 0.0),
                                          elements / lanes.rate(cost.dtype))
    read = cost.bytes_read if read_bytes is None else read_bytes
    written = cost.bytes_written if written_bytes is None else written_bytes
    if read + written:
        work[BOUND_HBM] = (read + written) / hw.hbm_bytes_per_us
    return work


def bound_of(busy: dict[Engine, float], memory_us: float, peak: dict[str, float],
             device_us: float) -> tuple[str, float]:
    """(what bounds an op, the share of that limit's peak it reaches): the engine or HBM whose
    time is longest; a fixed cost when what is fixed (launch, instruction overheads, the DMA's
    start, the array's ramp) outweighs the work at peak of that limit."""
    times = {ENGINE_BOUNDS[engine]: us for engine, us in busy.items()}
    if memory_us > 0:
        times[BOUND_HBM] = memory_us
    if not times or device_us <= 0:
        return BOUND_NONE, 0.0
    limit = max(times, key=lambda name: (times[name], name))
    work = peak.get(limit, 0.0)
    fraction = min(1.0, work / device_us)
    if device_us - work > work:  # more than half of the time is fixed cost
        return BOUND_FIXED, fraction
    return limit, fraction


def collective_us(cost: OpCost, hw: HardwareProfile) -> float:
    """A collective's time on the links: each step of the algorithm the runtime picks for its
    message size pays a hop's latency, and the rank's bytes cross the links at the bus
    bandwidth (HBM traffic is counted apart). Groups larger than an instance cross instances
    hierarchically (profiles.Collectives.phase_us). A point-to-point transfer: one step and its
    bytes (profiles.Collectives.p2p_us)."""
    if cost.collective in POINT_TO_POINT:
        return hw.collectives.p2p_us(cost.link_bytes)
    return hw.collectives.time_us(cost.ranks, cost.phases, cost.link_bytes, hw.cores_per_chip)


def collective_algorithm(cost: OpCost, hw: HardwareProfile) -> str:
    """The algorithm the runtime picks for a collective (profiles.Collectives.algorithm_of):
    "mesh", "rdh", "ring", "ring+ring" across instances, "p2p" for a point-to-point transfer,
    "" for one rank alone and for ops that are not collectives."""
    if cost.engine is not Engine.COLLECTIVE:
        return ""
    if cost.collective in POINT_TO_POINT:
        return "p2p"
    return hw.collectives.algorithm_of(cost.ranks, cost.phases, cost.link_bytes)


def engine_busy(cost: OpCost, hw: HardwareProfile) -> dict[Engine, float]:
    """Compute time of one op per engine: its primary engine's, and each engine working
    alongside (graph mode schedules them separately). DMA ops have none: their time is their
    transfers. A grouped convolution that carries its VectorE lowering too (``elements``) takes
    the cheaper of the two, as the compiler does."""
    if cost.engine in (Engine.NONE, Engine.DMA):
        return {}
    if cost.engine is Engine.COLLECTIVE:
        return {Engine.COLLECTIVE: collective_us(cost, hw)}
    if hw.gpu is not None:  # one kernel on the SMs: its compute, whatever units it uses
        return {cost.engine: gpu_time(cost, hw, hw.gpu).compute_us}
    if cost.engine is Engine.TENSOR:
        busy = {Engine.TENSOR: tensor_time_us(cost, hw.tensor)}
        if hw.tensor.model == "roofline":
            # On a GPU the elementwise work of a fused tensor-core kernel (attention's softmax)
            # runs in registers on the same SMs, between the MMAs: its cost is part of the
            # kernel's achieved efficiency[kind].
            return busy
        if cost.kind == "conv" and cost.elements:
            on_vector = lane_time_us(cost.elements * 2, hw.vector, cost.dtype, 2)
            if on_vector < busy[Engine.TENSOR]:
                return {Engine.VECTOR: on_vector}
    else:
        lanes = _lane_engine(hw, cost.engine)
        streamed = cost.elements * (cost.operands if lanes.input_bound else 1)
        busy = {cost.engine: lane_time_us(streamed, lanes, cost.dtype, cost.operands,
                                          cost.lane_free)}
    for engine, elements in cost.overlapped:
        busy[engine] = max(busy.get(engine, 0.0),
                           lane_time_us(elements, _lane_engine(hw, engine), cost.dtype, 1,
                                        cost.lane_free))
    if Engine.TENSOR in busy:  # its results leave PSUM through VectorE, alongside
        busy[Engine.VECTOR] = busy.get(Engine.VECTOR, 0.0) + evacuation_us(psum_elements(cost), hw)
    return busy


# --- the GPU model ----------------------------------------------------------------------------------
#
# A GPU runs an op as one or more kernels whose thread blocks (CTAs) are spread over its SMs. What
# the plain roofline misses, and this adds (every number it uses is in the profile's [gpu] table):
#
# * GEMMs (matmul, conv as implicit GEMM): the output is cut into CTA tiles, the tiles run in
#   waves over the SMs, the contraction in steps of the kernel's K tile; a tile's step is bound by
#   its tensor-core work, by the loading of its operands (small tiles reuse less), or by a latency
#   floor. The library picks the tile (and a split of K over several CTAs, when the tiles do not
#   fill the SMs) that is fastest: tile and wave quantization, so that 136 columns cost two
#   128-wide tiles, and K = 136 three 64-deep steps.
# * Convolutions: cuDNN's implicit GEMM pads the channels of each filter tap to its K tile
#   (3 input channels waste most of it), and NCHW tensors are transposed to NHWC and back around it.
# * Row-wise kernels (softmax, norms): a thread block or a warp per row, rows spread over the SMs;
#   few long rows leave SMs idle. Reductions split long rows over blocks instead. Both end with a
#   reduction tree, a latency.
# * Memory: an op whose bytes fit in L2 runs at the L2's bandwidth (the calibration repeats each
#   call on the same tensors); a strided read costs a whole sector of L2 bandwidth per scattered
#   element (strided_granule_bytes).

# CTA tiles (rows x columns of the output) of the kernels the libraries pick from: Hopper's
# tensor-core GEMMs (CUTLASS 3 / cuBLAS sm90 kernels) and FP32 CUDA-core (SIMT) GEMMs.
TENSOR_TILES = ((128, 256), (256, 128), (128, 128), (128, 64), (64, 128), (64, 64))
SIMT_TILES = ((128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32))
# cuDNN's implicit-GEMM convolutions: output positions x output channels, the channels in tiles of
# at least 128: fewer output channels waste the rest of the tile.
CONV_TILES = ((64, 128), (128, 128), (256, 128), (128, 256))
SPLITS = (2, 4, 8, 16, 32)  # split-K factors, tried when the tiles do not fill the SMs
SPLIT_MIN_K = 256  # ... keeping at least this much of the contraction in each split
_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float8": 1, "int8": 1, "float32": 4}


def gemm_us(batch: int, m: int, n: int, steps: int, k_tile: int, itemsize: int, flops_per_us_sm: float,
            gpu: GpuModel, tiles: tuple[tuple[int, int], ...], l2_bytes_per_us: float,
            launch_us: float) -> float:
    """Main-loop time of ``batch`` GEMMs of m x n outputs whose contraction takes ``steps`` steps
    of ``k_tile`` elements, with the fastest tile and split-K.

    Per tile (bm x bn) and step: max(tensor-core work 2 bm bn k_tile at the SM's rate, operand
    bytes (bm + bn) k_tile at the SM's feed bandwidth, the step's latency floor); then the
    epilogue stores the tile at the same bandwidth. The tiles run in waves of one CTA per SM.
    Split-K by s: s times the CTAs, each 1/s of the steps, storing fp32 partial sums that a
    second kernel (one more launch) reads back through L2 and reduces."""
    sms, feed = gpu.sms, gpu.feed_gbps_per_sm * 1e3
    best = math.inf
    for bm, bn in tiles:
        count = batch * -(-m // bm) * -(-n // bn)
        step = max(2.0 * bm * bn * k_tile / flops_per_us_sm, (bm + bn) * k_tile * itemsize / feed,
                   gpu.kstep_us)
        best = min(best, -(-count // sms) * (steps * step + bm * bn * itemsize / feed))
        if count >= sms:
            continue
        partials = batch * m * n * 4  # fp32 partial sums of one split
        for split in SPLITS:
            if split * SPLIT_MIN_K > steps * k_tile:
                break
            t = (-(-count * split // sms) * (-(-steps // split) * step + bm * bn * 4 / feed)
                 + launch_us + split * partials / l2_bytes_per_us)
            best = min(best, t)
    return best


def _gemm_compute_us(cost: OpCost, hw: HardwareProfile, gpu: GpuModel) -> tuple[float, bool]:
    """(main-loop time of the op's products, whether cuDNN transposes NCHW tensors around it)."""
    tensor = hw.tensor
    itemsize = _ITEMSIZE.get(cost.dtype, 4)
    rate_sm = peak_flops_per_us(cost, tensor) * tensor.efficiency.get(cost.kind, 1.0) / gpu.sms
    l2 = gpu.l2_gbps * 1e3
    total, transposes = 0.0, False
    for batch, m, k, n in cost.matmuls:
        if cost.kind == "conv" and cost.channels:
            channels = cost.channels
            window = max(1, k // channels)
            if batch > 1 and channels * itemsize < 16:
                # depthwise and narrow grouped convolutions: a direct kernel on the CUDA cores
                rate = tensor.flops_per_us("float32") * tensor.efficiency.get("conv", 1.0)
                total += 2.0 * batch * m * k * n / rate
                continue
            per_tap = max(1, gpu.conv_k_tile_bytes // itemsize)  # channels of one K step
            steps = window * -(-channels // per_tap)
            # implicit GEMM: output positions x output channels
            total += gemm_us(batch, n, m, steps, per_tap, itemsize, rate_sm, gpu, CONV_TILES, l2,
                             hw.launch_us)
            transposes = True
            continue
        simt = cost.dtype == "float32" and cost.kind == "matmul"
        k_tile = max(1, (gpu.simt_k_tile_bytes if simt else gpu.gemm_k_tile_bytes) // itemsize)
        total += gemm_us(batch, m, n, -(-k // k_tile), k_tile, itemsize, rate_sm, gpu,
                         SIMT_TILES if simt else TENSOR_TILES, l2, hw.launch_us)
    return total, transposes


def attention_us(cost: OpCost, hw: HardwareProfile, gpu: GpuModel) -> float:
    """Fused (flash) attention: a CTA per 128 query rows of a head, in waves over the SMs; each
    CTA loads its queries, steps through the keys 128 at a time (a causal mask: half as many
    steps, as the formula halves the keys), a step's work (its share of the op's FLOPs) at the
    SM's rate (at least a GEMM step's latency floor), then normalizes and stores its output:
    attention_cta_us per CTA for what is not a step."""
    heads, queries, _, keys = cost.matmuls[0]
    ctas = heads * -(-queries // 128)
    steps = -(-keys // 128)
    padded = cost.flops * (ctas * 128 / (heads * queries)) * (steps * 128 / keys)
    rate_sm = peak_flops_per_us(cost, hw.tensor) * hw.tensor.efficiency.get("attention", 1.0) / gpu.sms
    step = max(padded / (ctas * steps) / rate_sm, gpu.kstep_us)
    return -(-ctas // gpu.sms) * (gpu.attention_cta_us + steps * step)


# PyTorch's CUDA row-wise kernels (aten/src/ATen/native/cuda): (threads per row, elements per
# thread and load, passes over the row, rows resident per SM).
# layer norm (vectorized_layer_norm_kernel): a block of 128 threads per row, 4-element vector
# loads, a pass for the statistics and one to normalize, 16 blocks of 128 threads per SM.
NORM_KERNEL = (128, 4, 2, 16)
SOFTMAX_WARP_MAX = 1024  # softmax rows up to 1024 elements: a warp per row, the row in registers
SOFTMAX_SMEM_BYTES = 48 * 1024  # a longer row that fits in shared memory is read once, else thrice


def rowwise_us(cost: OpCost, gpu: GpuModel, resident: bool) -> float:
    """A row-wise kernel (softmax, norm) that gives each row a block or a warp: the rows spread
    over the SMs (ceil(rows / SMs) each), the slower of

    * throughput: an SM gets through row_elements_per_us (row_hbm_slowdown times fewer when the
      rows come from HBM: the kernel is latency-bound, and HBM answers later than L2);
    * latency: the SM walks each row in rounds of what its threads load at once, a round trip
      (row_step_us) each, pass after pass, for the rows it holds at a time: few long rows, few
      threads each (layer norm's 128), leave the SM waiting."""
    itemsize = _ITEMSIZE.get(cost.dtype, 4)
    rows_per_sm = -(-cost.rows // gpu.sms)
    rate = gpu.row_elements_per_us / (1.0 if resident else gpu.row_hbm_slowdown)
    throughput = rows_per_sm * cost.row_len / rate
    if cost.row_kernel == "norm":
        threads, per_load, passes, resident_rows = NORM_KERNEL
    elif cost.row_len <= SOFTMAX_WARP_MAX:
        threads, per_load, passes, resident_rows = 32, -(-cost.row_len // 32), 1, 64
    else:
        threads, per_load = 1024, max(1, 16 // itemsize)
        passes = 1 if cost.row_len * itemsize <= SOFTMAX_SMEM_BYTES else 3
        resident_rows = 2
    rounds = -(-cost.row_len // (threads * per_load)) * passes
    latency = -(-rows_per_sm // resident_rows) * rounds * gpu.row_step_us
    return max(throughput, latency)


def gpu_time(cost: OpCost, hw: HardwareProfile, gpu: GpuModel) -> Timing:
    """Device time of one op on a GPU profile: launch + serial stages + max(work, memory).

    The serial stages (a reduction tree's latency, a split-K reduction, cuDNN's layout
    transposes) are counted in both compute_us and memory_us, so that device time stays
    launch + max(compute, memory) and the bound says which of the overlapping parts dominates."""
    launch = hw.launch_us
    written = cost.bytes_written
    moved = cost.bytes_read + written
    resident = moved <= gpu.l2_mib * 1024 * 1024
    l2 = gpu.l2_gbps * 1e3
    hbm = hw.hbm_bytes_per_us
    serial = 0.0
    if cost.engine is Engine.TENSOR:
        if not cost.matmuls:
            compute = tensor_time_us(cost, hw.tensor)
        elif cost.kind == "attention":
            compute = hw.tensor.fixed_us + attention_us(cost, hw, gpu)
        else:
            work, transposes = _gemm_compute_us(cost, hw, gpu)
            compute = hw.tensor.fixed_us + work
            if transposes:  # NCHW -> NHWC for the input, NHWC -> NCHW for the output: two kernels
                serial = 2 * launch + 2 * moved / (l2 if resident else hbm)
        hbm = hbm * gpu.stream_fraction
    elif cost.engine is Engine.DMA:
        compute = 0.0
    elif cost.row_kernel == "reduce":
        # a reduction: streams its input, splitting long rows over blocks, then a tree
        compute, serial = 0.0, gpu.reduce_us
        hbm = hbm * gpu.stream_fraction
    elif cost.rows:
        compute = rowwise_us(cost, gpu, resident)
    else:
        compute = lane_time_us(cost.elements, _lane_engine(hw, cost.engine))
    memory = max(0.0 if resident else moved / hbm, (read_traffic(cost, hw) + written) / l2)
    if cost.engine is Engine.DMA:
        memory += hw.dma_fixed_us
    compute += serial
    memory += serial
    device = launch + max(compute, memory)
    bound, fraction = bound_of({cost.engine: compute} if compute else {}, memory,
                               peak_work(cost, hw), device)
    return Timing(launch, compute, memory, device, bound, fraction)
