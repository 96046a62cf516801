import pytest
import torch

from models import ConvNet


@pytest.mark.neuron_profile
def test_convnet_inference():
    torch.manual_seed(0)
    model = ConvNet().eval()
    x = torch.randn(8, 3, 32, 32)
    with torch.inference_mode():
        logits = model(x)
    assert logits.shape == (8, 10)
