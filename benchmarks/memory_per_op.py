"""Memory per captured op of the simulated backend, measured with tracemalloc.

    python benchmarks/memory_per_op.py                 # 1,000,000 ops of x.add_(1), meta tensor
    python benchmarks/memory_per_op.py --ops 100000 --device cpu
    python benchmarks/memory_per_op.py --rss           # peak RSS growth, without tracemalloc

Three figures, each divided by the number of ops:
- capture: what the region holds just before ``stop()`` (the dispatch mode's raw tuples);
- peak: the highest point during ``stop()`` (raw tuples and the OpRecords built from them);
- result: what the ProfileResult keeps after ``stop()`` (one OpRecord per op).
tests/test_robustness.py holds a smaller region to a budget derived from these numbers; the
figures are in docs/guarantees.md.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc


def measure(ops: int, device: str = "meta") -> dict[str, float]:
    import torch

    from pytest_neuronprof import NeuronProfiler

    x = torch.zeros(1, device=device)
    with NeuronProfiler():  # warm the per-process op plans and cost cache
        for _ in range(10):
            x.add_(1)
    gc.collect()
    tracemalloc.start()
    try:
        profiler = NeuronProfiler()
        base = tracemalloc.get_traced_memory()[0]
        profiler.start()
        for _ in range(ops):
            x.add_(1)
        capture = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.reset_peak()
        result = profiler.stop()
        peak = tracemalloc.get_traced_memory()[1] - base
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(result.records) == ops
    return {"capture": capture / ops, "peak": peak / ops, "result": kept / ops}


def measure_rss(ops: int, device: str = "meta") -> float:
    """Growth of the peak resident set over a region and its stop(), per op, without
    tracemalloc (whose own bookkeeping is several times the data): what the OS sees."""
    import resource

    import torch

    from pytest_neuronprof import NeuronProfiler

    x = torch.zeros(1, device=device)
    with NeuronProfiler():
        for _ in range(10):
            x.add_(1)
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with NeuronProfiler() as profiler:
        for _ in range(ops):
            x.add_(1)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert len(profiler.result.records) == ops
    return (after - before) * 1024 / ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--device", default="meta", choices=("meta", "cpu"))
    parser.add_argument("--rss", action="store_true",
                        help="peak RSS growth per op instead, without tracemalloc")
    args = parser.parse_args()
    if args.rss:
        print(f"{args.ops:,} ops: peak RSS grew {measure_rss(args.ops, args.device):.0f} bytes/op")
        return
    t0 = time.perf_counter()
    figures = measure(args.ops, args.device)
    seconds = time.perf_counter() - t0
    print(f"{args.ops:,} ops of x.add_(1) on a 1-element {args.device} tensor "
          f"({seconds:.1f} s under tracemalloc):")
    for name, value in figures.items():
        print(f"  {name:8s} {value:7.0f} bytes/op")


if __name__ == "__main__":
    main()
