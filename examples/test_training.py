"""A whole training step: forward, backward and the optimizer's update are all device work."""

import pytest
import torch
import torch.nn.functional as F

from models import MLP


@pytest.mark.neuron_profile
def test_training_step(neuron_profile):
    torch.manual_seed(0)
    model = MLP(128, 512)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, target = torch.randn(32, 128), torch.randn(32, 128)
    with neuron_profile:
        loss = F.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    phases = set(neuron_profile.result.to_dataframe(by="phase")["phase"])
    assert phases == {"forward", "backward"}
