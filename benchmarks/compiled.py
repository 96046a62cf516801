"""The same blocks eager, under execution="graph" and compiled with torch.compile(backend="neuron")
on the simulated trn2 (docs/guide/hardware-and-devices.md#torchcompile prints its output):
device time, the fixed costs beside it, and the graphs that ran. First an MLP block's training
step (on cpu), then examples/models.py's causal self-attention block's forward and training step
(on meta: no values), where a compiled graph's attention is the fused kernel eager and
execution="graph" cost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch import nn  # noqa: E402

from models import Attention  # noqa: E402
from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402


def table(step: Callable[[nn.Module], object], block: nn.Module) -> None:
    fast = torch.compile(block, backend="neuron")
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


def main() -> None:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256))
    x, grad = torch.randn(8, 128, 256), torch.randn(8, 128, 256)

    def step(model: nn.Module) -> None:
        block.zero_grad(set_to_none=True)
        model(x).backward(grad)

    print("MLP block, a training step (batch 8, seq 128, fp32, cpu):\n")
    table(step, block)

    attention, tokens = Attention(256, 4).to("meta"), torch.randn(4, 128, 256, device="meta")

    def forward(model: nn.Module) -> None:
        with torch.no_grad():
            model(tokens)

    print("\nAttention block, forward (batch 4, seq 128, width 256, 4 heads, fp32, meta):\n")
    table(forward, attention)
    gradient = torch.randn(4, 128, 256, device="meta")

    def train(model: nn.Module) -> None:
        attention.zero_grad(set_to_none=True)
        model(tokens).backward(gradient)

    print("\nThe same attention block, a training step:\n")
    table(train, attention)


if __name__ == "__main__":
    main()
