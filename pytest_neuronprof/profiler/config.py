"""NeuronConfig: what a NeuronProfiler captures, modelled on TorchNeuron's profiler config."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Iterable

from ..defaults import DEFAULT_AUTO_CAST, DEFAULT_EXECUTION, DEFAULT_HARDWARE
from ..errors import ConfigError
from ..vocabulary import AUTO_CASTS, EXECUTIONS


class ProfileMode(str, enum.Enum):
    """Data streams a profile captures.

    DEVICE: per-op device time on the NeuronCore engines (the device trace).
    RUNTIME: the framework side, ATen ops on the host with their CPU time (the framework trace).
    """

    DEVICE = "device"
    RUNTIME = "runtime"


def parse_core_list(spec: str) -> tuple[int, ...]:
    """Parse TorchNeuron's core syntax ("0", "0,1", "2-5", "0,2-3") into sorted core ids."""
    cores: set[int] = set()
    text = str(spec).replace(" ", "")
    if not text:
        raise ConfigError("capture_enabled_for_nc is empty: give core ids such as '0' or '0,2-3'")
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ConfigError(
                f"capture_enabled_for_nc={spec!r}: {part!r} is not a core id or a range "
                "like '2-5'"
            ) from None
        if first < 0 or last < first:
            raise ConfigError(
                f"capture_enabled_for_nc={spec!r}: range {part!r} must be non-negative and "
                "ascending, like '2-5'"
            )
        cores.update(range(first, last + 1))
    return tuple(sorted(cores))


@dataclass
class NeuronConfig:
    """Configuration of one NeuronProfiler.

    modes: the data streams to capture (default: device and runtime).
    capture_enabled_for_nc: target NeuronCores in TorchNeuron's syntax ("0,1,2-5"). The simulated
        backend runs the region on the first listed core and checks that every listed core
        exists on the chip.
    profile_output_dir: where ``export()`` writes; None writes nothing.
    correlate_device_time: put device time into ``key_averages()`` tables.
    hardware: the chip profile of the simulated backend (trn2, trn2-lnc1, trn1, inf2, trn3,
        trn3-lnc1, h200; trn2 and trn3 are the SDK's default logical core, LNC=2).
    execution: how the simulated backend runs the region: "eager" (TorchNeuron's eager mode, one
        kernel per op, each launched) or "graph" (as neuronx-cc compiles it: one launch, fused
        epilogues, intermediates kept in SBUF, engines overlapping, float32 work cast as
        ``auto_cast`` says). Measured backends measure whatever runs and ignore it.
    auto_cast: neuronx-cc's ``--auto-cast`` for graph execution: "none" (every op in the model's
        dtypes; the compiler's default since Neuron 2.27, and this one's), "matmult" (float32
        matrix products cast to bfloat16: the compiler's default before 2.27) or "all" (every
        float32 operation cast). Sources, aws-neuron/aws-neuron-sdk@81ce03ae26:
        compiler/neuronx-cc/api-reference-guide/index.rst (the choices, "Default: none") and
        release-notes/prev/2.27.0/compiler.rst ("now defaults to none (previously matmul)").
        Eager execution ignores it, kernels keep the model's dtypes: TorchNeuron compiles each
        eager op itself (ATen op -> StableHLO -> neuronx-cc -> NEFF, the TorchNeuron best
        practices page of Neuron 2.33), promising the same numerical accuracy as unfused eager
        execution and leaving mixed precision to ``torch.autocast(device_type="neuron")``, "with
        automatic datatype conversion following PyTorch CUDA conventions"
        (frameworks/torch/pytorch-native-overview.rst, lines 106 and 222); it documents no way
        to hand compiler flags to eager kernels. So no eager variant names it, and autocast's
        casts show up as ops of their own.
    profile_memory: track device memory (torch.profiler's argument of the same name): the
        simulated backend's result gets ``memory``, the peak of live tensor bytes in the region
        and what makes it up (costmodel/memory.py); False leaves it None. Measured backends
        ignore it.
    """

    modes: Iterable[ProfileMode | str] = (ProfileMode.DEVICE, ProfileMode.RUNTIME)
    capture_enabled_for_nc: str = "0"
    profile_output_dir: str | os.PathLike[str] | None = None
    correlate_device_time: bool = True
    hardware: str = DEFAULT_HARDWARE
    execution: str = DEFAULT_EXECUTION
    auto_cast: str = DEFAULT_AUTO_CAST
    profile_memory: bool = True
    target_cores: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        modes = []
        # A lone mode (ProfileMode is a str too) would otherwise be iterated character by
        # character and fail with "unknown mode 'd'".
        given = (self.modes,) if isinstance(self.modes, str) else self.modes
        for mode in given:
            try:
                modes.append(ProfileMode(mode))
            except ValueError:
                valid = ", ".join(m.value for m in ProfileMode)
                raise ConfigError(f"NeuronConfig modes: unknown mode {mode!r}; valid: {valid}") from None
        if not modes:
            raise ConfigError("NeuronConfig modes is empty: capture at least ProfileMode.DEVICE")
        self.modes = tuple(dict.fromkeys(modes))
        self.target_cores = parse_core_list(self.capture_enabled_for_nc)
        if not isinstance(self.hardware, str) or not self.hardware:
            raise ConfigError(f"NeuronConfig hardware must be a profile name, got {self.hardware!r}")
        if self.execution not in EXECUTIONS:
            raise ConfigError(f"NeuronConfig execution={self.execution!r}: unknown; valid choices: "
                              f"{', '.join(EXECUTIONS)}")
        if not isinstance(self.profile_memory, bool):
            raise ConfigError(f"NeuronConfig profile_memory must be True or False, got "
                              f"{self.profile_memory!r}")
        if self.auto_cast not in AUTO_CASTS:
            raise ConfigError(f"NeuronConfig auto_cast={self.auto_cast!r}: unknown; valid choices "
                              f"(neuronx-cc's --auto-cast): {', '.join(AUTO_CASTS)}")
