"""Every default of the plugin, the gate and the `neuronprof` command, written once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import ConfigError
from .vocabulary import AUTO_CAST_NONE, BACKENDS, CPU, CUDA, EAGER, NEURON, SIMULATED

DEFAULT_BACKEND = SIMULATED
DEFAULT_HARDWARE = "trn2"
DEFAULT_EXECUTION = EAGER
# What neuronx-cc does by default since Neuron 2.27 (its --auto-cast; before 2.27: matmult).
DEFAULT_AUTO_CAST = AUTO_CAST_NONE

# The gate (gate.compare.GatePolicy's defaults).
DEFAULT_THRESHOLD = 0.10  # relative increase that counts as a regression
DEFAULT_FLOOR_US = 1.0  # an increase must also exceed this: about one op's launch cost
DEFAULT_HOTSPOTS = 10  # at most this many top ops are gated ...
DEFAULT_COVERAGE = 0.90  # ... those that make this share of the time ...
DEFAULT_MIN_SHARE = 0.05  # ... plus any op with at least this share
DEFAULT_ALPHA = 0.01  # significance level of measured backends
# Measured backends: an op's change must also move the test's total by at least this share of
# the baseline's total. Small ops are the noisiest (a 50 us op doubling on a busy machine), and
# a change that small in one op is not what a gate on timings can judge.
DEFAULT_MATERIAL_SHARE = 0.05
# Device memory (the simulated backend's peak of live bytes, exact): a peak that grows by more
# than this share of the baseline's, and by at least the floor, is a regression. Tensors smaller
# than the floor (scalars, masks, small buffers) coming and going around the peak are not.
DEFAULT_MEMORY_THRESHOLD = 0.05
DEFAULT_MEMORY_FLOOR_BYTES = 64 * 1024


@dataclass(frozen=True)
class BackendFacts:
    """One backend as every layer sees it: its defaults, what its times are, what it needs.
    The plugin's options (help text included), the gate's policy and the profiler read these;
    nothing restates them."""

    name: str
    label: str  # what its device_time_us is: help texts and each result's note
    threshold: float  # the gate's threshold when neither the marker nor an option says
    rounds: int  # measured rounds per test, when neither the marker nor an option says
    warmup: int  # warmup rounds before them
    measured: bool = True  # timed by torch.profiler: noisy, gated with statistics
    engine: str = ""  # the engine its records run on (measured: one per backend)
    device: str | None = None  # torch's name of the device its times are on; None: the CPU's
    activities: tuple[str, ...] = ("CPU",)  # the torch.profiler.ProfilerActivity it records
    requires: str | None = None  # what a machine needs to run it (None: any machine)
    threads: bool = False  # --neuron-cpu-threads applies: it measures on this host's threads
    names_chip: bool = False  # NeuronConfig.hardware names its chip (checked against the cores)


# Thresholds: CPU time on a shared machine drifts between sessions more than the 10 % that
# suits exact numbers: on 2 shared cores the per-op best rounds of unchanged code moved by up
# to 20-26 % between pytest sessions (benchmarks/noise.py), which significance and materiality
# absorbed at 15 %, not always at 10 %. cuda and neuron keep 10 %: device kernels do not share
# the host's noise (not measured here).
# Rounds and warmup: the simulated backend is exact: one round, no warmup, always. Measured
# backends: warmup rounds absorb one-time costs (the profiler's own start-up, allocator growth,
# lazy init, compilation); the measured rounds feed the significance test, whose smallest
# p-value with r rounds a side is 1 / C(2r, r) (r = 5: 0.004), so at least
# min_measured_rounds(alpha) are required (5 at 0.01). Neuron: its documentation asks for 3+
# warmup iterations before a profiled one.
BACKEND_TABLE: dict[str, BackendFacts] = {facts.name: facts for facts in (
    BackendFacts(SIMULATED, "the cost model's time of each op, exact", DEFAULT_THRESHOLD, 1, 0,
                 measured=False, device=NEURON, names_chip=True),
    BackendFacts(CPU, "self CPU time of each op", 0.15, 20, 3, engine="CPU", threads=True),
    BackendFacts(CUDA, "self device time of each op: its own kernels", DEFAULT_THRESHOLD, 20, 5,
                 engine="CUDA", device=CUDA, activities=("CPU", "CUDA"), requires="a CUDA GPU"),
    BackendFacts(NEURON, "self device time of each op: its own kernels", DEFAULT_THRESHOLD, 10, 3,
                 engine="Neuron", device=NEURON, activities=("CPU", "PrivateUse1"),
                 requires="TorchNeuron (torch_neuronx)", names_chip=True),
)}
DEFAULT_CPU_THREADS = 1  # the cpu backend measures single-threaded unless told otherwise


def backend_facts(name: str) -> BackendFacts:
    """The table's row of backend ``name``. Raises ConfigError naming it and the valid ones."""
    try:
        return BACKEND_TABLE[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown backend {name!r}; valid choices: {', '.join(BACKENDS)}") from None


def per_backend(value: Callable[[BackendFacts], object], measured_only: bool = False) -> str:
    """A default of every backend (or every measured one), from the table, for a help text:
    ``"simulated 10%, cpu 15%, cuda 10%, neuron 10%"``."""
    return ", ".join(f"{facts.name} {value(facts)}" for facts in BACKEND_TABLE.values()
                     if facts.measured or not measured_only)

DEFAULT_BASELINE_DIR = "baselines"  # under the rootdir
# Baseline and report files above this size are refused unread (--neuron-baseline-max-size,
# `neuronprof --max-size`): a file from a pull request may be a 50 GB blob or a link to
# /dev/zero. The largest real one measured held 1.2 M ops in 211 MB, well below it.
DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024  # 256 MiB
# A baseline entry's reason: a sentence and a link; a file from a pull request may hold anything
MAX_ENTRY_REASON_CHARS = 500
DEFAULT_HTML_DIR = "neuron-html"  # `neuronprof report -o`


# Set by `neuronprof continuous` for the run it gates: the ref, commit and subject (one a line) of
# the base it re-simulated, which every output names (and no output suggests --neuron-baseline there).
RESIMULATED_BASE_VARIABLE = "NEURONPROF_RESIMULATED_BASE"


# Which CI run a --neuron-report belongs to (its "plugin" block), so that `neuronprof
# check-report` in the same job can tell the plugin's report of this run from a file the change
# brought or another tool wrote: NEURONPROF_RUN_ID when the job sets it, else GitHub Actions'
# run id and attempt; "" where neither is set (then the check cannot tell runs apart).
RUN_ID_VARIABLE = "NEURONPROF_RUN_ID"


def run_identity() -> str:
    import os

    given = os.environ.get(RUN_ID_VARIABLE, "").strip()
    if given:
        return given
    github = os.environ.get("GITHUB_RUN_ID", "").strip()
    return f"{github}.{os.environ.get('GITHUB_RUN_ATTEMPT', '1').strip()}" if github else ""
