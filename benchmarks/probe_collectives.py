"""Which ops a TorchDispatchMode sees when tensor-parallel code issues collectives on meta tensors.

Run by hand (a few seconds)::

    python benchmarks/probe_collectives.py

A fake process group (``torch.testing._internal.distributed.fake_pg``, rank 0 of 8) lets the
collectives run on ``meta`` tensors without communicating. For each way of issuing a
collective, the script prints the ops a bare recording TorchDispatchMode sees (name, input
shapes) and what ``NeuronProfiler`` records for them (engine, bytes, whether the cost model
knows the op). ``published_workloads.py`` issues them the way case 2 and 3 do.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402


class Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
        self.ops.append(f"{func._schema.name} {shapes}")
        return out


def main() -> int:
    from torch.testing._internal.distributed.fake_pg import FakeStore
    import torch.distributed._functional_collectives as fc
    import published_workloads as pw

    warnings.simplefilter("ignore")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    group = dist.group.WORLD
    with torch.device("meta"):
        x = torch.zeros(4, 1024, dtype=torch.bfloat16)
        w = torch.zeros(1024, 1024, dtype=torch.bfloat16, requires_grad=True)

    def case1():  # the functional API: returns an AsyncCollectiveTensor, waited on first use
        return (fc.all_reduce(x, "sum", group) * 2)

    def case2():  # the raw functional ops, as a traced graph holds them
        out = torch.ops._c10d_functional.all_reduce(x, "sum", group.group_name)
        return torch.ops._c10d_functional.wait_tensor(out) * 2

    def case3():  # Megatron g (forward all-reduce) and f (backward all-reduce) under autograd
        h = x.detach().requires_grad_()  # an activation that needs its gradient, as in a model
        y = pw._ReduceFromTP.apply(pw._CopyToTP.apply(h) @ w)
        y.sum().backward()

    def case4():  # sequence parallelism: all-gather and reduce-scatter over dim 0
        g = torch.ops._c10d_functional.all_gather_into_tensor(x, 8, group.group_name)
        g = torch.ops._c10d_functional.wait_tensor(g)
        r = torch.ops._c10d_functional.reduce_scatter_tensor(g, "sum", 8, group.group_name)
        return torch.ops._c10d_functional.wait_tensor(r)

    def case5():  # the autograd-aware torch.distributed.nn API (deprecated): in-place c10d op
        from torch.distributed.nn.functional import all_reduce

        y = all_reduce(x.float() @ w.float())
        y.sum().backward()

    cases = [("fc.all_reduce (functional, AsyncCollectiveTensor)", case1, True),
             ("_c10d_functional.all_reduce + wait_tensor", case2, True),
             ("Megatron f/g autograd Functions (published_workloads)", case3, False),
             ("all_gather_into_tensor / reduce_scatter_tensor + wait", case4, True),
             ("torch.distributed.nn.functional.all_reduce", case5, False)]
    for title, fn, inference in cases:
        print(f"== {title}")
        ctx = torch.inference_mode() if inference else torch.enable_grad()
        recorder = Recorder()
        with ctx, recorder:
            fn()
        for op in recorder.ops:
            print(f"   mode sees: {op}")
        with ctx, NeuronProfiler(NeuronConfig(hardware="trn1", modes=("device",))) as prof:
            fn()
        for r in prof.result.records:
            if "c10d" in r.name:
                print(f"   profiler:  {r.name:48s} {r.phase:8s} engine={r.engine:6s} "
                      f"bytes={r.bytes_read + r.bytes_written:>8d} {r.device_time_us:6.2f} us "
                      f"costed={r.costed}")
        w.grad = None
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
