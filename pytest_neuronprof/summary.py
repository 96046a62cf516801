"""ProfileSummary: the per-op numbers of one profiled test that baselines store and the gate
compares. Built from a ProfileResult; plain data, no torch, no I/O."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

# Fixed rounding, so re-recording unchanged code gives byte-identical baseline files.
TIME_DECIMALS = 4
SHARE_DECIMALS = 6


@dataclass(frozen=True)
class OpSummary:
    count: int
    device_time_us: float
    engine: str
    flops: int
    bytes: int
    share: float
    module: str  # the module path where this op spent most of its device time

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "device_time_us": round(self.device_time_us, TIME_DECIMALS),
            "engine": self.engine,
            "flops": self.flops,
            "bytes": self.bytes,
            "share": round(self.share, SHARE_DECIMALS),
            "module": self.module,
        }


@dataclass(frozen=True)
class ProfileSummary:
    backend: str
    hardware: str
    cost_model_version: str
    torch_version: str
    total_device_time_us: float
    ops: dict[str, OpSummary] = field(default_factory=dict)

    @property
    def variant(self) -> str:
        """Baselines keep one entry per backend and hardware; never compared across them."""
        return f"{self.backend}:{self.hardware}"

    def ranked(self) -> list[tuple[str, OpSummary]]:
        """Ops by device time, largest first; ties by name so the order is deterministic."""
        return sorted(self.ops.items(), key=lambda item: (-item[1].device_time_us, item[0]))

    def to_json(self) -> dict[str, Any]:
        return self._json

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        # Computed once: a summary is serialized for xdist, the report and the baseline file.
        return {
            "backend": self.backend,
            "hardware": self.hardware,
            "cost_model_version": self.cost_model_version,
            "torch_version": self.torch_version,
            "total_device_time_us": round(self.total_device_time_us, TIME_DECIMALS),
            "ops": {name: op.to_json() for name, op in sorted(self.ops.items())},
        }


def torch_minor_version(version: str) -> str:
    """'2.13.0+cpu' -> '2.13': patch releases and build flavours do not change op sequences."""
    return ".".join(version.split("+")[0].split(".")[:2])


def summarize(result: Any, cost_model_version: str, torch_version: str) -> ProfileSummary:
    """Aggregate a ProfileResult per op name. Ops with no device time (views) are left out."""
    totals: dict[str, dict[str, Any]] = {}
    for r in result.records:
        if r.device_time_us <= 0:
            continue
        entry = totals.setdefault(r.name, {"count": 0, "time": 0.0, "flops": 0, "bytes": 0,
                                           "engine": r.engine, "modules": {}})
        entry["count"] += 1
        entry["time"] += r.device_time_us
        entry["flops"] += r.flops
        entry["bytes"] += r.bytes_read + r.bytes_written
        entry["modules"][r.module_path] = entry["modules"].get(r.module_path, 0.0) + r.device_time_us
    total = sum(e["time"] for e in totals.values())
    ops = {
        name: OpSummary(
            count=e["count"],
            device_time_us=e["time"],
            engine=e["engine"],
            flops=e["flops"],
            bytes=e["bytes"],
            share=e["time"] / total if total else 0.0,
            module=min(e["modules"].items(), key=lambda m: (-m[1], m[0]))[0],
        )
        for name, e in totals.items()
    }
    return ProfileSummary(result.backend, result.hardware, cost_model_version,
                          torch_minor_version(torch_version), total, ops)
