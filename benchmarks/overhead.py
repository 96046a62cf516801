"""Overhead of the simulated backend's capture, against a bare run of the same step.

Run by hand::

    python benchmarks/overhead.py [--reps N] [--threads T]

Each case runs its step bare and profiled, alternating in one process after a warm-up, many
times; the table gives the medians of both and the median of the per-pair ratios
profiled/bare. "Profiled" is everything a user waits for:
``with NeuronProfiler(NeuronConfig()) as prof: step()``, i.e. construction, the region,
stop() and the costing of every op (but no key_averages() table). The per-op overhead is
(profiled - bare) / ops, with ops the number of records in the result.

The encoder case is also run under ``torch.profiler.profile(activities=[CPU])`` as a
reference. The three variants are interleaved in a rotating order so that a slow patch of a
noisy machine hits them all alike.
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402


# -- the models ---------------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention (SDPA) and a GELU MLP."""

    def __init__(self, d_model: int = 256, heads: int = 4, hidden: int = 1024) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, hidden)
        self.down = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def block_case() -> Callable[[], object]:
    torch.manual_seed(0)
    model = Block().to(torch.bfloat16).eval()
    x = torch.randn(8, 256, 256, dtype=torch.bfloat16)

    def step() -> object:
        with torch.no_grad():
            return model(x)

    return step


def encoder_case() -> Callable[[], object]:
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    x = torch.randn(2, 16, 64)

    def step() -> object:
        model.zero_grad(set_to_none=True)
        loss = model(x).sum()
        loss.backward()
        return loss

    return step


# -- timing -------------------------------------------------------------------------------------

def neuron(step: Callable[[], object]) -> Callable[[], int]:
    def run() -> int:
        with NeuronProfiler(NeuronConfig()) as prof:
            step()
        return len(prof.result.records)

    return run


def torch_cpu(step: Callable[[], object]) -> Callable[[], int]:
    def run() -> int:
        with profile(activities=[ProfilerActivity.CPU]):
            step()
        return 0

    return run


def bare(step: Callable[[], object]) -> Callable[[], int]:
    def run() -> int:
        step()
        return 0

    return run


def measure(variants: dict[str, Callable[[], int]], reps: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per run of each variant; runs interleaved, order rotated each repetition."""
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    clock = time.perf_counter
    for i in range(warmup + reps):
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            fn = variants[name]
            start = clock()
            fn()
            elapsed = clock() - start
            if i >= warmup:
                times[name].append(elapsed)
    return times


def median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(num, den))


# -- main ---------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=0, help="repetitions per case (default: per case)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    torch.set_num_interop_threads(1)
    gc.collect()
    gc.freeze()  # keep the collector's work on long-lived objects out of the timings

    cases = [
        # name, step factory, repetitions, target, with the torch.profiler reference
        ("block fwd bf16 (no_grad)", block_case, 60, 1.15, False),
        ("encoder fwd+bwd fp32", encoder_case, 400, 2.5, True),
    ]
    print(f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"torch.set_num_threads({opts.threads}), interop threads 1")
    rows = []
    for name, factory, reps, target, with_torch in cases:
        reps = opts.reps or reps
        step = factory()
        ops = neuron(step)()
        variants = {"bare": bare(step), "neuron": neuron(step)}
        if with_torch:
            variants["torch.profiler"] = torch_cpu(step)
        times = measure(variants, reps=reps, warmup=max(5, reps // 10))
        base = statistics.median(times["bare"])
        for variant in list(variants)[1:]:
            med = statistics.median(times[variant])
            ratio = median_ratio(times[variant], times["bare"])
            per_op = (med - base) / ops * 1e6
            rows.append((name, variant, reps, base * 1e3, med * 1e3, ratio,
                         f"<= {target:.2f}x" if variant == "neuron" else "-", ops, per_op))

    header = ("case", "profiler", "reps", "bare ms", "profiled ms", "ratio", "target", "ops", "µs/op")
    table = [header] + [
        (c, v, str(r), f"{b:.3f}", f"{p:.3f}", f"{x:.2f}x", t, str(o), f"{u:.1f}")
        for c, v, r, b, p, x, t, o, u in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for j, row in enumerate(table):
        print("  ".join(cell.ljust(w) if i < 2 or i == 6 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))
    print("ratio: median of per-pair profiled/bare; µs/op: (median profiled - median bare) / ops")
    failed = [r for r in rows if r[1] == "neuron" and not r[5] <= float(r[6].split()[1][:-1])]
    if failed:
        print("over target: " + ", ".join(r[0] for r in failed))
    assert not any(math.isnan(r[5]) for r in rows)


if __name__ == "__main__":
    main()
