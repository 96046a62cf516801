"""What a second chip costs: the examples' workloads profiled as the plugin does it, on one chip
and on four (``--neuron-hardware trn2,trn3,inf2,h200``).

Run by hand (about a minute)::

    python benchmarks/chips.py [--reps N] [--execution eager|graph] [--pytest]

In process (the default): each workload of examples/ (the MLP forward, the transformer block,
the convnet, the training step, a Llama-2-7B layer's prefill on meta tensors) runs under the
plugin's path for one test: a NeuronProfiler around the step, stopped, and each chip's result
summarized as the gate reads it (``gate.summary.summarize``). With four chips the step runs
once; the other three chips are costed from the kept capture (``NeuronProfiler.result_for``).
The table gives the median time of one chip and of four, and their ratio; a second run of the
code for each chip would be 4x.

``--pytest``: the same comparison on the whole examples/ suite, each run a fresh
``python -m pytest examples`` (interpreter and torch start-up included, so the ratio is
smaller than in process).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import MLP, ConvNet, LlamaLayer, TransformerBlock  # noqa: E402
from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402
from pytest_neuronprof.costmodel import COST_MODEL_VERSION  # noqa: E402
from pytest_neuronprof.gate.summary import summarize  # noqa: E402

CHIPS = ("trn2", "trn3", "inf2", "h200")


def workloads() -> dict[str, Callable[[], object]]:
    """The examples' profiled regions, each a step to run (setup done here, not timed)."""
    torch.manual_seed(0)
    mlp = MLP(256, 1024).to(torch.bfloat16)
    x_mlp = torch.randn(64, 256, dtype=torch.bfloat16)
    block = TransformerBlock(256, 4).to(torch.bfloat16)
    x_block = torch.randn(8, 256, 256, dtype=torch.bfloat16)
    convnet = ConvNet().eval()
    x_conv = torch.randn(8, 3, 32, 32)
    small = MLP(128, 512)
    optimizer = torch.optim.AdamW(small.parameters(), lr=1e-3)
    x_train, target = torch.randn(32, 128), torch.randn(32, 128)
    with torch.device("meta"):
        layer = LlamaLayer(4096, 32, 11008).to(torch.bfloat16)
    x_llama = torch.randn(1, 2048, 4096, dtype=torch.bfloat16, device="meta")

    def mlp_forward() -> None:
        with torch.no_grad():
            mlp(x_mlp)

    def block_forward() -> None:
        with torch.no_grad():
            block(x_block)

    def convnet_inference() -> None:
        with torch.no_grad():
            convnet(x_conv)

    def training_step() -> None:
        loss = F.mse_loss(small(x_train), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def llama_prefill() -> None:
        with torch.inference_mode():
            layer(x_llama)

    return {"mlp forward": mlp_forward, "transformer block": block_forward,
            "convnet": convnet_inference, "training step": training_step,
            "llama-7b layer (meta)": llama_prefill}


def plugin_test(step: Callable[[], object], chips: tuple[str, ...], execution: str) -> float:
    """Seconds for one test as the plugin runs it: profile the step once, summarize each chip."""
    start = time.perf_counter()
    with NeuronProfiler(NeuronConfig(hardware=chips[0], execution=execution),
                        keep_capture=len(chips) > 1) as prof:
        step()
    for chip in chips:
        summarize(prof.result_for(chip), COST_MODEL_VERSION, torch.__version__)
    return time.perf_counter() - start


def in_process(reps: int, execution: str) -> None:
    cases = workloads()
    for step in cases.values():  # warm: imports, per-op plans, shared costs
        plugin_test(step, CHIPS, execution)
    print(f"in process, {execution} execution, median of {reps} (one chip: trn2; four: "
          f"{','.join(CHIPS)})")
    print(f"{'workload':24} {'ops':>6} {'1 chip':>10} {'4 chips':>10} {'ratio':>7}")
    ratios = []
    for name, step in cases.items():
        one, four = [], []
        for _ in range(reps):  # interleaved, so that a slow patch of the machine hits both
            one.append(plugin_test(step, CHIPS[:1], execution))
            four.append(plugin_test(step, CHIPS, execution))
        with NeuronProfiler(NeuronConfig(execution=execution)) as prof:
            step()
        ratio = statistics.median(four) / statistics.median(one)
        ratios.append(ratio)
        print(f"{name:24} {len(prof.result.records):>6} {statistics.median(one) * 1e3:>8.2f}ms "
              f"{statistics.median(four) * 1e3:>8.2f}ms {ratio:>6.2f}x")
    print(f"median ratio, 4 chips / 1 chip: {statistics.median(ratios):.2f}x (a run per chip: 4x)")


def whole_suite(reps: int, execution: str) -> None:
    def run(chips: tuple[str, ...]) -> float:
        with tempfile.TemporaryDirectory() as baselines:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pytest", "examples", "-q", "-p", "no:cacheprovider",
                            "--neuron-hardware", ",".join(chips), "--neuron-execution", execution,
                            "--neuron-baseline", "--neuron-baseline-dir", baselines],
                           cwd=ROOT, check=True, capture_output=True)
            return time.perf_counter() - start

    one, four = [], []
    for _ in range(reps):
        one.append(run(CHIPS[:1]))
        four.append(run(CHIPS))
    print(f"pytest examples ({execution}), median of {reps}: 1 chip {statistics.median(one):.2f} s, "
          f"4 chips {statistics.median(four):.2f} s, ratio {statistics.median(four) / statistics.median(one):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--execution", choices=("eager", "graph"), default="eager")
    parser.add_argument("--pytest", action="store_true", help="time whole pytest runs of examples/")
    args = parser.parse_args()
    if args.pytest:
        whole_suite(max(3, args.reps // 5), args.execution)
    else:
        in_process(args.reps, args.execution)


if __name__ == "__main__":
    main()
