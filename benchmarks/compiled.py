"""The same blocks eager, under execution="graph" and compiled with torch.compile(backend="neuron")
on the simulated trn2 (docs/guide/hardware-and-devices.md#torchcompile prints its output):
device time, the fixed costs beside it, and the graphs that ran. First an MLP block's training
step (on cpu), then a causal self-attention block's forward (on meta: no values), where a
compiled graph's attention is the fused kernel eager and execution="graph" cost."""

from __future__ import annotations

from typing import Callable

import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler


class Attention(nn.Module):
    """Causal self-attention: one qkv projection, scaled_dot_product_attention, the output's."""

    def __init__(self, width: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, w))


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

    attention, tokens = Attention().to("meta"), torch.randn(4, 128, 256, device="meta")

    def forward(model: nn.Module) -> None:
        with torch.no_grad():
            model(tokens)

    print("\nAttention block, forward (batch 4, seq 128, width 256, 4 heads, fp32, meta):\n")
    table(forward, attention)


if __name__ == "__main__":
    main()
