"""Overhead of the simulated backend's capture, against a bare run of the same step, beside the
references: a do-nothing dispatch mode, torch.profiler, and an installed plugin's cost to a suite
without marked tests.

Run by hand (several minutes; the Llama case needs transformers)::

    python benchmarks/overhead.py [--reps N] [--threads T] [--only layer] [--suite-pairs 15]

Each case runs its step bare and profiled, interleaved in one process after a warm-up, many
times; the table gives the medians of both and the median of the per-repetition ratios
profiled/bare. "Profiled" is everything a user waits for:
``with NeuronProfiler(NeuronConfig()) as prof: step()`` and ``prof.result.total_device_time_us``,
i.e. construction, the region, stop() and the costing of every op (but no key_averages() table).
The per-op overhead is (median profiled - median bare) / ops, with ops the number of records in
the result.

Variants of a case run in a rotating order, so that a slow patch of a noisy machine hits them
all alike. Rows:

- ``neuron``: repeated regions of the same step, as the steps of a loop or the tests of a suite
  that use the same shapes see them: costs are shared between regions (and so is a graph's
  schedule, for a region equal to one costed before).
- ``neuron, cold costs``: the same with the shared costs emptied before every region
  (``clear_cost_cache``), as the first region with new shapes sees it (every distinct call goes
  through the cost model, a graph is scheduled).
- ``neuron, no memory``: ``NeuronConfig(profile_memory=False)``, without device-memory tracking
  (storage lifetimes); the line after the table gives what tracking costs: the median of the
  per-repetition ratios ``neuron`` / ``neuron, no memory`` (target: at most 1.05).
- ``no-op dispatch mode``: a ``TorchDispatchMode`` whose ``__torch_dispatch__`` only runs each op,
  the floor of any profiler that captures ATen ops through a Python dispatch mode, as the
  simulated backend does. Timed in a case of its own (``dispatch floor``): interleaved with the
  rows above, a second dispatch-mode class raised their ratios by about 10 %.
- ``torch.profiler`` and ``torch.profiler, shapes`` (``record_shapes=True``, what the simulator
  records of each op): ``profile(activities=[ProfilerActivity.CPU])`` around the same step, in a
  case of its own too: a bare run right after one was about 30 % slower (1.25 ms against 0.95 ms
  for the encoder step), which lowered every ratio of the case it ran in.
- ``bare, neuron device`` and ``neuron, neuron device``: the Llama-2-7B layer cases' step with
  the layer and its input on the simulated neuron device (``--neuron-device-alias``) instead of
  meta, bare and profiled; the lines after the table give each against the same on meta (the
  median of the per-repetition ratios). Every row's ratio is against the bare run on meta.
- ``where the time goes`` (lines after the table): the encoder's profiled step taken apart,
  each part against the bare step: the no-op dispatch mode, the module hooks beside it, the
  capture (the region without memory tracking, less those), memory tracking in the region, and
  the phases before the region (making and entering the profiler) and after it (costing).
- ``plugin installed``: ``python -m pytest -q`` on 400 trivial tests (no marked test) against
  the same with ``-p no:neuronprof``, whole processes in pairs (``--suite-pairs``), timed with
  ``os.wait4``: the ratio of the pairs' wall times, and the CPU ratio of their user + system time.

``cpu ratio`` is the same ratio on the thread's CPU time (time.thread_time): on a shared
machine other processes preempt long runs more often than short ones, which inflates the wall
ratio; the CPU-time ratio does not see that.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402
from pytest_neuronprof.profiler.backends import simulated  # noqa: E402


# -- the models ---------------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention (SDPA) and a GELU MLP."""

    def __init__(self, d_model: int = 256, heads: int = 4, hidden: int = 1024) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, hidden)
        self.down = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def block_case() -> Callable[[], object]:
    """d_model 256, batch 8, seq 256, bf16, forward under no_grad."""
    torch.manual_seed(0)
    model = Block().to(torch.bfloat16).eval()
    x = torch.randn(8, 256, 256, dtype=torch.bfloat16)

    def step() -> object:
        with torch.no_grad():
            return model(x)

    return step


def encoder_case() -> Callable[[], object]:
    """nn.TransformerEncoderLayer(64, 4, 128), seq 16, batch 2, fp32, forward and backward."""
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    x = torch.randn(2, 16, 64)

    def step() -> object:
        model.zero_grad(set_to_none=True)
        loss = model(x).sum()
        loss.backward()
        return loss

    return step


