"""The plugin's options: declared once (flag, ini twin, help), read once into ``Options``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..costmodel.profiles import available_hardware
from ..defaults import (DEFAULT_BACKEND, DEFAULT_BASELINE_DIR, DEFAULT_CPU_THREADS,
                        DEFAULT_FLOOR_US, DEFAULT_HARDWARE, DEFAULT_THRESHOLDS)
from ..gate.compare import GatePolicy
from ..values import parse_count, parse_threshold, validate_choice
from ..vocabulary import BACKENDS, SIMULATED

OPTIONS = (
    # (flag, ini name, ini type, help)
    ("--neuron-baseline", "neuron_baseline", "bool",
     "record or update the baselines of the profiled tests that run (they pass)"),
    ("--neuron-baseline-dir", "neuron_baseline_dir", "string",
     f"directory of baseline files (default: {DEFAULT_BASELINE_DIR}/ under the rootdir)"),
    ("--neuron-backend", "neuron_backend", "string",
     f"profiler backend: {SIMULATED} (default, exact), or measured by torch.profiler: cpu, cuda, "
     "neuron (needs torch_neuronx)"),
    ("--neuron-hardware", "neuron_hardware", "string",
     f"hardware profile of the simulated backend (default: {DEFAULT_HARDWARE}); names the chip "
     "of the neuron backend"),
    ("--neuron-rounds", "neuron_rounds", "string",
     "measured backends: rounds per test, compared with the baseline's for significance "
     "(default: cpu 20, cuda 20, neuron 10; the simulated backend always runs once)"),
    ("--neuron-warmup", "neuron_warmup", "string",
     "measured backends: warmup rounds before them, not compared (default: cpu 3, cuda 5, neuron 3)"),
    ("--neuron-cpu-threads", "neuron_cpu_threads", "string",
     "cpu backend: torch's intra-op threads while a region is measured, 0 to leave them "
     f"(default: {DEFAULT_CPU_THREADS}, the steadiest on shared machines)"),
    ("--neuron-threshold", "neuron_threshold", "string",
     "relative increase that counts as a regression, e.g. 0.1 or 10% (default: 10%; 15% on the "
     "cpu backend)"),
    ("--neuron-floor-us", "neuron_floor_us", "string",
     f"an increase must also exceed this many microseconds to count (default: {DEFAULT_FLOOR_US})"),
    ("--neuron-strict", "neuron_strict", "bool", "fail profiled tests that have no baseline"),
    ("--neuron-report", "neuron_report", "string", "write a JSON report of the session here"),
    ("--neuron-trace-dir", "neuron_trace_dir", "string",
     "write a Chrome trace per profiled test into this directory"),
    ("--neuron-html", "neuron_html", "string",
     "write a self-contained HTML page of the session (index.html) into this directory"),
)


@dataclass(frozen=True)
class Options:
    record: bool
    baseline_dir: Path
    backend: str
    hardware: str
    policy: GatePolicy
    strict: bool
    report: Path | None
    trace_dir: Path | None
    html: Path | None = None  # --neuron-html: directory of the session's HTML page
    rounds: int | None = None  # --neuron-rounds; None: the backend's default
    warmup: int | None = None  # --neuron-warmup; None: the backend's default
    cpu_threads: int | None = DEFAULT_CPU_THREADS  # --neuron-cpu-threads; None (0): unchanged

    @property
    def measured(self) -> bool:
        return self.backend != SIMULATED


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuronprof", "device-time profiling and regression gate (pytest-neuronprof)")
    for flag, ini, kind, help_text in OPTIONS:
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, dest=ini, help=help_text)
        else:
            group.addoption(flag, action="store", default=None, dest=ini, metavar="VALUE", help=help_text)
        parser.addini(ini, help=help_text, type=kind, default=None)


def _option(config: pytest.Config, name: str) -> tuple[Any, Path]:
    """An option's value and the folder a relative path in it is relative to."""
    value = config.getoption(name)
    if value is not None:
        return value, config.invocation_params.dir
    return config.getini(name), config.rootpath


def _path_option(config: pytest.Config, name: str, default: Path | None) -> Path | None:
    value, base = _option(config, name)
    return (base / value) if value else default


def _given(value: Any) -> bool:
    return value not in (None, "")


def read_options(config: pytest.Config) -> Options:
    """Raises ConfigError naming the option (and its ini twin) that is wrong."""
    threshold, _ = _option(config, "neuron_threshold")
    floor, _ = _option(config, "neuron_floor_us")
    rounds, _ = _option(config, "neuron_rounds")
    warmup, _ = _option(config, "neuron_warmup")
    threads, _ = _option(config, "neuron_cpu_threads")
    backend = _option(config, "neuron_backend")[0] or DEFAULT_BACKEND
    hardware = _option(config, "neuron_hardware")[0] or DEFAULT_HARDWARE
    backend = validate_choice("--neuron-backend (ini neuron_backend)", backend, BACKENDS)
    threads = (parse_count("--neuron-cpu-threads (ini neuron_cpu_threads)", threads, 0)
               if _given(threads) else DEFAULT_CPU_THREADS)
    return Options(
        record=bool(_option(config, "neuron_baseline")[0]),
        baseline_dir=_path_option(config, "neuron_baseline_dir", config.rootpath / DEFAULT_BASELINE_DIR),
        backend=backend,
        hardware=validate_choice("--neuron-hardware (ini neuron_hardware)", hardware, available_hardware()),
        policy=GatePolicy(
            threshold=parse_threshold("--neuron-threshold (ini neuron_threshold)", threshold)
            if _given(threshold) else DEFAULT_THRESHOLDS[backend],
            floor_us=parse_threshold("--neuron-floor-us (ini neuron_floor_us)", floor)
            if _given(floor) else DEFAULT_FLOOR_US,
        ),
        strict=bool(_option(config, "neuron_strict")[0]),
        report=_path_option(config, "neuron_report", None),
        trace_dir=_path_option(config, "neuron_trace_dir", None),
        html=_path_option(config, "neuron_html", None),
        rounds=parse_count("--neuron-rounds (ini neuron_rounds)", rounds, 1) if _given(rounds) else None,
        warmup=parse_count("--neuron-warmup (ini neuron_warmup)", warmup, 0) if _given(warmup) else None,
        cpu_threads=threads or None,
    )
