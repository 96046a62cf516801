"""Distributed code on the simulated NeuronCore (issue 37): the figures the docs quote.

Run by hand (a few seconds; no ``transformers`` needed)::

    python benchmarks/distributed.py
    python benchmarks/distributed.py --json out.json

Prints, each from a profiled region on a simulated process group (this process rank 0 of the
group's ranks, torch's fake backend):

1. The three API forms of an all-reduce, an all-gather and a reduce-scatter after an 8-rank
   tensor-parallel product (``dist.*``, the functional API, the raw ``_c10d_functional`` ops):
   device time and peak on ``trn2``, eager and graph.
2. An FSDP-style step over 32 ranks: the next layer's all-gather prefetched beside this layer's
   product, and the same step serialised (the gather reads the product's result), as graph and
   eager executions; with the terms of the overlap (the collective's time C, the product's
   TensorE time K and transfers D, the share of the DMA compute keeps while a collective runs,
   from the runtime's packet sizes) and the gain they give, (K + C) - (C + D - share x C).
3. The collective figures ``docs/cost-model.md`` quotes: a 32-rank 1 KiB all-gather (trn2's
   routed Mesh over its 8 chips; trn1's rings; trn1 as if its 16 chips ran routed Mesh), and a
   16 MiB all-reduce over one rank (nothing to exchange).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KIB, MIB = 2**10, 2**20
TOKENS, HIDDEN, SHARD = 2048, 4096, 512  # the 8-rank forms: a [2048, 512] @ [512, 4096] product
FSDP_RANKS = 32


def _profiled(fn: Callable[[], Any], **config: Any) -> Any:
    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof.result


def api_forms() -> list[dict[str, Any]]:
    """Each form's device time and peak (section 1)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from pytest_neuronprof.profiler.distributed import simulated_group

    functional = torch.ops._c10d_functional
    rows = []
    with simulated_group(8) as group:
        ranks, name = group.size(), group.group_name
        with torch.device("meta"):
            x = torch.empty(TOKENS, SHARD, dtype=torch.bfloat16)
            w = torch.empty(HIDDEN, SHARD, dtype=torch.bfloat16)

        def forms(kind: str) -> dict[str, Callable[[], Any]]:
            def c10d() -> Any:
                h = x @ w.t()
                if kind == "all_reduce":
                    dist.all_reduce(h)
                else:
                    rows_out = ranks * TOKENS if kind == "all_gather" else TOKENS // ranks
                    out = torch.empty(rows_out, HIDDEN, dtype=h.dtype, device="meta")
                    (dist.all_gather_into_tensor if kind == "all_gather" else dist.reduce_scatter_tensor)(out, h)
                    h = out
                return h * 2

            def public() -> Any:
                h = x @ w.t()
                h = {"all_reduce": lambda: funcol.all_reduce(h, "sum", group),
                     "all_gather": lambda: funcol.all_gather_tensor(h, 0, group),
                     "reduce_scatter": lambda: funcol.reduce_scatter_tensor(h, "sum", 0, group)}[kind]()
                return h * 2

            def raw() -> Any:
                h = x @ w.t()
                h = {"all_reduce": lambda: functional.all_reduce(h, "sum", name),
                     "all_gather": lambda: functional.all_gather_into_tensor(h, ranks, name),
                     "reduce_scatter": lambda: functional.reduce_scatter_tensor(h, "sum", ranks, name)}[kind]()
                return functional.wait_tensor(h) * 2

            return {"dist": c10d, "functional": public, "raw _c10d_functional": raw}

        for kind in ("all_reduce", "all_gather", "reduce_scatter"):
            for execution in ("eager", "graph"):
                for form, fn in forms(kind).items():
                    result = _profiled(fn, execution=execution)
                    rows.append({"kind": kind, "execution": execution, "form": form,
                                 "time_us": result.total_device_time_us,
                                 "peak_bytes": result.memory.peak_bytes})
    return rows