def encoder_compiled_case() -> Callable[[], object]:
    """The encoder case compiled with torch.compile(backend="neuron") and warmed up: bare runs
    its AOTAutograd graphs unprofiled; profiled, each graph's ops are captured and costed as a
    compiled graph. Its row goes beside the eager encoder's."""
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    fast = torch.compile(model, backend="neuron")
    x = torch.randn(2, 16, 64)

    def step() -> object:
        model.zero_grad(set_to_none=True)
        loss = fast(x).sum()
        loss.backward()
        return loss

    step()  # compiled outside the region; the first profiled run compiles once more (the guard)
    return step


def llama_case() -> Callable[[], object]:
    """Llama-2-7B (transformers, the full 32 layers), bf16, forward of 2048 tokens on meta
    tensors, under inference_mode: nothing is allocated or computed, so the bare run is the
    model's Python and dispatch, and the profiled one adds capture and costing."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import published_workloads as pw

    from transformers import DynamicCache

    model, config, _ = pw.decoder_model("llama-2-7b", torch.bfloat16, 1, False)
    ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
    cache = pw._cache_kwarg(model)  # "cache" in newer transformers, "past_key_values" before

    def step() -> object:
        # As benchmarks/published_workloads.py's prefill: a fresh cache and no attention_mask
        # (transformers checks masks with .item(), which meta refuses; all-ones changes nothing).
        with torch.inference_mode():
            return model(input_ids=ids, **{cache: DynamicCache(config=config)}, use_cache=True,
                         logits_to_keep=1)

    return step


def layer_case(training: bool) -> Callable[[], object]:
    """One Llama-2-7B decoder layer (examples/models.py: d 4096, 32 heads, MLP 11008), bf16,
    2048 tokens, built on meta: a forward under inference_mode, or (``training``) a forward and
    backward. The step on meta; ``step.on_neuron`` is the same step with the layer moved to the
    simulated neuron device (``--neuron-device-alias``) and its input made there, as a test
    written for Trainium has them. Turning the device on cannot be undone in a process: these
    cases run last."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from models import LlamaLayer

    from pytest_neuronprof.profiler import neuron_device

    neuron_device.enable()

    def build(device: str) -> Callable[[], object]:
        with torch.device("meta"):
            layer = LlamaLayer().to(torch.bfloat16)
        layer = layer.to(device)
        x = torch.randn(1, 2048, 4096, dtype=torch.bfloat16, device=device)

        def step() -> object:
            if training:
                layer.zero_grad(set_to_none=True)
                loss = layer(x).sum()
                loss.backward()
                return loss
            with torch.inference_mode():
                return layer(x)

        return step

    step = build("meta")
    step.on_neuron = build("neuron")  # type: ignore[attr-defined]
    return step


# -- the variants -------------------------------------------------------------------------------

def bare(step: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        step()

    return run


def neuron(step: Callable[[], object], cold: bool = False, execution: str = "eager",
           profile_memory: bool = True) -> Callable[[], int]:
    # getattr: the benchmark also runs against a simulated.py without the shared cost cache
    clear = getattr(simulated, "clear_cost_cache", None) if cold else None
    config = {} if profile_memory else {"profile_memory": False}  # also runs on older configs

    def run() -> int:
        if clear is not None:
            clear()
        with NeuronProfiler(NeuronConfig(execution=execution, **config)) as prof:
            step()
        prof.result.total_device_time_us  # what a test's verdict reads first
        return len(prof.result.records)

    return run


def torch_cpu(step: Callable[[], object], shapes: bool = False) -> Callable[[], None]:
    def run() -> None:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes):
            step()

    return run


