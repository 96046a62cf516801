"""Hardware profiles: one TOML data file per chip under ``hardware/``, loaded and validated."""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from ..errors import HardwareProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TENSOR_MODELS = ("systolic", "roofline")
TENSOR_KINDS = ("matmul", "conv", "attention")


@dataclass(frozen=True)
class LaneEngine:
    """A SIMD engine (VectorE, ScalarE, GpSimd): ``lanes`` elements per cycle at ``clock_ghz``."""

    lanes: int
    clock_ghz: float
    efficiency: float = 1.0
    fixed_us: float = 0.0

    @property
    def elements_per_us(self) -> float:
        return self.lanes * self.clock_ghz * 1e3 * self.efficiency


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

    def flops_per_us(self, dtype: str) -> float:
        return self.tflops.get(dtype, self.tflops["float32"]) * 1e6


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
    # A strided read pulls memory in units of this many bytes: a run shorter than that costs
    # the whole unit (0: every byte read is useful)
    strided_granule_bytes: float = 0.0
    # Graph execution: the fixed cost of launching one compiled graph (host and runtime side)
    graph_execution_us: float = 0.0

    @property
    def hbm_bytes_per_us(self) -> float:
        return self.hbm_gbps * 1e3


def available_hardware() -> list[str]:
    """Names of the bundled hardware profiles."""
    folder = resources.files(__package__).joinpath("hardware")
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


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
    )
    if engine.elements_per_us <= 0:
        raise HardwareProfileError(f"hardware profile {where}: [{key}] has zero throughput")
    return engine


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
            fixed_us=_number(tensor, "fixed_us", where, 0.0, prefix="tensor."),
        ),
        vector=_lane_engine(data, "vector", where),
        scalar=_lane_engine(data, "scalar", where),
        gpsimd=_lane_engine(data, "gpsimd", where),
        sources=dict(sources) if isinstance(sources, dict) else {},
        strided_granule_bytes=_number(data, "strided_granule_bytes", where, 0.0),
        graph_execution_us=_number(data, "graph_execution_us", where, 0.0),
    )
