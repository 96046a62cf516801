"""The simplest use: mark a test, and its body is profiled and gated (fixtures such as the
model below are built before profiling starts)."""

import pytest
import torch

from models import MLP


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLP(256, 1024).to(torch.bfloat16)


@pytest.mark.neuron_profile
def test_mlp_forward(mlp):
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        y = mlp(x)
    assert y.shape == (64, 256)
