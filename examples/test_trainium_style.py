"""Tests written for Trainium, unchanged: the model moves to the device in a fixture, inputs are
made on it, a training step runs an optimizer. Under the simulated backend they need the
simulated neuron device (``pytest --neuron-device-alias``, ini ``neuron_device_alias = true``):
every op runs on shapes only, as on meta tensors, and is costed as on the chip. On a Trainium
instance with TorchNeuron the same file runs on the real device.

Nothing here reads a value: the tests assert shapes, dtypes and devices, which is what a
simulated device has (a value read fails, naming its line)."""

import pytest
import torch
import torch.nn.functional as F

from models import TransformerBlock


def _device_exists(name: str) -> bool:
    try:
        torch.device(name)
    except RuntimeError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _device_exists("neuron"),
    reason="no neuron device: run with --neuron-device-alias (the simulated one), or on a "
           "Trainium instance with TorchNeuron")


@pytest.fixture
def block():
    torch.manual_seed(0)
    return TransformerBlock(256, 4).to("neuron")  # setup: not profiled


@pytest.mark.neuron_profile
def test_training_step(block, neuron_profile):
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-3)
    x = torch.randn(8, 128, 256, device="neuron")
    target = torch.randn(8, 128, 256, device="neuron")
    with neuron_profile:
        loss = F.mse_loss(block(x), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert loss.shape == () and loss.device.type == "neuron"
    assert all(p.grad is None for p in block.parameters())


@pytest.mark.neuron_profile
def test_inference_bf16(block, neuron_profile):
    block = block.to(torch.bfloat16).eval()
    x = torch.randn(4, 512, 256, dtype=torch.bfloat16, device="neuron")
    with torch.inference_mode(), neuron_profile:
        y = block(x)
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    assert y.device.type == "neuron"
