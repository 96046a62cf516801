"""Why a region is slow, in Neuron Explorer's words: the metrics of its Summary page per profiled
region (model and hardware FLOPs utilisation, HBM bandwidth utilisation, each engine's active
time, DMA activity and transfer sizes), from what the cost model knows of each op (flops, bytes,
engine busy time) and where its execution mode placed it. Pure: numbers in, numbers out; no
torch (``activity.py`` turns a region's OpCosts and schedule into the per-op numbers fed here).

Names and formulas are Explorer's (aws-neuron/aws-neuron-sdk@81ce03ae:
tools/neuron-explorer/profile-schema-reference.rst, the ``Summary`` table, schema 7.4.0;
overview-summary-page.rst). Where the simulator's quantity differs from the hardware counter's,
``docs/cost-model.md`` ("Why it is slow") says how; in short:

- ``total_time``: the region's device time as the gate keeps it (eager: every kernel with its
  launch, one after the other; graph: the schedule's makespan, without the fixed cost of one
  graph execution reported beside it). Explorer's is the NTFF's start-to-stop time.
- ``mfu_estimated_percent``: model FLOPs (the products' 2 x MAC, on TensorE) over ``total_time``
  x TensorE's peak for each op's dtype (the logical core's arrays together). Explorer divides
  raw FLOPs by the BF16 peak (``tensor_engine_max_ops_per_sec``); weighting each op by its own
  dtype's peak is Explorer's ``adjusted_*_flops`` (FP32 4x) applied to MFU too, so a float32
  product at its peak reads 100 %, not about 25 %.
- ``hfu_estimated_percent``: the FLOPs the array's instructions occupy: contraction and
  stationary dims padded to the 128 partitions, a kernel's own products (flash attention's
  blocks and P transposes, a convolution's taps) and the layout transposes graph execution adds.
  Explorer's counter counts active rows x columns (no padding); its glossary puts padding in
  HFU's gap to MFU (glossary.rst, "HFU").
- ``mbu_estimated_percent``: HBM bytes read and written over ``total_time`` x the profile's HBM
  bandwidth per logical core (``hbm_gbps``), the bytes as the gate keeps them (graph: what
  fusion and SBUF residency leave). Explorer divides by one HBM stack's bandwidth.
- ``<engine>_engine_active_time_percent``: the time the engine has an instruction, over
  ``total_time``; the simulator's engine time of each op (TensorE's with its throttling ramp,
  PSUM evacuation on VectorE), merged per engine.
- ``dma_active_time_percent``: the time a transfer is on the DMA queue (not its ~1.3 us start).
- ``dma_transfer_average_bytes``: bytes per DMA descriptor, one per tensor per partition (at most
  the profile's ``dma_chunk_bytes``; a strided read one per contiguous run): the size the NKI DMA
  guide's thresholds are stated in. Explorer divides by DMA transfers (one per tensor moved).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

# Engines whose active time Explorer's Summary reports, by the prefix of its field names.
ENGINE_FIELDS = (("Tensor", "tensor_engine"), ("Vector", "vector_engine"),
                 ("Scalar", "scalar_engine"), ("GpSimd", "gpsimd_engine"))
DMA, COLLECTIVE = "DMA", "Collective"

# Evidence kept per op for the rules (recommendations.py): what each op adds to the quantity a
# rule is about, in microseconds (bytes for the spill, converted by the rule).
WASTED = "tensor_not_model"  # TensorE active time not spent on model FLOPs at peak
TRANSPOSE = "transpose"  # TensorE time of transposes, at peak
SPILL = "spill"  # bytes spilled and reloaded
SMALL_DMA = "small_dma"  # transfer time lost to descriptors under the DMA guide's 2 KiB
THROTTLE = "throttle"  # TensorE time lost to the throttling ramp
FIXED = "fixed"  # time of an eager kernel not spent on its work: launch, the DMA's start
STATE = "state_creation"  # an optimizer's first step creating its state
EVIDENCE = (WASTED, TRANSPOSE, SPILL, SMALL_DMA, THROTTLE, FIXED, STATE)

# (op name, message bytes) -> [(duration us, module)]: each collective call, for the outlier rule
CollectiveCalls = Mapping[tuple[str, int], list[tuple[float, str]]]


@dataclass
class Utilisation:
    """A region's Summary, as sums that add up over regions (``combine``); the percentages
    are properties. ``evidence`` (rule -> op -> [amount, {module: amount}]), ``collectives``
    and ``transfers`` (graph execution's DMA queue: (start, end, op index), for the trace) are
    what the rules and the trace need: not written to the report."""

    execution: str
    total_time_us: float = 0.0
    hbm_bytes_per_us: float = 0.0  # the HBM bandwidth MBU is taken against
    model_flops: float = 0.0
    hardware_flops: float = 0.0
    transpose_flops: float = 0.0
    model_peak_us: float = 0.0  # the model FLOPs at their dtype's peak: MFU's numerator in time
    hardware_peak_us: float = 0.0
    transpose_peak_us: float = 0.0
    active_us: dict[str, float] = field(default_factory=dict)  # engine (and DMA, Collective)
    throttled_us: float = 0.0
    hbm_read_bytes: float = 0.0
    hbm_write_bytes: float = 0.0
    spill_save_bytes: float = 0.0
    spill_reload_bytes: float = 0.0
    dma_transfer_count: float = 0.0
    dma_transfer_bytes: float = 0.0
    fixed_us: float = 0.0
    # Device time of the ops whose bound is a fixed cost (more than half of their time is not
    # their work at its peak: roofline.bound_of), what the fixed-cost rule weighs
    fixed_bound_us: float = 0.0
    kernels: int = 0  # ops that ran on the device (eager: kernels, each with its launch)
    # Element operations of each lane-engine op (VectorE, ScalarE, GpSimd) on its own engine:
    # the work that places it under its engine's roof (outputs/roofline_chart.py), which entries
    # do not keep
    elements: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, dict[str, list[Any]]] = field(default_factory=dict, compare=False)
    collectives: dict[tuple[str, int], list[tuple[float, str]]] = field(default_factory=dict,
                                                                        compare=False)
    transfers: list[tuple[float, float, int]] = field(default_factory=list, compare=False)

    # -- Explorer's metrics ---------------------------------------------------------------------

    def _percent(self, us: float) -> float:
        return 100.0 * us / self.total_time_us if self.total_time_us > 0 else 0.0

    @property
    def mfu_estimated_percent(self) -> float:
        return self._percent(self.model_peak_us)

    @property
    def hfu_estimated_percent(self) -> float:
        return self._percent(self.hardware_peak_us)

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def mbu_estimated_percent(self) -> float:
        if self.hbm_bytes_per_us <= 0:
            return 0.0
        return self._percent(self.hbm_bytes / self.hbm_bytes_per_us)

    def active_percent(self, engine: str) -> float:
        return self._percent(self.active_us.get(engine, 0.0))

    @property
    def dma_transfer_average_bytes(self) -> float:
        return self.dma_transfer_bytes / self.dma_transfer_count if self.dma_transfer_count else 0.0

    @property
    def useful_read_percent(self) -> float:
        """(hbm_read_bytes - spill_reload_bytes) / hbm_read_bytes (the Summary page)."""
        if self.hbm_read_bytes <= 0:
            return 100.0
        return 100.0 * (self.hbm_read_bytes - self.spill_reload_bytes) / self.hbm_read_bytes

    @property
    def mm_arithmetic_intensity(self) -> float:
        """(hardware_flops - transpose_flops) / (hbm_write_bytes + hbm_read_bytes)."""
        return (self.hardware_flops - self.transpose_flops) / self.hbm_bytes if self.hbm_bytes else 0.0

    @property
    def active_throttled_percent(self) -> float:
        """TensorE time lost to the throttling ramp over TensorE's active time (Explorer's
        "Active Throttled %", in time rather than the hardware's utilisation limit)."""
        active = self.active_us.get("Tensor", 0.0)
        return 100.0 * self.throttled_us / active if active > 0 else 0.0

    def metrics(self) -> dict[str, float]:
        """Explorer's names -> values, rounded as the report writes them."""
        found = {
            "mfu_estimated_percent": self.mfu_estimated_percent,
            "hfu_estimated_percent": self.hfu_estimated_percent,
            "mbu_estimated_percent": self.mbu_estimated_percent,
            **{f"{name}_active_time_percent": self.active_percent(engine)
               for engine, name in ENGINE_FIELDS},
            "dma_active_time_percent": self.active_percent(DMA),
            "cc_op_active_time_percent": self.active_percent(COLLECTIVE),
            "dma_transfer_average_bytes": self.dma_transfer_average_bytes,
            "useful_read_percent": self.useful_read_percent,
            "mm_arithmetic_intensity": self.mm_arithmetic_intensity,
            "active_throttled_percent": self.active_throttled_percent,
        }
        return {key: round(value, 2) for key, value in found.items()}

    # -- building and joining -------------------------------------------------------------------

    def note(self, rule: str, op: str, module: str, amount: float) -> None:
        """Add ``amount`` of what ``rule`` is about to ``op`` in ``module``."""
        if amount <= 0:
            return
        ops = self.evidence.setdefault(rule, {})
        entry = ops.get(op)
        if entry is None:
            entry = ops[op] = [0.0, {}]
        entry[0] += amount
        entry[1][module] = entry[1].get(module, 0.0) + amount

    def combine(self, other: "Utilisation", offset_us: float = 0.0, first_op: int = 0) -> "Utilisation":
        """This region followed by ``other``, which starts ``offset_us`` later on the device and
        whose ops' indexes start at ``first_op`` in the joined records."""
        joined = replace(self, active_us=dict(self.active_us), evidence={}, collectives={},
                         transfers=list(self.transfers))
        if joined.execution != other.execution:
            joined.execution = "mixed"
        for name in _SUMS:
            setattr(joined, name, getattr(self, name) + getattr(other, name))
        joined.hbm_bytes_per_us = self.hbm_bytes_per_us or other.hbm_bytes_per_us
        for engine, us in other.active_us.items():
            joined.active_us[engine] = joined.active_us.get(engine, 0.0) + us
        joined.elements = dict(self.elements)
        for op, count in other.elements.items():
            joined.elements[op] = joined.elements.get(op, 0.0) + count
        for source in (self, other):
            for rule, ops in source.evidence.items():
                for op, (amount, modules) in ops.items():
                    for module, part in modules.items():
                        joined.note(rule, op, module, part)
            for key, calls in source.collectives.items():
                joined.collectives.setdefault(key, []).extend(calls)
        joined.transfers += [(start + offset_us, end + offset_us, index + first_op)
                             for start, end, index in other.transfers]
        return joined

    # -- the report -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"execution": self.execution, "total_time_us": round(self.total_time_us, 4),
                                "hbm_bytes_per_us": round(self.hbm_bytes_per_us, 4)}
        for name in _SUMS:
            if name == "total_time_us":
                continue
            value = getattr(self, name)
            data[name] = int(value) if name == "kernels" else round(value, 4)
        data["active_time_us"] = {engine: round(us, 4) for engine, us in sorted(self.active_us.items())}
        data["elements"] = {op: count for op, count in sorted(self.elements.items())}
        data.update(self.metrics())
        return data

    @classmethod
    def from_json(cls, data: Any, check: Any, where: str) -> "Utilisation":
        """What ``to_json`` wrote; the metrics are computed again from the sums (a hand-edited
        value of a metric is not read). ``check``: the reader's checks (gate/decode.py's
        Decoder: ``mapping``, ``string``, ``number``, ``known_keys``), each raising on a bad value."""
        check.mapping(where, data)
        check.known_keys(where, data, JSON_KEYS)
        # every sum a metric is computed from: one left out would read as a 0 % metric
        missing = [name for name in ("execution", "hbm_bytes_per_us", "active_time_us", *_SUMS) if name not in data]
        if missing:
            raise check.fail(f"{where} has no {', '.join(missing)} (the sums its metrics are computed "
                             "from): write the report again with pytest --neuron-report")
        found = cls(execution=check.string(f"{where}.execution", data.get("execution")),
                    hbm_bytes_per_us=check.number(f"{where}.hbm_bytes_per_us", data.get("hbm_bytes_per_us")))
        for name in _SUMS:
            value = check.number(f"{where}.{name}", data.get(name))
            setattr(found, name, int(value) if name == "kernels" else float(value))
        found.active_us = {check.string(f"{where}.active_time_us key", engine):
                           check.number(f"{where}.active_time_us[{engine!r}]", us)
                           for engine, us in check.mapping(f"{where}.active_time_us",
                                                           data.get("active_time_us", {})).items()}
        found.elements = {check.string(f"{where}.elements key", op): check.number(f"{where}.elements[{op!r}]", n)
                          for op, n in check.mapping(f"{where}.elements", data.get("elements", {})).items()}
        return found


