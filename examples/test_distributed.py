"""Distributed code as it runs on Trainium, on one CI runner: each test runs as rank 0 of a
simulated process group of ``world_size`` ranks (the marker makes it before the test and
destroys it after), and every collective is costed for the ranks of its group, over NeuronLink.
The models live on ``meta`` tensors: full-size layers, no memory, no values.

- A Llama-2-7B MLP, tensor parallel over 8 NeuronCores (Megatron-style): the gate and up
  projections split by columns, the down projection by rows, its partial sums all-reduced.
- An FSDP-style step over 32 ranks: each rank keeps 1/32 of every weight and all-gathers a
  layer's weight before using it; the next layer's gather is issued before this layer's
  products (a prefetch), so in a compiled graph it runs on the collective cores while TensorE
  works (``--neuron-execution graph``).
"""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn

HIDDEN, INTERMEDIATE = 4096, 11008  # Llama-2-7B


class TensorParallelMLP(nn.Module):
    """Rank 0's shard of a Llama MLP over ``tp`` ranks: its columns of gate and up, its rows of
    down; the row-parallel output is a partial sum, all-reduced over the group."""

    def __init__(self, hidden: int, intermediate: int, tp: int) -> None:
        super().__init__()
        shard = intermediate // tp
        self.gate = nn.Linear(hidden, shard, bias=False)
        self.up = nn.Linear(hidden, shard, bias=False)
        self.down = nn.Linear(shard, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = self.down(F.silu(self.gate(x)) * self.up(x))
        return funcol.all_reduce(partial, "sum", dist.group.WORLD)


@pytest.fixture
def tp_mlp():
    """Built in the marker's group (made before the fixtures): its shard of the weights."""
    with torch.device("meta"):
        return TensorParallelMLP(HIDDEN, INTERMEDIATE, dist.get_world_size()).to(torch.bfloat16)


@pytest.mark.neuron_profile(world_size=8)
def test_tensor_parallel_mlp(tp_mlp):
    x = torch.randn(1, 128, HIDDEN, dtype=torch.bfloat16, device="meta")
    with torch.inference_mode():
        y = tp_mlp(x)
    assert y.shape == x.shape and dist.get_world_size() == 8


def all_gather(shard: torch.Tensor) -> torch.Tensor:
    """The whole weight from every rank's shard: the functional all-gather, as torch.compile and
    FSDP2 issue it, and its wait."""
    functional = torch.ops._c10d_functional
    gathered = functional.all_gather_into_tensor(shard, dist.get_world_size(), dist.group.WORLD.group_name)
    return functional.wait_tensor(gathered)


@pytest.fixture
def fsdp_shards():
    """This rank's 1/world_size of two layers' weights."""
    ranks = dist.get_world_size()
    return [torch.empty(HIDDEN // ranks, HIDDEN, dtype=torch.bfloat16, device="meta") for _ in range(2)]


@pytest.mark.neuron_profile(world_size=32)
def test_fsdp_step_with_prefetch(fsdp_shards):
    x = torch.empty(2048, HIDDEN, dtype=torch.bfloat16, device="meta")
    weight = all_gather(fsdp_shards[0])
    upcoming = all_gather(fsdp_shards[1])  # prefetched: the first layer runs meanwhile
    h = F.relu(x @ weight.t())
    out = h @ upcoming.t()
    assert out.shape == x.shape

