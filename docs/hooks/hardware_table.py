"""MkDocs hook: replace ``<!-- hardware-table -->`` in a page with a table of the hardware
profiles, read at build time from ``pytest_neuronprof/costmodel/hardware/*.toml`` (the files the
cost model loads), so the documentation can never disagree with them.

Registered under ``hooks:`` in mkdocs.yml. Per profile: its description, TensorE's rate per
dtype times the number of arrays in the (logical) core, the lanes and clocks of VectorE and
ScalarE (wider for 2-byte dtypes in one-input instructions where the file says so), HBM
per core (its memory, which the memory gate checks a test's peak against, and bandwidth) and
SBUF (a GPU's L2).
A value whose ``[sources]`` entry says it was fitted is marked "(fitted)".
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, as the package itself uses on 3.10
    import tomli as tomllib

MARKER = "<!-- hardware-table -->"
HARDWARE_DIR = Path("pytest_neuronprof") / "costmodel" / "hardware"
ORDER = ("trn1", "inf2", "trn2", "trn2-lnc1", "trn3", "trn3-lnc1", "h200")  # others follow, sorted


def _num(value: float) -> str:
    return f"{value:g}"


def _fitted(profile: dict[str, Any], key: str) -> str:
    source = str(profile.get("sources", {}).get(key, ""))
    return " (fitted)" if source.startswith("fitted") else ""


def _lanes(engine: dict[str, Any]) -> str:
    lanes = _num(engine["lanes"])
    if engine.get("fast_lanes"):
        lanes += f" ({_num(engine['fast_lanes'])} bf16, one input)"
    return f"{lanes} x {_num(engine['clock_ghz'])}"


def _row(profile: dict[str, Any]) -> str:
    tensor = profile["tensor"]
    arrays = int(tensor.get("arrays", 1))
    tflops = tensor["tflops"]
    rates = " / ".join(_num(tflops[dtype] * arrays) for dtype in ("bfloat16", "float8", "float32"))
    gpu = profile.get("gpu")
    if gpu is not None:
        engines = f"CUDA cores: {_num(gpu['sms'])} SMs, {_lanes(profile['vector'])}"
        memory = (f"L2 {_num(gpu['l2_mib'])} MiB, {_num(gpu['l2_gbps'])} GB/s"
                  f"{_fitted(profile, 'gpu.l2_gbps')}")
    else:
        engines = f"{_lanes(profile['vector'])} / {_lanes(profile['scalar'])}"
        memory = f"{_num(profile['sbuf_mib'])} MiB"
    hbm = (f"{_num(round(profile['hbm_gib_per_core'], 1))} GiB, "
           f"{_num(profile['hbm_gbps'])} GB/s{_fitted(profile, 'hbm_gbps')}")
    return (f"| `{profile['name']}` | {profile['description']} | {_num(profile['cores_per_chip'])} "
            f"| {rates} | {engines} | {hbm} | {memory} |")


def hardware_table(root: Path) -> str:
    profiles = {}
    for path in sorted((root / HARDWARE_DIR).glob("*.toml")):
        with path.open("rb") as file:
            data = tomllib.load(file)
        profiles[data["name"]] = data
    if not profiles:
        raise RuntimeError(f"hardware_table hook: no profiles in {root / HARDWARE_DIR}")
    names = [n for n in ORDER if n in profiles] + sorted(n for n in profiles if n not in ORDER)
    lines = [
        "| profile | core | cores per chip | TensorE bf16 / fp8 / fp32 TFLOP/s | "
        "VectorE / ScalarE lanes x GHz | HBM per core (memory, bandwidth) | SBUF |",
        "|---|---|---|---|---|---|---|",
        *(_row(profiles[name]) for name in names),
    ]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    root = Path(config["config_file_path"]).resolve().parent
    return markdown.replace(MARKER, hardware_table(root))
