"""Workloads behind the figures AWS publishes for Trainium / Inferentia, rebuilt on ``meta``
tensors, one module per family:

==================  ====================================================================
module              workloads (the ``workload`` column of ``benchmarks/data/*.csv``)
==================  ====================================================================
``encoders``        ``encoder_fwd``: Hugging Face encoders with the head the row ran
``vision``          ``vision_fwd``: ResNet, VGG, ViT
``decoders``        ``llama_decode``, ``llama_prefill``: Llama-family LLMs, one TP rank
``training``        ``train_step``: BERT pretraining, ViT fine-tuning, Llama pretraining
``kernels``         ``mamba_fused`` (NKI kernel or its PyTorch loop) and the op-level rows
                    (``mm_t``, ``silu``, ``adamw``; the collectives ``all_reduce``,
                    ``all_gather``, ``reduce_scatter``)
``parallel``        the fake process group and the tensor-parallel collectives
==================  ====================================================================

``build(workload, config)`` turns one row's ``workload`` and ``config`` (``key=value;...``) into
a :class:`Workload`: the phases to run under whatever profiler is active (one call each; a
weight says how a phase counts in the published figure), the tensors the published harness moves
between host and device, and the row's unit. A row the harness cannot build raises
:class:`UnbuildableRow`, which says what is missing and what is known.

Every model runs on ``meta`` tensors: full-size models cost no memory and no arithmetic; the
profiler sees each ATen op with its shapes. Inference runs under ``torch.inference_mode()``;
training phases under autograd. The model configurations are the published Hugging Face
``config.json`` values, written out in each family's module (no hub download is possible here).

What is approximate: mixed precision is simulated all-BF16 (the host tensors keep the published
model's dtypes); BatchNorm is not folded; the encoders run without their all-ones attention mask;
transformers' separate q/k/v and gate/up projections (NxD coalesces them); the vocabulary-parallel
cross-entropy of TP training is the loss over the local vocabulary shard; pipeline sends and
ZeRO-1's sharded optimizer are not simulated; the fused-Mamba scan is one elementwise pass.
"""

from __future__ import annotations

from typing import Any, Callable

from . import decoders, encoders, kernels, training, vision
from .base import (DTYPES, HostTensor, Phase, UnbuildableRow, Workload, host_tensors, inference,
                   parse_config)
from .kernels import OPLEVEL_PARAMS, oplevel_config

BUILDERS: dict[str, Callable[..., Workload]] = {
    **kernels.BUILDERS, **encoders.BUILDERS, **vision.BUILDERS, **training.BUILDERS, **decoders.BUILDERS,
}
TP_METHODS = ("shard", "divide")


def build(workload: str, config: str | dict[str, Any], tp_method: str = "shard", notes: str = "") -> Workload:
    """The Workload of one CSV row (``workload`` and ``config`` columns; ``notes``: the row's
    notes, which may name the model head it ran)."""
    cfg = parse_config(config) if isinstance(config, str) else dict(config)
    if workload not in BUILDERS:
        raise UnbuildableRow(f"unknown workload {workload!r}; known: {', '.join(BUILDERS)}")
    if tp_method not in TP_METHODS:
        raise ValueError(f"tp_method must be 'shard' or 'divide', got {tp_method!r}")
    missing = [key for key in _REQUIRED.get(workload, ()) if key not in cfg]
    if missing:
        raise UnbuildableRow(f"{workload} config {config!r} lacks {', '.join(missing)}")
    return BUILDERS[workload](cfg, tp_method=tp_method, notes=notes)


_REQUIRED = {"encoder_fwd": ("arch", "batch"), "vision_fwd": ("arch", "batch"),
             "train_step": ("arch", "batch"), "llama_decode": ("arch", "ctx"),
             "llama_prefill": ("arch", "ctx"), "mamba_fused": ("batch", "seq", "channels", "state")}


def model_family(arch: str) -> str:
    """The architecture ``arch`` is one size of: the same code and vocabulary at another depth or
    width (resnet18 and resnet152: "resnet"; bert-base and bert-large: "bert/30522"; Llama-2 7B
    and 70B: "llama/32000", Llama-3 70B, whose vocabulary is 4x larger, not). An unknown arch is
    its own family."""
    for module in (vision, encoders, decoders):
        found = module.family(arch)
        if found:
            return found
    return arch


__all__ = ["BUILDERS", "DTYPES", "HostTensor", "OPLEVEL_PARAMS", "Phase", "UnbuildableRow", "Workload",
           "build", "host_tensors", "inference", "model_family", "oplevel_config", "parse_config"]