_SUMS = ("total_time_us", "model_flops", "hardware_flops", "transpose_flops", "model_peak_us",
         "hardware_peak_us", "transpose_peak_us", "throttled_us", "hbm_read_bytes", "hbm_write_bytes",
         "spill_save_bytes", "spill_reload_bytes", "dma_transfer_count", "dma_transfer_bytes",
         "fixed_us", "fixed_bound_us", "kernels")
# What a report's utilisation may hold: the sums, the metrics (recomputed when read) and these.
JSON_KEYS = frozenset({*_SUMS, "execution", "hbm_bytes_per_us", "active_time_us", "elements",
                       *Utilisation(execution="").metrics()})


def combined(parts: Iterable[tuple[Utilisation | None, float, int]]) -> Utilisation | None:
    """Regions one after another ((utilisation, its start on the device, the index of its first
    op) each; the first at 0) as one; None when one of them has none."""
    joined: Utilisation | None = None
    for part, start, first_op in parts:
        if part is None:
            return None
        joined = part if joined is None else joined.combine(part, start, first_op)
    return joined


# --- the same three numbers from what the gate keeps --------------------------------------------

@dataclass(frozen=True)
class Sketch:
    """What a baseline entry's numbers say of its utilisation (each op's engine, flops, bytes,
    dtype, bound and device time): MFU, MBU and the share of the device time each bound
    holds. Both sides of a failure are sketched alike, so the line that compares them is exact
    to the entries; the report's full metrics need the schedule, which entries do not keep."""

    mfu_percent: float
    mbu_percent: float
    bound_percent: Mapping[str, float]  # bound -> share of the device time, in %


