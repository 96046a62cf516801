"""The same block eager, under execution="graph" and compiled with torch.compile(backend="neuron")
on the simulated trn2 (docs/guide/hardware-and-devices.md#torchcompile prints its output):
device time, the fixed costs beside it, and the graphs that ran."""

from __future__ import annotations

import torch
import torch._dynamo
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler


def main() -> None:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256))
    x, grad = torch.randn(8, 128, 256), torch.randn(8, 128, 256)
    fast = torch.compile(block, backend="neuron")

    def step(model):
        block.zero_grad(set_to_none=True)
        model(x).backward(grad)

    step(fast)  # compiled outside the region
    rows = []
    for label, model, execution in (("eager", block, "eager"), ("execution=\"graph\"", block, "graph"),
                                    ("torch.compile(backend=\"neuron\")", fast, "eager")):
        with NeuronProfiler(NeuronConfig(execution=execution)) as prof:
            step(model)
        result = prof.result
        rows.append((label, f"{result.total_device_time_us:.3f}", f"{result.execution_overhead_us:.1f}",
                     str(len(result.graphs))))
    print("| how | device time (us) | fixed costs (us) | compiled graphs run |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
