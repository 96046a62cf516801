"""A Hugging Face RMS norm feeding a matrix product, in graph execution: what the norm adds to
the product (docs/cost-model.md, "Casts"; docs/accuracy.md, round 3).

Run by hand (a few seconds)::

    python benchmarks/norm_product.py [--hardware trn2-lnc1] [--execution graph|eager]

For each size N, on meta tensors: ``rms_norm(x) @ w`` with x [N, N] and w [N, N] in bfloat16, the
norm written as Hugging Face's Llama writes it (float32 inside: ``x.to(float32)``, ``pow``,
``mean``, ``rsqrt``, then ``weight * h.to(bfloat16)``), profiled as one region; and the product
alone on a ready operand. Printed: both device times (µs), their ratio, and the bytes the norm's
ops write to HBM. A fused NKI kernel (the product with the norm hidden behind it) would give a
ratio of about 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402

BF16 = torch.bfloat16


def profiled(step, hardware: str, execution: str):
    with NeuronProfiler(NeuronConfig(hardware=hardware, execution=execution,
                                     modes=("device",))) as prof:
        step()
    return prof.result.records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hardware", default="trn2-lnc1")
    parser.add_argument("--execution", choices=("graph", "eager"), default="graph")
    args = parser.parse_args(argv)
    print(f"{'N':>6} {'norm + product us':>18} {'product alone us':>17} {'ratio':>6} "
          f"{'norm writes to HBM':>19}")
    for n in (512, 1024, 2048, 4096):
        x = torch.empty(n, n, device="meta", dtype=BF16)
        gamma = torch.empty(n, device="meta", dtype=BF16)
        w = torch.empty(n, n, device="meta", dtype=BF16)

        def both():
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (gamma * h.to(BF16)) @ w

        records = profiled(both, args.hardware, args.execution)
        alone = profiled(lambda: x @ w, args.hardware, args.execution)
        total = sum(r.device_time_us for r in records)
        product = sum(r.device_time_us for r in alone)
        written = sum(r.bytes_written for r in records if r.name != "aten::mm")
        print(f"{n:>6} {total:>18.1f} {product:>17.1f} {total / product:>6.2f} "
              f"{written / 2**20:>15.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
