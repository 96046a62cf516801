"""Compiled code as TorchNeuron runs it: torch.compile(backend="neuron"). Each graph that runs is
costed as one compiled graph, the ops around it eagerly, and the entry keeps the graphs, so a
change that adds a graph break or compiles the model for another shape fails here
(docs/guide/hardware-and-devices.md#torchcompile)."""

import pytest
import torch

from models import MLP


@pytest.fixture
def compiled_mlp():
    torch.manual_seed(0)
    model = MLP(256, 1024).to("neuron")
    return model, torch.compile(model, backend="neuron", fullgraph=True)


@pytest.mark.neuron_profile
def test_compiled_training_step(compiled_mlp, neuron_profile):
    model, fast = compiled_mlp
    x = torch.randn(8, 128, 256, device="neuron")
    grad = torch.randn(8, 128, 256, device="neuron")
    with neuron_profile:
        fast(x).backward(grad)  # a forward graph, then a backward graph
    assert [g.phase for g in neuron_profile.result.graphs] == ["forward", "backward"]
    assert model.up.weight.grad.shape == (1024, 256)