class NoOpMode(TorchDispatchMode):
    """Runs every op and does nothing else."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # As the plugin's own mode: torch's default (True) imports torch._dynamo and wraps every
        # op, which slowed every later row of this run too (the encoder ratios rose ~10 %).
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def noop_mode(step: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with NoOpMode():
            step()

    return run


# What each variant name makes of a case's step.
VARIANTS: dict[str, Callable[[Callable[[], object]], Callable[[], object]]] = {
    "neuron": neuron,
    "neuron, cold costs": lambda step: neuron(step, cold=True),
    "neuron, no memory": lambda step: neuron(step, profile_memory=False),
    "neuron, graph": lambda step: neuron(step, execution="graph"),
    "neuron, graph, cold costs": lambda step: neuron(step, cold=True, execution="graph"),
    "no-op dispatch mode": noop_mode,
    "torch.profiler": torch_cpu,
    "torch.profiler, shapes": lambda step: torch_cpu(step, shapes=True),
    # the layer_case steps on the simulated neuron device
    "bare, neuron device": lambda step: bare(step.on_neuron),  # type: ignore[attr-defined]
    "neuron, neuron device": lambda step: neuron(step.on_neuron),  # type: ignore[attr-defined]
}


# -- a suite without marked tests -----------------------------------------------------------------

TRIVIAL_FILES, TRIVIAL_TESTS = 40, 10  # 400 tests


def trivial_suite(folder: Path) -> None:
    """400 trivial tests, none marked, in ``folder``."""
    for i in range(TRIVIAL_FILES):
        lines = [f"def test_{j}():\n    assert {i} + {j} == {i + j}\n" for j in range(TRIVIAL_TESTS)]
        (folder / f"test_t{i:02d}.py").write_text("\n".join(lines))
    (folder / "pytest.ini").write_text("[pytest]\n")


def whole_run(command: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, user + system CPU seconds) of one process, output discarded."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}")
    return wall, usage.ru_utime + usage.ru_stime


def suite_case(pairs: int) -> dict[str, tuple[list[float], list[float]]]:
    """Wall and CPU seconds of ``pytest -q`` on the trivial suite with the plugin ("plugin
    installed") and without it ("bare": ``-p no:neuronprof``), in pairs, the order alternating;
    one warm-up pair."""
    runs: dict[str, tuple[list[float], list[float]]] = {"bare": ([], []), "plugin installed": ([], [])}
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    commands = {"bare": base + ["-p", "no:neuronprof"], "plugin installed": base}
    with tempfile.TemporaryDirectory(prefix="neuronprof-suite-") as tmp:
        folder = Path(tmp)
        trivial_suite(folder)
        for i in range(pairs + 1):
            order = ["bare", "plugin installed"] if i % 2 else ["plugin installed", "bare"]
            for name in order:
                wall, cpu = whole_run(commands[name], folder)
                if i:
                    runs[name][0].append(wall)
                    runs[name][1].append(cpu)
    return runs


def plugin_import_ms(runs: int) -> float:
    """The median over ``runs`` fresh processes of what importing the plugin module costs after
    pytest (``python -X importtime``, its cumulative microseconds): what a session without
    marked tests imports of the plugin."""
    found = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                               "import pytest; import pytest_neuronprof.plugin"],
                              capture_output=True, text=True, check=True)
        line = next(line for line in done.stderr.splitlines()
                    if line.rstrip().endswith("| pytest_neuronprof.plugin"))
        found.append(int(line.split("|")[1]) / 1e3)
    return statistics.median(found)


# -- timing -------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet_stderr():
    """torch.profiler's kineto prints two lines per session on fd 2; keep the table readable."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def measure(variants: dict[str, Callable[[], object]], reps: int,
            warmup: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds per run of each variant; order rotated each repetition."""
    names = list(variants)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    clock, thread_clock = time.perf_counter, time.thread_time
    for i in range(warmup + reps):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            fn = variants[name]
            start, start_cpu = clock(), thread_clock()
            fn()
            elapsed, elapsed_cpu = clock() - start, thread_clock() - start_cpu
            if i >= warmup:
                wall[name].append(elapsed)
                cpu[name].append(elapsed_cpu)
    return wall, cpu


def median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(num, den))


# -- where the time goes ------------------------------------------------------------------------

def with_module_hooks(step: Callable[[], object]) -> Callable[[], None]:
    """The no-op dispatch mode with the profiler's module hooks installed: what naming each
    op's module costs beside the floor."""
    from pytest_neuronprof.profiler.modules import ModuleTracker

    def run() -> None:
        tracker = ModuleTracker(tag_autograd=True)
        tracker.install()
        try:
            with NoOpMode():
                step()
        finally:
            tracker.remove()

    return run


def phases(step: Callable[[], object], profile_memory: bool) -> Callable[[], tuple[float, ...]]:
    """The ``neuron`` variant timed in its three phases: making and entering the profiler, the
    region (the step), and leaving it (costing the records and the memory) with the total read."""
    def run() -> tuple[float, ...]:
        clock = time.perf_counter
        t0 = clock()
        prof = NeuronProfiler(NeuronConfig(profile_memory=profile_memory))
        prof.__enter__()
        t1 = clock()
        step()
        t2 = clock()
        prof.__exit__(None, None, None)
        prof.result.total_device_time_us
        t3 = clock()
        return t1 - t0, t2 - t1, t3 - t2

    return run


def where_the_time_goes(reps: int) -> list[str]:
    """The encoder case's profiled step taken apart, its parts timed interleaved in one process
    (medians over ``reps``, each against the bare step's median): the dispatch floor, the module
    hooks, the capture (the region without memory tracking, less the floor and the hooks),
    memory tracking in the region, and the phases before and after it."""
    step = encoder_case()
    ops = neuron(step)()
    timed = {"bare": bare(step), "floor": noop_mode(step), "hooks": with_module_hooks(step)}
    split = {"memory": phases(step, True), "no memory": phases(step, False)}
    wall: dict[str, list[float]] = {name: [] for name in timed}
    parts: dict[str, list[tuple[float, ...]]] = {name: [] for name in split}
    gc.collect()
    warmup = max(10, reps // 10)
    for i in range(warmup + reps):
        counted = i >= warmup
        for name, run in timed.items():
            start = time.perf_counter()
            run()
            if counted:
                wall[name].append(time.perf_counter() - start)
        for name, run in split.items():
            times = run()
            if counted:
                parts[name].append(times)
    med = {name: statistics.median(times) for name, times in wall.items()}
    for name, times in parts.items():
        for phase, values in zip(("start", "region", "stop"), zip(*times)):
            med[f"{name} {phase}"] = statistics.median(values)
    base = med["bare"]

    def share(seconds: float, per_op: bool = False) -> str:
        return f"{seconds / base:+.2f}x" + (f" ({seconds / ops * 1e6:.1f} µs/op)" if per_op else "")

    return [
        f"encoder fwd+bwd fp32, where the time goes ({reps} interleaved runs, medians, against "
        f"the bare step's {base * 1e3:.3f} ms; {ops} ops):",
        f"  dispatch floor (no-op mode) {med['floor'] / base:.2f}x; module hooks "
        f"{share(med['hooks'] - med['floor'])}; capture {share(med['no memory region'] - med['hooks'], True)}; "
        f"memory tracking in the region {share(med['memory region'] - med['no memory region'], True)}",
        f"  making and entering the profiler {share(med['memory start'])}; after the region "
        f"(records, memory, the total) {share(med['memory stop'])}, without memory tracking "
        f"{share(med['no memory stop'])}",
    ]


# -- main ---------------------------------------------------------------------------------------

# name, step factory, repetitions, variants beside bare, targets (variant -> most ratio)
CASES = [
    ("block fwd bf16 no_grad", block_case, 150, ("neuron",), {"neuron": 1.15}),
    ("encoder fwd+bwd fp32", encoder_case, 800, ("neuron", "neuron, cold costs", "neuron, no memory"),
     {"neuron": 2.5}),
    ("encoder fwd+bwd fp32, compiled (backend=neuron)", encoder_compiled_case, 300, ("neuron",), {}),
    ("encoder fwd+bwd fp32, dispatch floor", encoder_case, 800, ("no-op dispatch mode",), {}),
    ("encoder fwd+bwd fp32, torch.profiler", encoder_case, 300,
     ("torch.profiler", "torch.profiler, shapes"), {}),
    ("llama-2-7b fwd 2048 meta", llama_case, 15,
     ("neuron", "neuron, no memory", "neuron, graph", "neuron, graph, cold costs"),
     {"neuron": 1.05, "neuron, graph": 1.4}),
    # Last: they turn the neuron device on for the rest of the process (layer_case).
    ("llama-2-7b layer fwd 2048 meta", lambda: layer_case(False), 60,
     ("neuron", "bare, neuron device", "neuron, neuron device"), {}),
    ("llama-2-7b layer fwd+bwd 2048 meta", lambda: layer_case(True), 30,
     ("neuron", "bare, neuron device", "neuron, neuron device"), {}),
]
# The neuron device against meta tensors, in the layer cases: (label, its variant, meta's).
DEVICE_COSTS = (("bare", "bare, neuron device", "bare"),
                ("profiled", "neuron, neuron device", "neuron"))
BREAKDOWN = "encoder fwd+bwd fp32, where the time goes"
SUITE = "400 trivial tests, no marked test"
SUITE_TARGET = 1.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=0,
                        help="repetitions per case (default: 150 block, 800 encoder, 300 "
                             "torch.profiler, 15 llama, 60 and 30 the llama layer, 400 where "
                             "the time goes)")
    parser.add_argument("--only", metavar="TEXT", default="",
                        help="run only the cases whose name contains TEXT")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--suite-pairs", type=int, default=15,
                        help="whole-process pairs of the suite without marked tests (default 15; "
                             "0 leaves the case out)")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    torch.set_num_interop_threads(1)
    print(f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"torch.set_num_threads({opts.threads}), interop threads 1, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    rows = []
    memory_costs: list[str] = []
    device_costs: list[str] = []
    # First: the layer cases below turn the neuron device on for the rest of the process.
    breakdown = where_the_time_goes(opts.reps or 400) if opts.only in BREAKDOWN else []
    for name, factory, reps, extra, targets in CASES:
        if opts.only not in name:
            continue
        if factory is llama_case and importlib.util.find_spec("transformers") is None:
            print(f"skipped {name!r}: it needs transformers (pip install transformers)")
            continue
        reps = opts.reps or reps
        step = factory()
        ops = neuron(step)()
        variants: dict[str, Callable[[], object]] = {"bare": bare(step)}
        variants.update((variant, VARIANTS[variant](step)) for variant in extra)
        gc.collect()
        with quiet_stderr():
            wall, cpu = measure(variants, reps=reps, warmup=max(10, reps // 10))
        base = statistics.median(wall["bare"])
        if "bare, neuron device" in variants:
            device_costs.append(f"{name}: on the neuron device against meta, " + ", ".join(
                f"{label} {median_ratio(wall[variant], wall[meta]):.2f}x "
                f"(+{(statistics.median(wall[variant]) - statistics.median(wall[meta])) / ops * 1e6:.1f} µs/op)"
                for label, variant, meta in DEVICE_COSTS))
        if "neuron, no memory" in variants:
            memory_costs.append(
                f"{name}: profile_memory=True {statistics.median(wall['neuron']) * 1e3:.1f} ms, "
                f"False {statistics.median(wall['neuron, no memory']) * 1e3:.1f} ms (medians); "
                f"tracking costs {median_ratio(wall['neuron'], wall['neuron, no memory']):.3f}x "
                f"wall, {median_ratio(cpu['neuron'], cpu['neuron, no memory']):.3f}x cpu "
                "(target <= 1.05x)")
        for variant in extra:
            med = statistics.median(wall[variant])
            target = targets.get(variant)
            rows.append((name, variant, str(reps), f"{base * 1e3:.3f}", f"{med * 1e3:.3f}",
                         f"{median_ratio(wall[variant], wall['bare']):.2f}x",
                         f"<= {target:.2f}x" if target else "-", str(ops),
                         f"{(med - base) / ops * 1e6:.1f}",
                         f"{median_ratio(cpu[variant], cpu['bare']):.2f}x"))
    suite_lines: list[str] = []
    if opts.suite_pairs and opts.only in SUITE:
        runs = suite_case(opts.suite_pairs)
        (bare_wall, bare_cpu), (with_wall, with_cpu) = runs["bare"], runs["plugin installed"]
        rows.append((SUITE, "plugin installed", str(opts.suite_pairs),
                     f"{statistics.median(bare_wall) * 1e3:.0f}",
                     f"{statistics.median(with_wall) * 1e3:.0f}",
                     f"{median_ratio(with_wall, bare_wall):.3f}x", f"<= {SUITE_TARGET:.2f}x",
                     str(TRIVIAL_FILES * TRIVIAL_TESTS), "-", f"{median_ratio(with_cpu, bare_cpu):.3f}x"))
        suite_lines.append(
            f"{SUITE}: the fastest runs {min(bare_wall):.3f} s bare, {min(with_wall):.3f} s with "
            f"the plugin ({min(with_wall) / min(bare_wall):.3f}x); runs of each ranged "
            f"{min(bare_wall):.2f}-{max(bare_wall):.2f} s and {min(with_wall):.2f}-{max(with_wall):.2f} s; "
            f"importing the plugin after pytest: {plugin_import_ms(opts.suite_pairs):.1f} ms "
            "(python -X importtime, median of as many processes)")

    header = ("case", "profiler", "reps", "bare ms", "profiled ms", "ratio", "target", "ops",
              "µs/op", "cpu ratio")
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    left = {0, 1, 6}
    for j, row in enumerate(table):
        print("  ".join(cell.ljust(w) if i in left else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))
    print("ratio: median of per-repetition profiled/bare wall time; "
          "µs/op: (median profiled - median bare) / ops; the suite: whole processes, ops = tests")
    for line in memory_costs + device_costs + breakdown + suite_lines:
        print(line)
    over = [f"{r[0]}, {r[1]} ({r[5]}; cpu {r[9]})" for r in rows
            if r[6] != "-" and float(r[5][:-1]) > float(r[6].split()[1][:-1])]
    if over:
        print("over target: " + "; ".join(over))


if __name__ == "__main__":
    main()
