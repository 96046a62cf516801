"""Names every layer shares: the backends and the NeuronCore's engines, written once.

Plain data, no torch: the plugin, the outputs and the command read them without importing the
cost model.
"""

from __future__ import annotations

import enum

# The backends, by name; what each one is and its defaults: defaults.BACKEND_TABLE.
SIMULATED, CPU, CUDA, NEURON = "simulated", "cpu", "cuda", "neuron"
MEASURED_BACKENDS = (CPU, CUDA, NEURON)  # torch.profiler timings: noisy, gated with statistics
BACKENDS = (SIMULATED, *MEASURED_BACKENDS)

# How the simulated NeuronCore runs a region: TorchNeuron's eager mode (one compiled kernel per
# op, each launched) or one neuronx-cc graph (fused, on-chip intermediates, overlapping engines).
EAGER, GRAPH = "eager", "graph"
EXECUTIONS = (EAGER, GRAPH)

# neuronx-cc's --auto-cast choices: which float32 operations the compiler casts to bfloat16.
# "none" keeps every dtype (the compiler's default since Neuron 2.27), "matmult" casts matrix
# products (the default before), "all" every float32 operation.
AUTO_CAST_NONE, AUTO_CAST_MATMULT, AUTO_CAST_ALL = "none", "matmult", "all"
AUTO_CASTS = (AUTO_CAST_NONE, AUTO_CAST_MATMULT, AUTO_CAST_ALL)

# What bounds an op's device time (its record's ``bound``): the engine whose work takes longest,
# HBM traffic, a fixed cost (launch, instruction overheads, DMA start) that outweighs both, or
# the links of a collective; "none" for free ops. One list: the per-op reasons of a regression
# name the same limits.
BOUND_TENSOR, BOUND_VECTOR, BOUND_SCALAR, BOUND_GPSIMD = "TensorE", "VectorE", "ScalarE", "GpSimd"
BOUND_HBM, BOUND_FIXED, BOUND_COLLECTIVE, BOUND_NONE = "HBM", "fixed cost", "collective", "none"
BOUNDS = (BOUND_TENSOR, BOUND_VECTOR, BOUND_SCALAR, BOUND_GPSIMD, BOUND_HBM, BOUND_FIXED,
          BOUND_COLLECTIVE, BOUND_NONE)

# The phase of an op record: its forward, its backward, or a forward op that activation
# checkpointing runs again during backward (credited to the module it recomputes).
FORWARD, BACKWARD, RECOMPUTE = "forward", "backward", "recompute"


class Engine(str, enum.Enum):
    """The engines of a NeuronCore, as the simulated backend assigns ops to them and traces show
    them (one track each)."""

    TENSOR = "Tensor"
    VECTOR = "Vector"
    SCALAR = "Scalar"
    GPSIMD = "GpSimd"
    DMA = "DMA"
    COLLECTIVE = "Collective"  # communication with other ranks over NeuronLink (CC-cores, DMA)
    NONE = "-"  # ops that move no data and cost nothing

    def __str__(self) -> str:
        return self.value


# A NeuronCore's engines, the device tracks every trace and page shows, in order; collectives
# (other ranks' links) are shown only where a test uses them.
ENGINES = tuple(e.value for e in Engine if e not in (Engine.NONE, Engine.COLLECTIVE))
