"""Writing the fitted profile: h200.toml's numbers and [sources] entries rewritten in place, every
other line (comments included) kept."""

from __future__ import annotations

import re

from .parameters import CEILINGS, TIED, Model, _get


def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}" if decimals else f"{value:.1f}"


FIT_NOTE = "fitted by benchmarks/fit_h200.py on benchmarks/data/h200_calibration.csv"
SOURCES = {
    "launch_us": f"{FIT_NOTE} (README: the smallest kernels take 0.8-1 us)",
    "dma_fixed_us": "set by benchmarks/fit_h200.py: the copy rows of benchmarks/data/h200_calibration.csv "
                    "take launch_us + bytes / bandwidth, no fixed cost beyond launch",
    "hbm_gbps": f"{FIT_NOTE}; benchmarks/data/README.md: a device-to-device copy moved about 4.3 TB/s",
    "strided_granule_bytes": f"{FIT_NOTE} on the transposing copies: the L2 bandwidth one scattered "
                             "element read costs. An H200 memory sector is 32 bytes; the fit says "
                             "more, because the L2 serves scattered 32-byte sectors at a lower byte "
                             "rate than the streaming reads gpu.l2_gbps is fitted on",
    "sbuf_mib": "NVIDIA H200: 50 MB L2 cache (plays SBUF's part; the GPU model uses gpu.l2_mib)",
    "tensor.fixed_us": f"{FIT_NOTE}: GEMM/conv/attention kernel latency beyond launch_us",
    "tensor.tflops": "benchmarks/data/README.md: about 790 TFLOP/s bf16 and 51 fp32 (TF32 off) measured; "
                     "fp8 assumed 2x bf16; conv.float32: cuDNN runs fp32 convolutions on TF32 tensor "
                     "cores (torch.backends.cudnn.allow_tf32 defaults to True), NVIDIA H200 TF32 "
                     "494.7 TFLOP/s dense x the measured bf16 fraction 790/989.4",
    "tensor.efficiency": f"{FIT_NOTE}: an SM's rate in the main loop of a GEMM, a cuDNN implicit-GEMM "
                         "convolution and fused (flash) attention, as a share of the ceiling / 132 SMs "
                         "(above 1: the ceilings were measured on whole GEMMs, wave quantization "
                         "included)",
    "vector": "132 SMs x 128 FP32 lanes at 1.98 GHz; efficiency set by benchmarks/fit_h200.py to 0.25 "
              "(assumption: an eager elementwise kernel's few instructions per element; it never binds "
              "in the data, where elementwise arithmetic is memory-bound; reductions, softmax and norms "
              "have gpu.* terms of their own); fixed_us set to 0 (launch_us is a kernel's latency)",
    "scalar": f"132 SMs x 128 FP32 lanes at 1.98 GHz; efficiency {FIT_NOTE} (activations and "
              "transcendentals: eager PyTorch kernels); fixed_us set to 0",
    "gpsimd": "132 SMs x 128 FP32 lanes at 1.98 GHz; same CUDA cores: efficiency and fixed_us set "
              "to scalar's by benchmarks/fit_h200.py (no compute-bound gather in the data)",
    "gpu.sms": "NVIDIA H200 SXM (GH100): 132 streaming multiprocessors",
    "gpu.l2_mib": "NVIDIA H200 (GH100): 50 MB L2 cache",
    "gpu.l2_gbps": f"{FIT_NOTE}: streaming bandwidth of an op whose bytes fit in L2 (the calibration "
                   "repeats each call on the same tensors)",
    "gpu.gemm_k_tile_bytes": "Hopper tensor-core GEMM kernels (CUTLASS 3 / cuBLAS sm90, TMA + wgmma) "
                             "load K in 128-byte tiles: 64 bf16/fp16, 128 fp8, 32 tf32",
    "gpu.simt_k_tile_bytes": "FP32 CUDA-core SGEMM kernels (TF32 off, PyTorch's default; e.g. "
                             "128x128x8 tiles): K tile of 8 fp32 = 32 bytes",
    "gpu.conv_k_tile_bytes": "implicit-GEMM convolution kernels (CUTLASS/cuDNN) step K through each "
                             "filter tap in 32 16-bit channels = 64 bytes; 3 input channels waste "
                             "29 of 32 (the 7x7 stem row of the data runs at ~3 % of the bf16 ceiling)",
    "gpu.feed_gbps_per_sm": f"{FIT_NOTE}: an SM's bandwidth loading GEMM operand tiles from L2",
    "gpu.kstep_us": f"{FIT_NOTE}: latency floor of one GEMM main-loop step",
    "gpu.attention_cta_us": f"{FIT_NOTE}: what a flash-attention CTA spends outside its KV steps "
                            "(loading its queries, normalizing and storing its output)",
    "gpu.stream_fraction": f"{FIT_NOTE}: share of hbm_gbps a GEMM or a reduction reaches streaming "
                           "its input (copies and elementwise kernels reach all of it)",
    "gpu.row_elements_per_us": f"{FIT_NOTE}: elements per us one SM gets through in a row-wise "
                               "kernel (softmax, layer norm: a thread block or a warp per row), rows in L2",
    "gpu.row_hbm_slowdown": f"{FIT_NOTE}: how much slower a row-wise kernel runs on rows from HBM "
                            "(latency-bound: HBM answers later than L2)",
    "gpu.row_step_us": "assumption, set by benchmarks/fit_h200.py: one round trip of a row-wise "
                       "kernel's loop (an L2 hit, a few hundred SM cycles, and the dependent "
                       "arithmetic of the elements it brings) at ~1.75 GHz: 0.25 us. No row of the "
                       "calibration data is bound by it; it sets how slowly few long rows with few "
                       "threads each (layer norm: 128) run",
    "gpu.reduce_us": f"{FIT_NOTE}: latency of a reduction kernel's tree (block reductions, the "
                     "blocks' partial results combined in global memory)",
}


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def _toml_value(value: float, decimals: int | None) -> str:
    if decimals is None:  # an integer
        return str(int(value))
    return _fmt(value, decimals)


