import pytest
import torch

from models import ConvNet


@pytest.fixture
def convnet():
    torch.manual_seed(0)
    return ConvNet().eval()  # built (and its weights initialized) before profiling starts


@pytest.mark.neuron_profile
def test_convnet_inference(convnet):
    x = torch.randn(8, 3, 32, 32)
    with torch.inference_mode():
        logits = convnet(x)
    assert logits.shape == (8, 10)
