"""The fixture limits profiling to a region, and the test can assert on the profile."""

import pytest
import torch

from models import TransformerBlock


@pytest.mark.neuron_profile(threshold=0.05)
def test_transformer_block_forward(neuron_profile):
    torch.manual_seed(0)
    block = TransformerBlock(256, 4).to(torch.bfloat16)  # setup: not profiled
    x = torch.randn(8, 256, 256, dtype=torch.bfloat16)
    with torch.no_grad(), neuron_profile:
        y = block(x)
    assert y.shape == x.shape
    if neuron_profile.backend != "simulated":
        return  # measured backends time the block; engines are the cost model's
    ops = neuron_profile.result.to_dataframe().set_index("name")
    # Matrix products and attention run on TensorE and dominate the block.
    assert ops.loc["aten::addmm", "engine"] == "Tensor"
    assert ops.loc["aten::_scaled_dot_product_flash_attention", "engine"] == "Tensor"
    assert neuron_profile.result.uncosted_ops == []