def render_profile(text: str, data: dict, model: Model) -> str:
    """Rewrite the fitted and set numbers and their [sources] entries in h200.toml, keeping every
    other line (comments included); keys missing from a table are added at its end, a missing
    table at the end of the file (before [sources])."""
    wanted: dict[tuple[str, str], str] = {}
    decimals: dict[str, int | None] = {p.key: p.decimals for p in model.params}
    decimals.update({f"tensor.tflops.{k}": 1 for k in CEILINGS})
    decimals.update({k: None if isinstance(v, int) else 2 for k, v in model.set.items()})
    decimals.update({key: decimals[source] for key, source in TIED.items()})
    for full, places in decimals.items():
        table, _, key = full.rpartition(".")
        if table.startswith("tensor.tflops."):  # "conv.float32" is one key of [tensor.tflops]
            table, key = "tensor.tflops", full[len("tensor.tflops."):]
        value = data["tensor"]["tflops"][key] if table == "tensor.tflops" else _get(data, full)
        wanted[(table, key)] = _toml_value(value, places)
    sources = {k: '"' + v.replace('"', "'") + '"' for k, v in SOURCES.items()}

    out: list[str] = []
    table, seen, tables = "", set(), set()
    header = re.compile(r"^\s*\[([^\]]+)\]\s*$")
    assign = re.compile(r'^(\s*)("[^"]+"|[A-Za-z0-9_-]+)(\s*=\s*)(.*)$')

    def flush(current: str) -> None:
        """Append the keys still missing from table ``current``, before its trailing blank lines."""
        at = len(out)
        while at > 0 and not out[at - 1].strip():
            at -= 1
        added = []
        if current == "sources":
            added += [f"{_toml_key(key)} = {value}" for key, value in sources.items()]
            sources.clear()
        for (t, key), value in wanted.items():
            if t == current and (t, key) not in seen:
                added.append(f"{_toml_key(key)} = {value}")
                seen.add((t, key))
        out[at:at] = added

    lines = text.splitlines()
    for line in lines:
        m = header.match(line)
        if m:
            flush(table)
            table = m.group(1).strip()
            if table == "sources":  # tables the file lacks go before [sources]
                for missing in sorted({t for t, _ in wanted if t and t not in tables}):
                    out.extend([f"[{missing}]", ""])
                    flush(missing)
                    out.append("")
                    tables.add(missing)
            tables.add(table)
            out.append(line)
            continue
        m = assign.match(line)
        if m:
            key = m.group(2).strip('"')
            if (table, key) in wanted:
                out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{wanted[(table, key)]}")
                seen.add((table, key))
                continue
            if table == "sources" and key in sources:
                out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{sources.pop(key)}")
                continue
        out.append(line)
    flush(table)
    missing = [k for k in wanted if k not in seen]
    if missing or sources:
        raise SystemExit(f"h200.toml: could not place {missing or list(sources)}")
    return "\n".join(out) + "\n"
