"""One AdamW update in a graph, written four ways, against the published fused kernel.

Run by hand (a few seconds)::

    python benchmarks/adamw_graph.py                      # trn1, the published kernel's shape
    python benchmarks/adamw_graph.py --package-root DIR   # the same on another checkout's package
                                                          # (DIR/pytest_neuronprof: the "before")

On meta tensors, a 10944 x 2048 float32 parameter with its gradient and moments (the op-level row
``n1_adamw`` of ``benchmarks/data/trn_oplevel_calibration.csv``: 1888 us for the best NKI kernel on
one trn1 NeuronCore, ``--auto-cast=none``), profiled in graph execution, one region each:

* ``in place``: ``m.mul_(b1).add_(g, alpha=1-b1)``, ``v.mul_(b2).addcmul_(g, g, value=1-b2)``,
  ``p.mul_(1-lr*wd)``, ``p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)`` (torch.optim's
  single-tensor AdamW, decoupled weight decay);
* ``functionalized``: the same update out of place, copied back into ``p``, ``m`` and ``v``
  (``m.copy_(m * b1 + g * (1 - b1))``, ...): what functionalization makes of an in-place
  update, the form a compiled graph gets;
* ``out of place``: the same ops returning new tensors (the region's results: the new ``p``,
  ``m`` and ``v``, kept by the caller);
* ``fused op``: one ``torch._fused_adamw_`` call.

Printed per form: device time of the graph (its ops, and with the graph's fixed cost
``graph_floor_us``, which the published kernel's figure includes as the op-level rows do), HBM
bytes read and written, the ratio to the published kernel and to the in-place form.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

M, N = 10944, 2048
PUBLISHED_US = 1888.0  # n1_adamw: zhang677/AccelOpt@47e29a7c, NKIBench, best kernel on trn1
B1, B2, LR, WD, EPS = 0.9, 0.999, 1e-3, 0.01, 1e-8


def forms() -> dict[str, Callable[..., Any]]:
    import torch

    def in_place(p, g, m, v):
        m.mul_(B1).add_(g, alpha=1 - B1)
        v.mul_(B2).addcmul_(g, g, value=1 - B2)
        p.mul_(1 - LR * WD)
        p.addcdiv_(m, v.sqrt().add_(EPS), value=-LR)

    def new_values(p, g, m, v):
        m2 = m * B1 + g * (1 - B1)
        v2 = v * B2 + g * g * (1 - B2)
        return p * (1 - LR * WD) - LR * m2 / (v2.sqrt() + EPS), m2, v2

    def functionalized(p, g, m, v):
        p2, m2, v2 = new_values(p, g, m, v)
        m.copy_(m2)
        v.copy_(v2)
        p.copy_(p2)

    def fused(p, g, m, v):
        step = torch.ones((), dtype=torch.float32, device="meta")
        torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=LR, beta1=B1, beta2=B2,
                            weight_decay=WD, eps=EPS, amsgrad=False, maximize=False)

    return {"in place": in_place, "functionalized": functionalized, "out of place": new_values,
            "fused op": fused}


def profile(fn: Callable[..., Any], hardware: str) -> tuple[float, float, int, int]:
    """(ops' device time, graph floor, bytes read, bytes written) of ``fn`` as one graph."""
    import torch

    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    tensors = [torch.zeros(M, N, device="meta") for _ in range(4)]
    with torch.no_grad(), NeuronProfiler(NeuronConfig(hardware=hardware, execution="graph",
                                                      modes=("device",))) as prof:
        kept = fn(*tensors)  # the out-of-place form's results stay alive, as a caller keeps them
    records = prof.result.records
    del kept
    from pytest_neuronprof.costmodel.profiles import load_hardware

    return (sum(r.device_time_us for r in records), load_hardware(hardware).graph_floor_us,
            sum(r.bytes_read for r in records), sum(r.bytes_written for r in records))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hardware", default="trn1")
    parser.add_argument("--package-root", metavar="DIR", default=None,
                        help="import pytest_neuronprof from DIR (another checkout: the 'before')")
    args = parser.parse_args(argv)
    sys.path.insert(0, args.package_root or str(ROOT))
    print(f"AdamW update of a {M} x {N} float32 parameter, graph execution on {args.hardware} "
          f"(package {args.package_root or 'this checkout'}); published fused kernel {PUBLISHED_US:g} us")
    print(f"{'form':<16} {'ops us':>9} {'+ floor us':>11} {'read MiB':>9} {'written MiB':>12} "
          f"{'/ kernel':>9} {'/ in place':>11}")
    base = None
    for name, fn in forms().items():
        ops, floor, read, written = profile(fn, args.hardware)
        total = ops + floor
        base = base or total
        print(f"{name:<16} {ops:>9.1f} {total:>11.1f} {read / 2**20:>9.1f} {written / 2**20:>12.1f} "
              f"{total / PUBLISHED_US:>9.3f} {total / base:>11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
