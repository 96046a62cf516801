"""What every family of workloads shares: a row's config, the phases to profile, the tensors the
published harness moves between host and device, and the errors a row that cannot be built
raises (each names what is missing and what is known)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "uint8": torch.uint8}


class UnbuildableRow(ValueError):
    """A row whose workload the harness cannot build: an unknown architecture, workload or
    configuration. ``published.py`` reports it as a named failure with the row's label."""


def parse_config(text: str) -> dict[str, Any]:
    """``"arch=bert-base-uncased;batch=1;seq=128"`` -> {"arch": "bert-base-uncased", "batch": 1, ...}."""
    out: dict[str, Any] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"config item {part!r} is not key=value")
        value = value.strip()
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value
    return out


def dtype_of(cfg: dict[str, Any], default: str = "bf16") -> torch.dtype:
    name = cfg.get("dtype", default)
    if name not in DTYPES:
        raise UnbuildableRow(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return DTYPES[name]


def known(name: str, table: Iterable[str], what: str) -> UnbuildableRow:
    """The error for a name the harness has no configuration for."""
    return UnbuildableRow(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}")


# --- what moves between host and device ---------------------------------------------------------

_SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int32: "int32",
          torch.int64: "int64"}


@dataclass(frozen=True)
class HostTensor:
    """A tensor the published harness copies between host and device on every call, with the
    dtype it has on the host (the compiler keeps the framework's I/O dtypes: an FP32 model's
    outputs stay FP32 whatever ``--auto-cast`` does inside the graph)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()

    def describe(self) -> str:
        return f"{self.name}[{'x'.join(map(str, self.shape))}] {_SHORT.get(self.dtype, str(self.dtype))}"


def host_tensors(result: Any, names: Sequence[str] | None = None, dtype: torch.dtype | None = None,
                 ) -> list[HostTensor]:
    """The tensors of a model's output (a tensor, tuple, list or transformers ModelOutput), those
    named in ``names`` if given, as host tensors of ``dtype`` (default: their own)."""
    if isinstance(result, torch.Tensor):
        items: list[tuple[str, Any]] = [("output", result)]
    elif isinstance(result, dict):  # ModelOutput is an OrderedDict of its non-None fields
        items = list(result.items())
    elif isinstance(result, (tuple, list)):
        items = [(f"output{i}", v) for i, v in enumerate(result)]
    else:
        items = []
    return [HostTensor(name, tuple(v.shape), dtype or v.dtype) for name, v in items
            if isinstance(v, torch.Tensor) and (names is None or name in names)]


# --- the workload object ------------------------------------------------------------------------

@dataclass
class Phase:
    """One region to profile: ``fn()`` runs it once (and returns the model's output); its device
    time counts ``weight`` times in the published figure."""

    name: str
    fn: Callable[[], Any]
    weight: float = 1.0


@dataclass
class Workload:
    """A row's workload: the phases to run under whatever profiler is active, and what the
    published figure counts beside their device time.

    unit: ``ms``, ``us`` or ``per_s``; items: what one weighted run produces for a ``per_s``
    figure (``cores / tp * batch`` sequences or images, or a decode step's ``batch`` tokens);
    host_inputs: the tensors the harness copies to the device per call; host_outputs: those it
    copies back, from the output of the last phase (``outputs(result)``, filled in by
    ``compare.capture_row`` after the warm-up run); inflight_per_core: requests the published
    run keeps in flight per NeuronCore (Little's law; 0: the figure's kind decides);
    tp_divide: the whole model ran on one core, its time divided by ``tp``."""

    kind: str
    phases: list[Phase]
    unit: str
    items: float = 1.0
    notes: list[str] = field(default_factory=list)
    tp: int = 1
    host_inputs: list[HostTensor] = field(default_factory=list)
    outputs: Callable[[Any], list[HostTensor]] | None = None
    host_outputs: list[HostTensor] = field(default_factory=list)
    inflight_per_core: int = 0
    tp_divide: bool = False

    def __post_init__(self) -> None:
        if self.unit not in ("ms", "us", "per_s"):
            raise UnbuildableRow(f"unknown unit {self.unit!r}: expected ms, us or per_s")

    def run(self) -> None:
        """Run every phase once (weights ignored), under whatever profiler is active."""
        for phase in self.phases:
            phase.fn()

    def weighted(self, times_us: dict[str, float]) -> float:
        return sum(p.weight * times_us[p.name] for p in self.phases)

    def to_metric(self, us: float) -> float:
        """A weighted time (us) in the row's unit (``tp_divide``: divided by tp first)."""
        if self.tp_divide:
            us = us / self.tp
        if self.unit == "ms":
            return us / 1e3
        if self.unit == "us":
            return us
        return self.items * 1e6 / us


def inference(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` under ``torch.inference_mode`` with warnings silenced; returns its result."""
    def run() -> Any:
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()

    return run


def hf_config(model_type: str, values: dict[str, Any]) -> Any:
    """A transformers configuration of ``model_type`` with the published ``config.json`` values."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **values)


def bare_name(arch: str) -> str:
    """An architecture as the tables name it, without the hub organisation and in lower case:
    ``google/electra-base-discriminator`` -> ``electra-base-discriminator``."""
    return str(arch).strip().split("/")[-1].lower()
