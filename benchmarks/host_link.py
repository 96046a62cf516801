"""Derive the host-link parameters of the Trainium / Inferentia profiles from published pairs.

Run by hand (a second; no transformers needed)::

    python benchmarks/host_link.py            # print the derivation and the parameters
    python benchmarks/host_link.py --write    # ... and write them into the profiles

Data: ``benchmarks/data/host_link_pairs.csv`` (``benchmarks/data/README.md``): the NeuronPerf
encoder tables publish, for the same release, instance and batch, ``bert-base-cased``
(``AutoModel``: the FP32 hidden state ``[b, 128, 768]`` and the pooler output ``[b, 768]`` come
back to the host) and its ``-finetuned-mrpc`` twin (SequenceClassification: ``[b, 2]`` logits).
Same encoder, same inputs: the difference of their P50s is the cost of returning the extra
output, ``delta(b) = host_transfer_us + bytes(b) / host_d2h_gbps`` (one more output tensor).
Per release with both batch 1 and batch 16, two equations give the rate (the slope) and the
fixed cost per tensor (the intercept); each profile takes the median over its releases:

* ``host_d2h_gbps``: the effective device-to-host rate of an output (device write, DMA to the
  host, the framework's copy into the output tensor);
* ``host_transfer_us``: the fixed cost per tensor copied (the intercepts straddle zero: the
  pairs show none beyond their noise; a negative median is taken as 0);
* ``host_h2d_gbps``: no published pair isolates the inputs (an encoder's are 1 KiB per
  sequence, a ResNet's 602 KB per image with nothing to difference it against): taken equal to
  ``host_d2h_gbps`` (the same PCIe link and runtime copy), an assumption;
* ``host_mmap_bytes``: glibc's largest dynamic mmap threshold, ``DEFAULT_MMAP_THRESHOLD_MAX`` =
  4 * 1024 * 1024 * sizeof(long) = 32 MiB on 64-bit Linux (mallopt(3), M_MMAP_THRESHOLD): an
  allocation above it is always a fresh mapping, whose pages the output copy faults in (and the
  kernel zeroes) on every call, where smaller outputs reuse freed heap memory;
* ``host_fresh_page_gbps``: the rate of that faulting, from the one published figure with outputs
  above it: ``xlm-roberta-base`` MaskedLM (128 MB of FP32 logits per sequence) at batch 1 and 8
  on trn1 (Neuron 2.27): per-sequence slope ``bytes / host_d2h_gbps + bytes / host_fresh_page_gbps``
  (the slope also holds the encoder's per-sequence device time, about 1 ms of 43: left in).

trn2 and trn3 take trn1's values (no pair is published for them; their LLM rows move a few
hundred KiB per call). ``graph_execution_us`` (the host call that remains) is re-fitted by
``python benchmarks/fit_trn.py --only graph_execution_us`` with these in place.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "host_link_pairs.csv"
HARDWARE = ROOT / "pytest_neuronprof" / "costmodel" / "hardware"
PROFILES = {"trn1": "trn1", "inf2": "inf2", "trn2": "trn1", "trn2-lnc1": "trn1", "trn3": "trn1",
            "trn3-lnc1": "trn1"}  # profile -> the instance whose pairs it takes
MMAP_BYTES = 4 * 1024 * 1024 * 8  # glibc DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (sizeof(long) = 8)
HIDDEN, SEQ, LABELS, FP32 = 768, 128, 2, 4  # bert-base-cased at seq 128; the mrpc head's 2 labels


def extra_output_bytes(batch: int) -> int:
    """AutoModel's outputs (hidden state and pooler output) minus SequenceClassification's (2
    logits), FP32, of ``batch`` sequences of bert-base-cased."""
    return batch * FP32 * (SEQ * HIDDEN + HIDDEN - LABELS)


@dataclass
class Release:
    profile: str
    release: str
    gbps: float
    transfer_us: float


def pairs(rows: list[dict[str, str]]) -> list[Release]:
    """Per (profile, release) with the b1 and b16 deltas: the slope (GB/s) and intercept (us)."""
    deltas: dict[tuple[str, str], dict[int, float]] = {}
    for r in rows:
        if r["model"] == "bert-base-cased" and r["delta_ms"]:
            deltas.setdefault((r["profile"], r["release"]), {})[int(r["batch"])] = float(r["delta_ms"])
    out = []
    for (profile, release), by_batch in deltas.items():
        if {1, 16} <= set(by_batch):
            slope_ms_per_byte = (by_batch[16] - by_batch[1]) / (extra_output_bytes(16) - extra_output_bytes(1))
            intercept_ms = by_batch[1] - extra_output_bytes(1) * slope_ms_per_byte
            out.append(Release(profile, release, 1e-6 / slope_ms_per_byte, intercept_ms * 1e3))
    return out


def fresh_page_gbps(rows: list[dict[str, str]], d2h_gbps: float) -> tuple[float, float]:
    """(the per-sequence effective rate, the fault-in rate) from the XLM-R batch pair."""
    xlmr = {int(r["batch"]): r for r in rows if r["model"] == "xlm-roberta-base" and r["profile"] == "trn1"}
    small, large = xlmr[1], xlmr[8]
    ms = float(large["automodel_p50_ms"]) - float(small["automodel_p50_ms"])
    nbytes = int(large["output_bytes"]) - int(small["output_bytes"])
    effective = nbytes / ms * 1e-6  # GB/s
    return effective, 1 / (1 / effective - 1 / d2h_gbps)


def _round(value: float) -> float:
    return float(f"{value:.3g}")


def derive() -> tuple[dict[str, dict[str, float]], list[str]]:
    with open(DATA, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    lines = [f"{'profile':<7} {'release':<8} {'GB/s (slope)':>13} {'us per tensor (intercept)':>26}"]
    releases = pairs(rows)
    per_instance: dict[str, dict[str, float]] = {}
    for instance in ("trn1", "inf2"):
        mine = [r for r in releases if r.profile == instance]
        for r in mine:
            lines.append(f"{r.profile:<7} {r.release:<8} {r.gbps:>13.3f} {r.transfer_us:>26.1f}")
        gbps = statistics.median(r.gbps for r in mine)
        transfer = max(0.0, statistics.median(r.transfer_us for r in mine))
        lines.append(f"{instance:<7} {'median':<8} {gbps:>13.3f} {statistics.median(r.transfer_us for r in mine):>26.1f}"
                     f"  ({len(mine)} releases)")
        per_instance[instance] = {"gbps": gbps, "transfer_us": transfer}
    effective, fresh = fresh_page_gbps(rows, per_instance["trn1"]["gbps"])
    lines.append(f"xlm-roberta-base MaskedLM b1 -> b8 on trn1.32xlarge: {effective:.3f} GB/s per sequence; "
                 f"fresh pages faulted in at 1 / (1 / {effective:.3f} - 1 / {per_instance['trn1']['gbps']:.3f}) "
                 f"= {fresh:.3f} GB/s")
    params: dict[str, dict[str, float]] = {}
    for profile, instance in PROFILES.items():
        got = per_instance[instance]
        params[profile] = {"host_h2d_gbps": _round(got["gbps"]), "host_d2h_gbps": _round(got["gbps"]),
                           "host_transfer_us": round(got["transfer_us"], 1), "host_mmap_bytes": float(MMAP_BYTES),
                           "host_fresh_page_gbps": _round(fresh)}
    return params, lines


def write(params: dict[str, dict[str, float]]) -> None:
    for profile, values in params.items():
        path = HARDWARE / f"{profile}.toml"
        text = path.read_text(encoding="utf-8")
        for key, value in values.items():
            shown = str(int(value)) if key == "host_mmap_bytes" else f"{value:g}"
            text, n = re.subn(rf"(?m)^{key} = [-+0-9.eE]+$", f"{key} = {shown}", text)
            if n != 1:
                raise SystemExit(f"{path}: expected one '{key} = ...' line, found {n}")
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the parameters into the profiles")
    args = parser.parse_args(argv)
    params, lines = derive()
    print("Host link from NeuronPerf's AutoModel / SequenceClassification pairs (bert-base-cased, P50 deltas)")
    print("\n".join(lines))
    print("\nparameters per profile")
    for profile, values in params.items():
        print(f"  {profile:<10} " + "  ".join(
            f"{k} = {int(v) if k == 'host_mmap_bytes' else f'{v:g}'}" for k, v in values.items()))
    if args.write:
        write(params)
    return 0


if __name__ == "__main__":
    sys.exit(main())