def sketch(ops: Iterable[tuple[str, float, float, str, str, float]], total_us: float,
           tensor_peak_per_us: Callable[[str], float], hbm_bytes_per_us: float) -> Sketch:
    """``ops``: (engine, flops, bytes, dtype, bound, device time us) of each op of an entry;
    ``tensor_peak_per_us``: TensorE's peak FLOP/us for a dtype (the logical core's arrays)."""
    model_us = nbytes = 0.0
    bounds: dict[str, float] = {}
    for engine, flops, moved, dtype, bound, us in ops:
        if engine == "Tensor" and flops:
            rate = tensor_peak_per_us(dtype)
            model_us += flops / rate if rate > 0 else 0.0
        nbytes += moved
        if us > 0:
            bounds[bound or "none"] = bounds.get(bound or "none", 0.0) + us
    if total_us <= 0:
        return Sketch(0.0, 0.0, {})
    mbu = 100.0 * nbytes / (total_us * hbm_bytes_per_us) if hbm_bytes_per_us > 0 else 0.0
    return Sketch(100.0 * model_us / total_us, mbu,
                  {bound: 100.0 * us / total_us for bound, us in bounds.items()})


def percent_text(value: float) -> str:
    """A utilisation in a sentence: whole percent, a decimal under 10 % ("0.4%", "38%"). From
    the value rounded as the report writes it (``metrics``), so a line and a table agree."""
    value = round(value, 2)
    if value <= 0:
        return "0%"
    if value < 0.05:
        return "<0.1%"
    if round(value, 1) < 10:  # 9.96 reads "10%", not "10.0%"
        return f"{value:.1f}%"
    return f"{value:.0f}%"


