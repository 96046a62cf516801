"""Hardware profiles: one TOML data file per chip under ``hardware/``, loaded and validated."""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from ..errors import HardwareProfileError
from .catalog import available_hardware  # noqa: F401 - the names, here too (its home is light)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TENSOR_MODELS = ("systolic", "roofline")
TENSOR_KINDS = ("matmul", "conv", "attention")


@dataclass(frozen=True)
class LaneEngine:
    """A SIMD engine (VectorE, ScalarE, GpSimd): ``lanes`` elements per cycle at ``clock_ghz``.

    An op runs as instructions over the engine's partitions, each on at most ``free_max``
    elements per partition and each paying ``instruction_cycles`` of fixed cost (issue and
    static overhead: the NKI performance guide). ``fast_lanes``: elements per cycle of 2-byte
    dtypes (bf16, fp16) in the fast modes some instructions have: those reading one tensor
    (tensor_scalar, activation), never two (tensor_tensor); 0: none."""

    lanes: int
    clock_ghz: float
    efficiency: float = 1.0
    fixed_us: float = 0.0
    fast_lanes: int = 0
    # The data path takes ``lanes`` input elements per cycle: an op streaming two tensors in
    # spends two cycles per output column (NeuronCore engines; a GPU's are output-bound)
    input_bound: bool = False
    instruction_cycles: float = 0.0
    min_cycles: float = 0.0  # the shortest an instruction takes (its minimum issue interval)
    partitions: int = 128
    free_max: int = 0  # 0: one instruction per op

    @property
    def elements_per_us(self) -> float:
        return self.lanes * self.clock_ghz * 1e3 * self.efficiency

    def rate(self, dtype: str, operands: int = 1) -> float:
        """Elements per us of ``dtype`` (a rate-table key) for an instruction that reads
        ``operands`` tensors."""
        fast = self.fast_lanes and operands == 1 and dtype in ("bfloat16", "float16")
        return (self.fast_lanes if fast else self.lanes) * self.clock_ghz * 1e3 * self.efficiency

    def instructions(self, elements: int, free: int = 0) -> int:
        """Instructions that cover ``elements`` spread over the partitions, each on at most
        ``free`` (else ``free_max``) elements per partition; 0 when it has none."""
        if not elements:
            return 0
        size = free or self.free_max
        return -(-elements // (self.partitions * size)) if size else 1

    @property
    def instruction_us(self) -> float:
        return self.instruction_cycles / (self.clock_ghz * 1e3)


@dataclass(frozen=True)
class Collectives:
    """Communication with other ranks (NeuronLink within an instance, EFA between instances).

    The runtime picks the algorithm by message size (the Neuron docs, intra-node collectives):
    Mesh below ``mesh_max_bytes`` (a step between chips and one within a chip per phase),
    recursive halving-doubling up to ``rhd_max_bytes`` (ceil(log2 chips) steps and one within),
    rings above (p - 1 steps). The sizes are quoted for a group of ``algorithm_ranks`` ranks (the
    docs' whole Trn2 server, 64 ranks); the runtime's choice goes by the chunk each rank owns,
    so a group of p ranks switches at p / ``algorithm_ranks`` of them (0: the sizes as they are).
    Each step pays a hop's
    latency; each rank's bytes cross the links at the bus bandwidth nccom-test reports
    (``bus_gbps``, per rank). Groups larger than ``ranks_per_node`` cross instances
    hierarchically (the inter-node page): within each instance over its ranks, and between the
    instances over 1 / (ranks per instance) of the buffer, whose steps pay ``node_hop_us`` and
    whose bytes ``node_bus_gbps``.

    Mesh writes straight to every other chip, routed through the chips between (``torus``: the
    instance's chips as a torus, e.g. 4 x 4): its step between chips ends when the farthest write
    lands, a hop per chip on the way. Without a torus that step is one hop.

    A graph execution whose collectives span p ranks starts with a barrier over them
    (``barrier_us``): ``barrier_phases`` phases (arrive and release) at the latency of the
    group's smallest collective, the same steps and hops with no bytes (0: no barrier).

    Collectives run on the CC cores, apart from the compute engines, and move their data through
    DMA rings of their own; the DMA engines serve those rings and compute's round-robin, one
    packet of each ring at a time: ``dma_packet_bytes`` of compute's (the runtime's
    NEURON_RT_DBG_DMA_PACKETIZATION_SIZE) for every ``cc_packet_bytes`` of a collective's
    (NEURON_RT_DBG_CC_DMA_PACKET_SIZE). While a collective runs, compute's transfers get
    ``compute_dma_share`` of the DMA (0 packet sizes: the profile has no such sharing, 1)."""

    hop_us: float = 0.0
    bus_gbps: float = 0.0  # per rank
    node_hop_us: float = 0.0
    node_bus_gbps: float = 0.0
    ranks_per_node: int = 0  # 0: every group fits in one instance
    mesh_max_bytes: float = 0.0
    rhd_max_bytes: float = 0.0
    torus: tuple[int, ...] = ()  # the instance's chips as a torus (chips per dimension)
    algorithm_ranks: int = 0  # the group size mesh_max_bytes and rhd_max_bytes are quoted for
    barrier_phases: int = 0  # phases of a graph execution's barrier over its ranks
    dma_packet_bytes: int = 0  # a DMA packet of compute's transfers (the runtime's default)
    cc_packet_bytes: int = 0  # a DMA packet of a collective's (the runtime's default)

    @property
    def compute_dma_share(self) -> float:
        """The share of the DMA's throughput compute's transfers get while a collective runs:
        round-robin per packet, compute's packet against the collective's (the runtime's
        compute-communication overlap page); 1 where the profile gives no packet sizes."""
        if not self.dma_packet_bytes or not self.cc_packet_bytes:
            return 1.0
        return self.dma_packet_bytes / (self.dma_packet_bytes + self.cc_packet_bytes)

    def _thresholds(self, ranks: int) -> tuple[float, float]:
        """(Mesh's largest message, RDH's largest) for a group of ``ranks``."""
        if not self.algorithm_ranks:
            return self.mesh_max_bytes, self.rhd_max_bytes
        scale = ranks / self.algorithm_ranks
        return self.mesh_max_bytes * scale, self.rhd_max_bytes * scale

    def algorithm(self, ranks: int, message_bytes: float) -> str:
        """The algorithm the runtime picks for a phase of ``message_bytes`` over ``ranks``:
        "mesh", "rdh" or "ring"."""
        mesh_max, rhd_max = self._thresholds(ranks)
        if mesh_max and message_bytes < mesh_max:
            return "mesh"
        if rhd_max and message_bytes <= rhd_max:
            return "rdh"
        return "ring"

    def steps(self, ranks: int, message_bytes: float, ranks_per_chip: int = 1) -> int:
        """Steps of one phase (a reduce-scatter or an all-gather) of ``message_bytes`` over
        ``ranks`` ranks, with the algorithm the runtime picks for that size: Mesh sends to the
        other chips in one step and spreads within each chip in a second; halving-doubling
        takes ceil(log2 chips) steps between chips and one within; a ring p - 1 steps."""
        if ranks <= 1:
            return 0
        per_chip = max(1, min(ranks, ranks_per_chip))
        chips = -(-ranks // per_chip)
        within = 1 if per_chip > 1 else 0
        algorithm = self.algorithm(ranks, message_bytes)
        if algorithm == "mesh":
            return (1 if chips > 1 else 0) + within
        if algorithm == "rdh":
            return math.ceil(math.log2(chips)) + within
        return ranks - 1

    def route_hops(self, chips: int) -> int:
        """Chip-to-chip hops of the farthest write from one of ``chips`` chips to another, the
        group packed into the torus dimension by dimension (on a ring of n chips no chip is more
        than n // 2 away): 16 chips of a 4 x 4 torus 4, 8 chips 3, 4 chips 2, 2 chips 1."""
        if chips <= 1:
            return 0
        if not self.torus:
            return 1
        hops, left = 0, chips
        for size in self.torus:
            if left <= 1:
                break
            span = min(size, left)
            hops += min(span - 1, size // 2)
            left = -(-left // span)
        return max(1, hops)

    def latency_us(self, ranks: int, message_bytes: float, ranks_per_chip: int = 1) -> float:
        """Latency of one phase within an instance: its steps (``steps``) at ``hop_us`` each, a
        Mesh step between chips at a hop per chip on its farthest route (``route_hops``)."""
        steps = self.steps(ranks, message_bytes, ranks_per_chip)
        if ranks > 1 and self.algorithm(ranks, message_bytes) == "mesh":
            per_chip = max(1, min(ranks, ranks_per_chip))
            chips = -(-ranks // per_chip)
            if chips > 1:  # the step between chips: its farthest route instead of one hop
                steps += self.route_hops(chips) - 1
        return steps * self.hop_us

    def crosses_nodes(self, ranks: int) -> bool:
        return bool(self.ranks_per_node) and ranks > self.ranks_per_node

    def nodes(self, ranks: int) -> tuple[int, int]:
        """(instances, ranks on each) of a group of ``ranks``: the same number on every instance
        (the inter-node page: groups are formed with symmetry)."""
        if not self.crosses_nodes(ranks):
            return 1, ranks
        instances = -(-ranks // self.ranks_per_node)
        return instances, -(-ranks // instances)

    def phase_us(self, ranks: int, message_bytes: float, ranks_per_chip: int = 1) -> float:
        """One phase (a reduce-scatter or an all-gather) of a ``message_bytes`` buffer over
        ``ranks``: latency and transfer. Across instances, hierarchical: the phase within each
        instance over its Y ranks on the whole buffer, and between the X instances over 1 / Y of
        it (the inter-node collectives page: "Global AllReduce = intra-node ReduceScatter +
        inter-node AllReduce + intra-node AllGather", the inter-node stage on "a different 1/Y
        section of the original buffer")."""
        if ranks <= 1:
            return 0.0
        instances, local = self.nodes(ranks)
        us = 0.0
        if local > 1:
            us += self.latency_us(local, message_bytes, ranks_per_chip)
            if self.bus_gbps:
                us += (local - 1) / local * message_bytes / (self.bus_gbps * 1e3)
        if instances > 1:
            share = message_bytes / local
            us += self.steps(instances, share) * self.node_hop_us
            if self.node_bus_gbps:
                us += (instances - 1) / instances * share / (self.node_bus_gbps * 1e3)
        return us

    def time_us(self, ranks: int, phases: int, link_bytes: float, ranks_per_chip: int = 1) -> float:
        """A collective's time on the links: ``phases`` phases (an all-reduce's two) over
        ``ranks``, whose ranks send ``link_bytes`` in all (phases x (p - 1) / p of the buffer)."""
        if ranks <= 1 or not phases:  # one rank alone: nothing to exchange or wait for
            return 0.0
        message = link_bytes * ranks / ((ranks - 1) * phases)
        return phases * self.phase_us(ranks, message, ranks_per_chip)

    def algorithm_of(self, ranks: int, phases: int, link_bytes: float) -> str:
        """The algorithm the runtime picks for a collective of ``phases`` phases over ``ranks``
        whose ranks send ``link_bytes`` (as ``time_us`` reads them): "mesh", "rdh" or "ring"
        within an instance; across instances the algorithm within them and the one between,
        "ring+rdh" ("none+..." with one rank per instance); "" for one rank alone, and where the
        profile models no links."""
        if ranks <= 1 or not phases or not (self.hop_us or self.bus_gbps):  # (no links modelled)
            return ""
        message = link_bytes * ranks / ((ranks - 1) * phases)
        instances, local = self.nodes(ranks)
        if instances == 1:
            return self.algorithm(ranks, message)
        inner = self.algorithm(local, message) if local > 1 else "none"
        return f"{inner}+{self.algorithm(instances, message / local)}"

    def p2p_us(self, nbytes: float) -> float:
        """A point-to-point transfer (send, receive) of ``nbytes`` to a rank of the instance: one
        step, and the bytes at the bus bandwidth (an assumption: nccom-test publishes no
        point-to-point figure)."""
        if not self.hop_us and not self.bus_gbps:
            return 0.0
        return self.hop_us + (nbytes / (self.bus_gbps * 1e3) if self.bus_gbps else 0.0)

    def barrier_us(self, ranks: int, ranks_per_chip: int = 1) -> float:
        """The barrier a graph execution over ``ranks`` starts with: ``barrier_phases`` phases of
        no bytes over the group."""
        if ranks <= 1 or not self.barrier_phases:
            return 0.0
        return self.barrier_phases * self.phase_us(ranks, 0.0, ranks_per_chip)


@dataclass(frozen=True)
class TensorEngine:
    """TensorE: a systolic array with the NKI tile model, or a plain roofline (GPUs)."""

    model: str
    tflops: Mapping[str, float]
    efficiency: Mapping[str, float]
    partitions: int = 128
    moving_max: int = 512
    min_cycles: int = 64
    fixed_us: float = 0.0
    arrays: int = 1  # physical cores in the logical core, each with its array (LNC)
    # Fixed cycles of each matmul instruction beyond its columns (issue, PSUM hand-off)
    instruction_cycles: float = 0.0
    # NeuronCore-v3/v4 throttle TensorE after a quiet window: it starts at half rate and
    # ramps to full over ``warmup_us``; an op launched alone pays the ramp (0: no throttling)
    warmup_us: float = 0.0

    def flops_per_us(self, dtype: str) -> float:
        """Peak flops per us of one array for ``dtype``: its rate; one-byte integers without a
        rate of their own at bfloat16's (the compiler casts them), anything else at float32's."""
        rate = self.tflops.get(dtype)
        if rate is None:
            rate = self.tflops.get("bfloat16" if dtype == "int8" else "float32", self.tflops["float32"])
        return rate * 1e6


@dataclass(frozen=True)
class GpuModel:
    """What a GPU profile adds to the roofline (the ``[gpu]`` table; see roofline.gpu_time).

    sms: streaming multiprocessors, the units a kernel's thread blocks (CTAs) are spread over.
    l2_mib, l2_gbps: the L2 cache: an op whose bytes (read + written) fit in it runs at the L2
        bandwidth when its data is there already (repeated calls on the same tensors).
    gemm_k_tile_bytes, simt_k_tile_bytes, conv_k_tile_bytes: the contraction (K) tile, in bytes
        of one row, of tensor-core GEMM kernels, of FP32 CUDA-core (SIMT) GEMM kernels, and of
        cuDNN's implicit-GEMM convolutions (whose K loop pads the channels of each filter tap).
    feed_gbps_per_sm: the bandwidth at which one SM loads its GEMM tiles' operands (L2 to shared
        memory): small tiles, with less reuse, are bound by it.
    kstep_us: the latency floor of one step of a GEMM main loop.
    attention_cta_us: what a fused (flash) attention CTA spends outside its KV steps: loading
        its queries, normalizing and storing its output.
    stream_fraction: the share of the HBM bandwidth a GEMM or a reduction reaches streaming its
        input (copies and elementwise kernels reach all of it).
    row_elements_per_us: the element rate of one SM running a row-wise kernel (softmax, norm)
        that gives each row a thread block or a warp, on rows that are in L2.
    row_hbm_slowdown: how much slower that rate is on rows that come from HBM (such a kernel is
        latency-bound: each SM has few loads in flight, and HBM answers later than L2).
    row_step_us: one round trip of a row-wise kernel's loop (a load and the arithmetic that
        waits on it): what a row costs per round when too few threads work on it.
    reduce_us: the latency of a reduction kernel's tree (block reductions, the blocks' partial
        results combined in global memory).
    """

    sms: int
    l2_mib: float
    l2_gbps: float
    gemm_k_tile_bytes: int
    simt_k_tile_bytes: int
    conv_k_tile_bytes: int
    feed_gbps_per_sm: float
    kstep_us: float
    attention_cta_us: float
    stream_fraction: float
    row_elements_per_us: float
    row_hbm_slowdown: float
    row_step_us: float
    reduce_us: float


GPU_FIELDS = {  # name -> (least value, default; None: required)
    "sms": (1, None), "l2_mib": (0, 0.0), "l2_gbps": (1e-9, None),
    "gemm_k_tile_bytes": (1, 128), "simt_k_tile_bytes": (1, 32), "conv_k_tile_bytes": (1, 64),
    "feed_gbps_per_sm": (1e-9, None), "kstep_us": (0, 0.0), "attention_cta_us": (0, 0.0),
    "stream_fraction": (1e-9, 1.0), "row_elements_per_us": (1e-9, None),
    "row_hbm_slowdown": (1e-9, 1.0), "row_step_us": (0, 0.0), "reduce_us": (0, 0.0),
}
GPU_INTEGERS = ("sms", "gemm_k_tile_bytes", "simt_k_tile_bytes", "conv_k_tile_bytes")


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    cores_per_chip: int
    launch_us: float
    dma_fixed_us: float
    hbm_gbps: float
    sbuf_mib: float
    tensor: TensorEngine
    vector: LaneEngine
    scalar: LaneEngine
    gpsimd: LaneEngine
    sources: Mapping[str, str]
    # Device memory (HBM) one core can use, as the SDK exposes cores (a logical core where the
    # profile is LNC=2): the TOML's hbm_gib_per_core, in bytes. What "does it fit" checks.
    hbm_bytes_per_core: int
    # DMA: the share of ``hbm_gbps`` large transfers sustain, and how a transfer's size per
    # partition sets its efficiency: size / (size + dma_half_bytes), for transfers of at most
    # dma_chunk_bytes per partition (0: every transfer at full efficiency)
    dma_efficiency: float = 1.0
    dma_half_bytes: float = 0.0
    dma_chunk_bytes: float = 8192.0
    # A strided read pulls memory in units of this many bytes: a run shorter than that costs
    # the whole unit (0: every byte read is useful)
    strided_granule_bytes: float = 0.0
    # Graph execution: the fixed cost of launching one compiled graph (host and runtime side)
    graph_execution_us: float = 0.0
    # ... and its fixed cost on the device, paid by every execution (a one-op graph's floor)
    graph_floor_us: float = 0.0
    # The host link, for figures that time a call from the host with host tensors (benchmarks/
    # published.py; nothing in the device model uses them): input copies to the device at
    # host_h2d_gbps, output copies back at host_d2h_gbps (device write, DMA and the framework's
    # copy, as one effective rate), host_transfer_us per tensor copied; an output larger than
    # host_mmap_bytes lands in freshly mapped host pages, faulted in at host_fresh_page_gbps
    # (0: no such cost). 0 rates: the profile has no host link (transfers not modelled).
    host_h2d_gbps: float = 0.0
    host_d2h_gbps: float = 0.0
    host_transfer_us: float = 0.0
    host_mmap_bytes: float = 0.0
    host_fresh_page_gbps: float = 0.0
    collectives: Collectives = Collectives()
    # A GPU profile's occupancy, cache and kernel geometry (None: the plain roofline)
    gpu: GpuModel | None = None

    @property
    def hbm_bytes_per_us(self) -> float:
        return self.hbm_gbps * 1e3


@functools.lru_cache(maxsize=None)
def load_hardware(name: str) -> HardwareProfile:
    """Load a bundled profile by name, e.g. ``load_hardware("trn2")``."""
    names = available_hardware()
    if name not in names:
        raise HardwareProfileError(
            f"unknown hardware profile {name!r}; valid choices: {', '.join(names)}"
        )
    path = resources.files(__package__).joinpath("hardware").joinpath(f"{name}.toml")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise HardwareProfileError(f"hardware profile {path}: not valid TOML ({exc})") from None
    return parse_profile(data, str(path))


def _number(table: Mapping[str, Any], key: str, where: str, default: float | None = None,
            prefix: str = "") -> float:
    # prefix ("vector.", "tensor.tflops.") makes the message name the field in full: "lanes"
    # alone would not say which of [vector], [scalar] or [gpsimd] is wrong.
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HardwareProfileError(f"hardware profile {where}: {prefix}{key} must be a finite number, got {value!r}")
    if value < 0:
        raise HardwareProfileError(f"hardware profile {where}: {prefix}{key} must not be negative, got {value!r}")
    return float(value)


def _flag(table: Mapping[str, Any], key: str, where: str, prefix: str = "") -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise HardwareProfileError(f"hardware profile {where}: {prefix}{key} must be true or false, got {value!r}")
    return value


def _lane_engine(data: Mapping[str, Any], key: str, where: str) -> LaneEngine:
    table = data.get(key)
    if not isinstance(table, dict):
        raise HardwareProfileError(f"hardware profile {where}: missing table [{key}]")
    at = f"{key}."
    engine = LaneEngine(
        lanes=int(_number(table, "lanes", where, prefix=at)),
        clock_ghz=_number(table, "clock_ghz", where, prefix=at),
        efficiency=_number(table, "efficiency", where, 1.0, prefix=at),
        fixed_us=_number(table, "fixed_us", where, 0.0, prefix=at),
        fast_lanes=int(_number(table, "fast_lanes", where, 0, prefix=at)),
        input_bound=_flag(table, "input_bound", where, prefix=at),
        instruction_cycles=_number(table, "instruction_cycles", where, 0.0, prefix=at),
        min_cycles=_number(table, "min_cycles", where, 0.0, prefix=at),
        partitions=max(1, int(_number(table, "partitions", where, 128, prefix=at))),
        free_max=int(_number(table, "free_max", where, 0, prefix=at)),
    )
    if engine.elements_per_us <= 0:
        raise HardwareProfileError(f"hardware profile {where}: [{key}] has zero throughput")
    return engine


def _collectives(data: Mapping[str, Any], where: str) -> Collectives:
    table = data.get("collectives", {})
    if not isinstance(table, dict):
        raise HardwareProfileError(f"hardware profile {where}: [collectives] must be a table")
    values = {key: _number(table, key, where, 0.0, prefix="collectives.")
              for key in ("hop_us", "bus_gbps", "node_hop_us", "node_bus_gbps",
                          "ranks_per_node", "mesh_max_bytes", "rhd_max_bytes", "algorithm_ranks",
                          "barrier_phases", "dma_packet_bytes", "cc_packet_bytes")}
    for key in ("ranks_per_node", "algorithm_ranks", "barrier_phases", "dma_packet_bytes",
                "cc_packet_bytes"):
        values[key] = int(values[key])
    torus = table.get("torus", [])
    if not isinstance(torus, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in torus):
        raise HardwareProfileError(f"hardware profile {where}: collectives.torus must be a list of "
                                   f"positive whole numbers (chips per dimension, e.g. [4, 4]), got {torus!r}")
    return Collectives(**values, torus=tuple(torus))  # type: ignore[arg-type]


def _gpu(data: Mapping[str, Any], where: str) -> GpuModel | None:
    table = data.get("gpu")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise HardwareProfileError(f"hardware profile {where}: [gpu] must be a table")
    values: dict[str, Any] = {}
    for key, (least, default) in GPU_FIELDS.items():
        if default is None and key not in table:
            raise HardwareProfileError(f"hardware profile {where}: gpu.{key} is missing")
        value = _number(table, key, where, default, prefix="gpu.")
        if value < least or (least > 0 and value <= 0):
            raise HardwareProfileError(
                f"hardware profile {where}: gpu.{key} must be at least {least:g}, got {value!r}")
        values[key] = int(value) if key in GPU_INTEGERS else value
    return GpuModel(**values)


def parse_profile(data: Mapping[str, Any], where: str) -> HardwareProfile:
    """Validate one profile's parsed TOML; every field named in an error message."""
    tensor = data.get("tensor")
    if not isinstance(tensor, dict):
        raise HardwareProfileError(f"hardware profile {where}: missing table [tensor]")
    model = tensor.get("model")
    if model not in TENSOR_MODELS:
        raise HardwareProfileError(
            f"hardware profile {where}: tensor.model must be one of {TENSOR_MODELS}, got {model!r}"
        )
    tflops = {k: _number(tensor.get("tflops", {}), k, where, prefix="tensor.tflops.")
              for k in tensor.get("tflops", {})}
    if tflops.get("float32", 0) <= 0:
        raise HardwareProfileError(f"hardware profile {where}: tensor.tflops needs a positive float32 rate")
    efficiency = {k: _number(tensor.get("efficiency", {}), k, where, 1.0, prefix="tensor.efficiency.")
                  for k in TENSOR_KINDS}
    for key in ("partitions", "moving_max"):  # divisors of the tile model
        if key in tensor and _number(tensor, key, where, prefix="tensor.") < 1:
            raise HardwareProfileError(f"hardware profile {where}: tensor.{key} must be at least 1")
    sources = data.get("sources", {})
    if "hbm_gib_per_core" not in data:
        raise HardwareProfileError(f"hardware profile {where}: hbm_gib_per_core is missing "
                                   "(GiB of HBM per core, with its source in [sources])")
    hbm_gib = _number(data, "hbm_gib_per_core", where)
    if hbm_gib <= 0:
        raise HardwareProfileError(f"hardware profile {where}: hbm_gib_per_core must be "
                                   f"positive (GiB of HBM per core), got {hbm_gib!r}")
    return HardwareProfile(
        name=str(data.get("name", "")),
        description=str(data.get("description", "")),
        cores_per_chip=int(_number(data, "cores_per_chip", where)),
        launch_us=_number(data, "launch_us", where),
        dma_fixed_us=_number(data, "dma_fixed_us", where),
        hbm_gbps=_number(data, "hbm_gbps", where),
        sbuf_mib=_number(data, "sbuf_mib", where),
        tensor=TensorEngine(
            model=model,
            tflops=tflops,
            efficiency=efficiency,
            partitions=int(_number(tensor, "partitions", where, 128, prefix="tensor.")),
            moving_max=int(_number(tensor, "moving_max", where, 512, prefix="tensor.")),
            min_cycles=int(_number(tensor, "min_cycles", where, 64, prefix="tensor.")),
            arrays=max(1, int(_number(tensor, "arrays", where, 1, prefix="tensor."))),
            fixed_us=_number(tensor, "fixed_us", where, 0.0, prefix="tensor."),
            instruction_cycles=_number(tensor, "instruction_cycles", where, 0.0, prefix="tensor."),
            warmup_us=_number(tensor, "warmup_us", where, 0.0, prefix="tensor."),
        ),
        vector=_lane_engine(data, "vector", where),
        scalar=_lane_engine(data, "scalar", where),
        gpsimd=_lane_engine(data, "gpsimd", where),
        sources=dict(sources) if isinstance(sources, dict) else {},
        hbm_bytes_per_core=round(hbm_gib * 2**30),
        strided_granule_bytes=_number(data, "strided_granule_bytes", where, 0.0),
        graph_execution_us=_number(data, "graph_execution_us", where, 0.0),
        graph_floor_us=_number(data, "graph_floor_us", where, 0.0),
        host_h2d_gbps=_number(data, "host_h2d_gbps", where, 0.0),
        host_d2h_gbps=_number(data, "host_d2h_gbps", where, 0.0),
        host_transfer_us=_number(data, "host_transfer_us", where, 0.0),
        host_mmap_bytes=_number(data, "host_mmap_bytes", where, 0.0),
        host_fresh_page_gbps=_number(data, "host_fresh_page_gbps", where, 0.0),
        dma_efficiency=_number(data, "dma_efficiency", where, 1.0),
        dma_half_bytes=_number(data, "dma_half_bytes", where, 0.0),
        dma_chunk_bytes=_number(data, "dma_chunk_bytes", where, 8192.0),
        collectives=_collectives(data, where),
        gpu=_gpu(data, where),
    )