def fsdp_overlap() -> dict[str, Any]:
    """The prefetched and serialised FSDP step (section 2)."""
    import torch

    from pytest_neuronprof.costmodel.profiles import load_hardware
    from pytest_neuronprof.profiler.distributed import simulated_group

    functional = torch.ops._c10d_functional
    with simulated_group(FSDP_RANKS) as group:
        with torch.device("meta"):
            x = torch.empty(TOKENS, HIDDEN, dtype=torch.bfloat16)
            w = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
            shard = torch.empty(HIDDEN // FSDP_RANKS, HIDDEN, dtype=torch.bfloat16)

        def gather(t: Any) -> Any:
            return functional.wait_tensor(functional.all_gather_into_tensor(t, FSDP_RANKS, group.group_name))

        def prefetched() -> Any:
            return gather(shard), x @ w

        def serialised() -> Any:
            y = x @ w
            return gather(y[: HIDDEN // FSDP_RANKS]), y

        times = {(fn.__name__, execution): _profiled(fn, execution=execution)
                 for fn in (prefetched, serialised) for execution in ("graph", "eager")}
    graph = times[("prefetched", "graph")]
    (ag,) = [r for r in graph.records if r.engine == "Collective"]
    (mm,) = [r for r in graph.records if r.name == "aten::mm"]
    share = load_hardware("trn2").collectives.compute_dma_share
    C, K, D = ag.compute_us, mm.compute_us, mm.memory_us
    return {"ranks": FSDP_RANKS, "share": share, "C_us": C, "K_us": K, "D_us": D,
            "derived_overlapped_us": C + (D - share * C), "derived_serial_us": K + C,
            "derived_gain_us": K - D + share * C,
            **{f"{name}_{execution}_us": r.total_device_time_us for (name, execution), r in times.items()}}


def doc_figures() -> dict[str, float]:
    """The collective figures docs/cost-model.md quotes (section 3)."""
    import torch
    import torch.distributed as dist

    from pytest_neuronprof.costmodel.profiles import load_hardware
    from pytest_neuronprof.profiler.distributed import simulated_group

    trn2, trn1 = load_hardware("trn2"), load_hardware("trn1")
    routed = dataclasses.replace(trn1.collectives, mesh_max_bytes=1e6, torus=(4, 4))
    figures = {
        "ag32_1k_trn2_us": trn2.collectives.time_us(32, 1, 31 * KIB / 32, trn2.cores_per_chip),
        "ag32_1k_trn2_chips": 32 / trn2.cores_per_chip,
        "ag32_1k_trn1_rings_us": trn1.collectives.time_us(32, 1, 31 * KIB / 32, trn1.cores_per_chip),
        "ag32_1k_trn1_routed_mesh_us": routed.time_us(32, 1, 31 * KIB / 32, trn1.cores_per_chip),
    }
    x = torch.empty(8 * MIB, dtype=torch.bfloat16, device="meta")
    with simulated_group(1):
        for execution in ("eager", "graph"):
            result = _profiled(lambda: dist.all_reduce(x), execution=execution)
            figures[f"ar1_16m_{execution}_us"] = result.total_device_time_us
    figures["launch_us"] = trn2.launch_us
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    forms = api_forms()
    print("1. One collective, one cost: three API forms after an 8-rank tensor-parallel product "
          f"([{TOKENS}, {SHARD}] @ [{SHARD}, {HIDDEN}], bf16), trn2")
    for row in forms:
        print(f"  {row['kind']:<15} {row['execution']:<6} {row['form']:<22} {row['time_us']:10.3f} us  "
              f"peak {row['peak_bytes'] / MIB:7.1f} MiB")

    fsdp = fsdp_overlap()
    print(f"\n2. FSDP step over {fsdp['ranks']} ranks on trn2: the next layer's all-gather ([{HIDDEN // FSDP_RANKS}, "
          f"{HIDDEN}] per rank) beside this layer's product ([{TOKENS}, {HIDDEN}] @ [{HIDDEN}, {HIDDEN}], bf16)")
    for name in ("prefetched", "serialised"):
        print(f"  {name:<11} graph {fsdp[f'{name}_graph_us']:9.2f} us   eager {fsdp[f'{name}_eager_us']:9.2f} us")
    print(f"  C (the all-gather on the links) {fsdp['C_us']:.2f} us, K (the product on TensorE) "
          f"{fsdp['K_us']:.2f} us, D (its transfers at their own pace) {fsdp['D_us']:.2f} us, "
          f"share of the DMA beside a collective 4 KiB / (4 KiB + 64 KiB) = {fsdp['share']:.4f}")
    print(f"  serialised = K + C = {fsdp['derived_serial_us']:.2f} us; overlapped = C + (D - share x C) = "
          f"{fsdp['derived_overlapped_us']:.2f} us; gain = K - D + share x C = {fsdp['derived_gain_us']:.2f} us "
          f"({fsdp['derived_gain_us'] / fsdp['derived_serial_us']:.1%} of the serialised step)")

    figures = doc_figures()
    print("\n3. Collective figures of docs/cost-model.md")
    print(f"  32-rank 1 KiB all-gather on the links: trn2 (routed Mesh over {figures['ag32_1k_trn2_chips']:.0f} chips) "
          f"{figures['ag32_1k_trn2_us']:.2f} us; trn1 (rings) {figures['ag32_1k_trn1_rings_us']:.2f} us; "
          f"trn1 as if its 16 chips ran routed Mesh {figures['ag32_1k_trn1_routed_mesh_us']:.2f} us")
    print(f"  16 MiB all-reduce over one rank: eager {figures['ar1_16m_eager_us']:.2f} us (its launch, "
          f"{figures['launch_us']:.2f} us), graph {figures['ar1_16m_graph_us']:.2f} us")
    if args.json:
        Path(args.json).write_text(json.dumps({"forms": forms, "fsdp": fsdp, "figures": figures}, indent=1) + "\n",
                                   encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
