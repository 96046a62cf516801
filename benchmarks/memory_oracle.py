"""The simulated backend's device-memory peak against two independent counts.

Run by hand (a minute or two; needs transformers)::

    python benchmarks/memory_oracle.py [--only TEXT]

(a) **torch's MemTracker** (``torch.distributed._tools.mem_tracker.MemTracker``), on the same
workloads: the forward (under ``no_grad``) and a training step (forward, backward and an
``AdamW(foreach=True)`` step, the optimizer's states made in the step) of BERT-base, GPT-2 and
a small Llama, built from their configurations on ``meta`` (as benchmarks/published_workloads.py
builds models: nothing is allocated or computed). MemTracker runs on meta tensors as it is (no
FakeTensorMode needed): a TorchDispatchMode that tags every op's outputs and the modules'
parameters, buffers, inputs, gradients and optimizer states, and frees them by weak-reference
callbacks on their storages. Each workload runs twice from a freshly built model, once under
each tool, and the table gives both peaks and their ratio.

Definitions, compared like with like:

- MemTracker counts everything it was told about when it starts (every parameter and buffer
  of the model), the simulator the storages the region's ops read (resident) and make. Every
  parameter and buffer of these models is read by the forward, so both count the same
  resident bytes. The simulator also counts the token ids and labels (ops read them), which
  MemTracker's peak leaves out: the difference column, tens of KiB. Both take the peak after
  each op.
- MemTracker rounds each allocation up to 512 bytes on CUDA only (the caching allocator's
  block); on ``meta`` it counts a storage's bytes, as the simulator does. So no rounding is
  applied to either side.
- Attention runs as transformers' "eager" implementation (matmul, softmax, matmul) in both
  runs: the simulated backend runs ``scaled_dot_product_attention`` on meta as the fused
  kernel a device would (backends/simulated.py), which MemTracker alone would not; with the
  eager implementation both see the same ops.

(b) **An analytic count** for a Llama-style training step with gradient accumulation: the
optimizer's two AdamW states exist (an earlier step made them) and so do the gradients (an
earlier micro-batch), and the region is the next micro-batch's forward and backward and the
optimizer's step. The peak is at the start of backward, where the count is, in float32:

- parameters P, gradients P, AdamW's exp_avg and exp_avg_sq 2P, from the parameters' sizes
  (the region reads all four: the gradients when it accumulates into them and in the step, the
  states in the step; a storage the region never reads is not its device memory);
- the activations autograd saves for backward: every storage a ``saved_tensors_hooks`` pack
  hook is given during the forward, other than the parameters and the token ids, counted once
  each (autograd's own account of what backward needs, independent of the capture);
- the token ids and labels (int64, 2 x tokens x 8 bytes);
- working memory at the start of backward: the gradients of the loss's log-probabilities and
  of the logits (2 x tokens x vocabulary x 4 bytes), which exist together while log_softmax's
  backward runs, beside the log-probabilities autograd saved.

The table prints each peak, its oracle and the ratio, and the median ratio (target: within 5 %).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402

F32 = 4
MODELS: dict[str, tuple[str, dict[str, Any], int, int]] = {
    # name: (model_type, configuration, batch, sequence)
    # google-bert/bert-base-uncased
    "bert-base": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072, vocab_size=30522,
                               max_position_embeddings=512, type_vocab_size=2), 8, 512),
    # openai-community/gpt2
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
             4, 1024),
    # a small Llama: Llama-2's layer with fewer, narrower layers
    "llama-small": ("llama", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                  num_attention_heads=16, num_key_value_heads=16,
                                  vocab_size=32000, rms_norm_eps=1e-5,
                                  max_position_embeddings=2048, tie_word_embeddings=False),
                    2, 1024),
}


def build(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model (float32, on meta, eager attention), its token ids and labels."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    model_type, values, batch, seq = MODELS[name]
    config = AutoConfig.for_model(model_type, **values)
    config._attn_implementation = "eager"
    kind = AutoModelForMaskedLM if model_type == "bert" else AutoModelForCausalLM
    torch.manual_seed(0)
    with torch.device("meta"):
        model = kind.from_config(config, attn_implementation="eager")
        ids = torch.zeros(batch, seq, dtype=torch.long)
        labels = torch.zeros(batch, seq, dtype=torch.long)
    return model, ids, labels


def forward_step(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> Callable[[], Any]:
    model.eval()

    def step() -> None:
        with torch.no_grad():
            model(ids)

    return step


def training_step(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor
                  ) -> Callable[[], Any]:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step() -> None:
        model(ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step.optimizer = optimizer  # type: ignore[attr-defined]
    return step


def simulated_peak(step: Callable[[], Any]) -> int:
    with NeuronProfiler(NeuronConfig()) as prof:
        step()
    assert prof.result.memory is not None
    return prof.result.memory.peak_bytes


def memtracker_peak(model: nn.Module, step: Callable[[], Any]) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    optimizer = getattr(step, "optimizer", None)
    tracker.track_external(model, *([optimizer] if optimizer is not None else []))
    with tracker:
        step()
    peak = tracker.get_tracker_snapshot("peak")
    return sum(snap["Total"] for snap in peak.values())  # meta, and the optimizer's CPU steps


def saved_activation_bytes(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> int:
    """Bytes of the storages autograd saves for backward in a forward (parameters and token
    ids left out), each once: by a saved_tensors_hooks pack hook."""
    left_out = {p.untyped_storage()._cdata for p in model.parameters()}
    left_out |= {ids.untyped_storage()._cdata, labels.untyped_storage()._cdata}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in left_out:  # a saved tensor stays alive: its address is its own
            saved[storage._cdata] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(ids, labels=labels).loss
    del loss
    return sum(saved.values())


def accumulating(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor, Any]:
    """A model after one micro-batch and step (AdamW's states made) and one more micro-batch
    (its gradients alive, to be accumulated into)."""
    model, ids, labels = build(name)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    model(ids, labels=labels).loss.backward()
    optimizer.step()
    return model, ids, labels, optimizer


def llama_analytic(name: str) -> tuple[Callable[[], Any], int, dict[str, int]]:
    """(b): the step (see the module) and its analytic count, with its parts."""
    model, ids, labels, optimizer = accumulating(name)

    def step() -> None:
        model(ids, labels=labels).loss.backward()  # accumulates into the gradients
        optimizer.step()

    _, values, batch, seq = MODELS[name]
    tokens, vocab = batch * seq, values["vocab_size"]
    params = sum(p.numel() for p in model.parameters()) * F32
    parts = {"parameters": params, "gradients": params, "AdamW states": 2 * params,
             "saved activations": saved_activation_bytes(*accumulating(name)[:3]),
             "token ids and labels": 2 * tokens * 8,
             "loss gradients": 2 * tokens * vocab * F32}
    return step, sum(parts.values()), parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="TEXT", default="", help="only workloads naming TEXT")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    rows: list[tuple[str, str, int, int]] = []
    for name in MODELS:
        for phase, make in (("forward", forward_step), ("training step", training_step)):
            label = f"{name} {phase}"
            if opts.only not in label:
                continue
            simulated = simulated_peak(make(*build(name)))
            model, ids, labels = build(name)
            oracle = memtracker_peak(model, make(model, ids, labels))
            rows.append((label, "MemTracker", simulated, oracle))
    if "analytic" in opts.only or not opts.only or "llama" in opts.only:
        step, count, parts = llama_analytic("llama-small")
        rows.append(("llama-small accumulation step", "analytic", simulated_peak(step), count))
        print("analytic count: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items()))
    header = ("workload", "oracle", "simulated MiB", "oracle MiB", "ratio", "difference bytes")
    table = [header] + [(label, kind, f"{sim / 2**20:.1f}", f"{ref / 2**20:.1f}",
                         f"{sim / ref:.4f}", f"{sim - ref:+d}") for label, kind, sim, ref in rows]
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    for j, row in enumerate(table):
        print("  ".join(cell.ljust(w) if k < 2 else cell.rjust(w)
                        for k, (cell, w) in enumerate(zip(row, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))
    for kind in ("MemTracker", "analytic"):
        ratios = [sim / ref for _, k, sim, ref in rows if k == kind]
        if ratios:
            print(f"median simulated/{kind}: {statistics.median(ratios):.4f} "
                  f"(worst {max(ratios, key=lambda r: abs(r - 1)):.4f}; target within 5 %)")


if __name__ == "__main__":
    main()