def rate_key(dtype: str, execution: str = "eager", auto_cast: str = "none") -> str:
    """The TensorE rate-table key of a dtype as an entry names it ("bfloat16", "float8_e4m3fn"),
    as ``opcost.dtype_key`` keys a tensor's: one-byte floats at float8's rate, one-byte integers
    at int8's, complex at its real parts', anything else at float32's; in graph execution
    neuronx-cc's --auto-cast "matmult" or "all" runs a float32 product at bfloat16's
    (``execution.compiled``)."""
    if dtype in ("bfloat16", "float16"):
        return dtype
    if dtype.startswith("float8"):
        return "float8"
    if dtype in ("int8", "uint8"):
        return "int8"
    if execution == "graph" and auto_cast in ("matmult", "all"):
        return "bfloat16"
    return "float32"


def achieved(bound: str, flops: float, nbytes: float, link_bytes: float, time_us: float,
             tensor_peak_per_us: float, hbm_bytes_per_us: float, bus_bytes_per_us: float) -> float | None:
    """The share of its bound's peak an op reaches, from what an entry keeps of it: TensorE its
    FLOPs at ``tensor_peak_per_us``, HBM its bytes at the bandwidth, a collective its bytes over
    the links at their bus bandwidth; None for the lane engines (an entry keeps no element
    counts), a fixed cost (no peak) and an op with no time."""
    if time_us <= 0:
        return None
    if bound == "TensorE" and flops and tensor_peak_per_us > 0:
        return min(1.0, flops / tensor_peak_per_us / time_us)
    if bound == "HBM" and nbytes and hbm_bytes_per_us > 0:
        return min(1.0, nbytes / hbm_bytes_per_us / time_us)
    if bound == "collective" and link_bytes and bus_bytes_per_us > 0:
        return min(1.0, link_bytes / bus_bytes_per_us / time_us)
    return None
