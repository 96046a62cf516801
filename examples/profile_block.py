"""The README's Python API example, runnable: profile a transformer block forward on a
simulated trn2 NeuronCore and print torch's table, the per-op frame and the total.

    python examples/profile_block.py
"""

import torch

from models import TransformerBlock
from pytest_neuronprof import NeuronConfig, NeuronProfiler, ProfileMode


def main() -> None:
    torch.manual_seed(0)
    block = TransformerBlock(256, 4).to(torch.bfloat16)
    x = torch.randn(8, 256, 256, dtype=torch.bfloat16)
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], hardware="trn2")
    with torch.no_grad(), NeuronProfiler(cfg) as prof:
        block(x)
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8))
    columns = ["name", "count", "engine", "flops", "bytes", "device_time_us", "share"]
    print(prof.to_dataframe()[columns].head(5).to_string())
    print(f"total device time: {prof.total_device_time_us:.3f} us")


if __name__ == "__main__":
    main()
