"""A full-size Llama-2-7B decoder layer (d=4096, seq 2048), simulated on meta tensors: the
shapes are real, no memory is allocated and nothing is computed."""

import pytest
import torch

from models import LlamaLayer


@pytest.mark.neuron_profile(hardware="trn2")
def test_llama7b_layer_prefill_on_meta(neuron_profile):
    if neuron_profile.backend != "simulated":
        pytest.skip("meta tensors are never computed, so a measured backend has nothing to time: "
                    "this example runs on the simulated backend only")
    with torch.device("meta"):
        layer = LlamaLayer(4096, 32, 11008).to(torch.bfloat16)
        x = torch.randn(1, 2048, 4096, dtype=torch.bfloat16)
    with torch.inference_mode(), neuron_profile:
        y = layer(x)
    assert y.device.type == "meta"
    result = neuron_profile.result
    matmul_flops = sum(r.flops for r in result.records if r.name == "aten::mm")
    # 7 projections of 2 * seq * d * d' FLOPs each: q, k, v, o (4096x4096), gate, up, down (x11008).
    assert matmul_flops == 2 * 2048 * 4096 * (3 * 4096 + 4096 + 3 * 11008)
