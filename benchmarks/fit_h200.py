"""Fit the ``h200`` hardware profile to per-op device times measured on an NVIDIA H200, and say
how well it predicts shapes it was not fitted on.

Run by hand (about 4 minutes on 2 cores; ``--quick`` skips the cross-validations)::

    python benchmarks/fit_h200.py            # fit, print the table, the parameters and the errors
    python benchmarks/fit_h200.py --write    # ... and rewrite costmodel/hardware/h200.toml
    python benchmarks/fit_h200.py --plain    # the same fit and errors for the plain roofline and
                                             # its ten parameters (the model before the [gpu]
                                             # table), for comparison
    python benchmarks/fit_h200.py --schemes extremes,bands   # only these cross-validations

Data: ``benchmarks/data/h200_calibration.csv`` (see ``benchmarks/data/README.md``): one row per op
call, ``op, shape, dtype, device_us``. For every row the script builds the call the README
describes on ``meta`` tensors, runs it under ``NeuronProfiler(NeuronConfig(hardware="h200"))``
(inference mode, so only the forward op runs) and takes the sum of the device time of the
recorded ATen ops as the prediction. The captured OpCosts are kept, so candidate parameter sets
are evaluated with ``device_time(cost, profile)`` on ``parse_profile(dict)`` instead of re-running
the ops; the script checks that this gives the profiler's own numbers for the bundled profile.

Model (``costmodel/roofline.py``, ``gpu_time``): launch + serial stages + max(work, memory), with
the GPU's geometry: GEMM and convolution tiles in waves over 132 SMs (the library's fastest tile
and split-K), cuDNN's channel padding and NCHW transposes, flash-attention CTAs, row-wise kernels
with a block per row, reductions, the L2 cache for working sets that fit, strided reads in whole
sectors. The parameters (PARAMS)
each have a physical meaning; the tensor-core ceilings, the SM count, the L2 size and the kernels'
K tiles are set, not fitted (SET). The fit minimises the mean absolute log error (smoothed within
2 %, so that rows the model cannot describe pull by their sign, not their size) with deterministic
coordinate descent (grid + golden section) and Nelder-Mead, in pure Python.

Errors: median |predicted / measured - 1| and the share of rows within 2x, in sample (fit on all
rows) and cross-validated, each row predicted by a fit that did not see it:

* k-fold: 5 folds dealt out within each op (small and large shapes in every fold), as before;
* extremes: for each op, its smallest and, in a second fit, its largest shape held out (an op
  with one row is held out whole): extrapolation in size, the honest figure for new shapes;
* size bands: each op's rows in three bands by size; each band held out in turn;
* leave one class out: every op of a class (GEMMs, convolutions, elementwise, copies, the
  transposing copy, softmax, sum, layer_norm, embedding, attention) held out at once: a stress
  test of what the other classes say about it.

It also prints the predicted ratio of an MLP forward (x[4096, 1024] bf16 -> Linear(1024, H) ->
GELU -> Linear(H, 1024)) at odd hidden sizes to H = 128: tile and wave quantization.

This is the command line; the fit lives in ``benchmarks/h200fit/`` (``calls``: the rows and their
captured calls; ``parameters``: what is fitted and set; ``search``: loss and search;
``crossval``: the cross-validations; ``profile_file``: writing ``h200.toml``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from pytest_neuronprof.costmodel.profiles import load_hardware, parse_profile  # noqa: E402
from pytest_neuronprof.costmodel.roofline import device_time  # noqa: E402

from h200fit.calls import MLP_HIDDEN, Row, capture, load_rows, mlp_costs  # noqa: E402
from h200fit.crossval import (CLASSES, band_folds, class_folds, cross_validate, extreme_folds,  # noqa: E402
                              kfold_folds, metrics)
from h200fit.parameters import CEILINGS, TIED, Model, _get  # noqa: E402
from h200fit.profile_file import _fmt, render_profile  # noqa: E402
from h200fit.search import fit, predict  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROFILE_PATH = ROOT / "pytest_neuronprof" / "costmodel" / "hardware" / "h200.toml"
DATA = ROOT / "benchmarks" / "data" / "h200_calibration.csv"
SCRIPT = "benchmarks/fit_h200.py"


# Predicted, not measured: where the model's physics says more than the calibration rows do.
UNMEASURED = [
    ("layer_norm", "64x32000", "bfloat16", "few long rows, 128 threads each: latency-bound"),
    ("layer_norm", "8192x128", "bfloat16", "many short rows"),
    ("softmax", "64x32000", "bfloat16", "the same rows with 1024 threads each (measured: 10.50)"),
    ("conv2d", "32x256x14x14_k256r3s1", "bfloat16", "the FLOPs of the 64-channel row (measured: 47.77)"),
    ("conv2d", "16x3x224x224_k64r7s2", "float32", "the stem on TF32 (bf16 measured: 164.47)"),
    ("sum", "4096x4096", "bfloat16", "input fits in L2"),
    ("sum", "32768x1024", "bfloat16", "memory-bound (fp32 measured: 38.13)"),
    ("transpose_contig", "4096x4096", "bfloat16", "a sector per element, as fp32 (measured: 120.86)"),
]


def _line(name: str, ratios: Sequence[float | None]) -> str:
    got = [r for r in ratios if r is not None]
    median, within = metrics(got)
    return (f"  {name:52s} median |pred/meas - 1| {median:6.1%}   within 2x {within:6.1%}   "
            f"({len(got)} rows)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="the calibration CSV")
    parser.add_argument("--quick", action="store_true", help="skip the cross-validations")
    parser.add_argument("--schemes", default="kfold,extremes,bands,classes",
                        help="cross-validations to run (default: kfold,extremes,bands,classes)")
    parser.add_argument("--plain", action="store_true",
                        help="fit the plain roofline (no [gpu] table), the model before, instead")
    parser.add_argument("--write", action="store_true", help="rewrite costmodel/hardware/h200.toml")
    args = parser.parse_args(argv)
    if args.write and args.plain:
        parser.error("--write writes the GPU model; run it without --plain")
    started = time.perf_counter()
    model = Model(args.plain)

    data_path = args.data or DATA
    rows = load_rows(data_path)
    text = PROFILE_PATH.read_text(encoding="utf-8")
    current = tomllib.loads(text)
    base = model.base(current)
    bundled = load_hardware("h200")
    capture(rows, bundled)

    before = [pred / row.measured_us for row, pred in zip(rows, predict(rows, bundled))]
    values = model.rounded(fit(model, base, rows))
    fitted = model.profile_data(base, values)
    hw = parse_profile(fitted, "fitted")
    preds = predict(rows, hw)
    ratios = [p / r.measured_us for p, r in zip(preds, rows)]
    schemes: list[tuple[str, list[float | None]]] = []
    wanted = set() if args.quick else set(args.schemes.split(","))
    for key, name, folds in (
            ("kfold", "5-fold within each op (random shapes)", kfold_folds(rows)),
            ("extremes", "extremes: each op's smallest / largest held out", extreme_folds(rows)),
            ("bands", "size bands: each op's small / mid / large third", band_folds(rows)),
            ("classes", "leave one class out (stress test)", class_folds(rows))):
        if key in wanted:
            schemes.append((name, cross_validate(model, base, rows, folds)))

    print(f"model: {model.name}; data: {data_path} ({len(rows)} rows); prediction = sum of the "
          f"device time of the recorded ops under NeuronProfiler(NeuronConfig(hardware='h200'))")
    heads = ["extremes", "bands", "class-out"]
    print(f"{'op':17s} {'shape':22s} {'dtype':9s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s} "
          + " ".join(f"{h:>9s}" for h in heads) + "  recorded ops")
    keyed = [next((r for n, r in schemes if n.startswith(h)), None)
             for h in ("extremes", "size bands", "leave one")]
    for i, (row, pred, ratio) in enumerate(zip(rows, preds, ratios)):
        ops = ",".join(sorted({n.split("::")[-1] for n in row.ops}))
        cv = " ".join(f"{r[i]:9.2f}" if r is not None and r[i] is not None else f"{'-':>9s}"
                      for r in keyed)
        print(f"{row.op:17s} {row.shape:22s} {row.dtype:9s} {row.measured_us:9.2f} {pred:9.2f} "
              f"{ratio:6.2f} {cv}  {ops}")

    print("\nfitted parameters (minimising the mean absolute log error, smoothed within 2 %)")
    for param, value in zip(model.params, values):
        was = _get(current, param.key)
        print(f"  {param.key:28s} {_fmt(value, param.decimals):>9s}   {param.meaning} "
              f"(bounds {param.lo:g}..{param.hi:g}; profile had {'-' if was is None else f'{was:g}'})")
    for key, source in TIED.items():
        print(f"  {key:28s} = {source}")
    print("set, not fitted: tensor.tflops " + ", ".join(f"{k} {v:g}" for k, v in CEILINGS.items())
          + "; " + ", ".join(f"{k} {v:g}" for k, v in model.set.items()))
    peak = hw.vector.lanes * hw.vector.clock_ghz * 1e3
    print(f"  -> element rates (of {peak:.3g} lane-cycles/us): vector {hw.vector.elements_per_us:.3g}/us, "
          f"scalar {hw.scalar.elements_per_us:.3g}/us, gpsimd {hw.gpsimd.elements_per_us:.3g}/us")

    print(f"\nerrors ({model.name})")
    if not args.plain:  # the bundled profile is the GPU model's
        print(_line("the bundled profile before this run, all rows", before))
    print(_line("fitted on all rows, in sample", ratios))
    for name, cv in schemes:
        print(_line(name, cv))
    order = sorted(range(len(rows)), key=lambda i: (-abs(math.log(ratios[i])), i))
    print("\nworst rows in sample")
    for i in order[:8]:
        print(f"  {rows[i].label:42s} measured {rows[i].measured_us:9.2f}  predicted "
              f"{preds[i]:9.2f}  ratio {ratios[i]:5.2f}")
    extremes = next((r for n, r in schemes if n.startswith("extremes")), None)
    if extremes:
        print("\nworst row of each class, held out at the extremes (ratio predicted/measured)")
        for cls in sorted(set(CLASSES[r.op] for r in rows)):
            members = [i for i, r in enumerate(rows) if CLASSES[r.op] == cls and extremes[i] is not None]
            if members:
                i = max(members, key=lambda j: (abs(math.log(extremes[j])), -j))
                print(f"  {cls:12s} {rows[i].label:42s} {extremes[i]:5.2f}")

    print("\npredicted for shapes the data lacks (not measured)")
    extra = [Row(op, shape, dtype, 1.0) for op, shape, dtype, _ in UNMEASURED]
    capture(extra, bundled)
    for row, pred, (*_, note) in zip(extra, predict(extra, hw), UNMEASURED):
        print(f"  {row.label:42s} {pred:9.2f} us   {note}")

    print("\nMLP forward x[4096,1024] bf16 -> Linear(1024,H) -> GELU -> Linear(H,1024): predicted "
          "time and ratio to H=128")
    reference = None
    for hidden in MLP_HIDDEN:
        total = sum(device_time(c, hw).device_time_us for c in mlp_costs(hidden))
        reference = reference or total
        print(f"  H={hidden:4d}  {total:7.2f} us  x{total / reference:5.3f}")
    print("  (measured on an H200, issue 10: H=136 is 21 % slower than H=128)")

    if args.write:
        new_text = render_profile(text, fitted, model)
        check = parse_profile(tomllib.loads(new_text), str(PROFILE_PATH))
        if [round(a, 9) for a in predict(rows, check)] != [round(a, 9) for a in preds]:
            raise SystemExit("the rewritten profile does not reproduce the fitted predictions")
        PROFILE_PATH.write_text(new_text, encoding="utf-8")
        print(f"\nwrote {PROFILE_PATH.relative_to(ROOT)}")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
