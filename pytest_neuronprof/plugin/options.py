"""The plugin's options: declared once (flag, ini twin, help), read once into ``Options``. The
options of the session's outputs are not listed here: each registered output
(``outputs/registry.py``) brings its own, a path read into ``Options.output_paths``."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping

import pytest

from ..costmodel.catalog import available_hardware
from ..defaults import (BACKEND_TABLE, DEFAULT_AUTO_CAST, DEFAULT_BACKEND, DEFAULT_BASELINE_DIR,
                        DEFAULT_CPU_THREADS, DEFAULT_EXECUTION, DEFAULT_FLOOR_US, DEFAULT_HARDWARE,
                        DEFAULT_MAX_FILE_BYTES, DEFAULT_MEMORY_FLOOR_BYTES,
                        DEFAULT_MEMORY_THRESHOLD, MAX_ENTRY_REASON_CHARS, BackendFacts,
                        backend_facts, per_backend)
from ..errors import ConfigError
from ..formatting import format_bytes, format_fraction
from ..inifiles import find_ini
from ..outputs import registry
from ..safetext import quoted
from ..values import (parse_count, parse_fraction, parse_microseconds, parse_size, reason_problem,
                      validate_choice)
from ..vocabulary import AUTO_CASTS, BACKENDS, EAGER, EXECUTIONS, GRAPH

if TYPE_CHECKING:  # the gate loads where it is used: a session without profiled tests never does
    from ..gate.compare import GatePolicy


_EXACT = [facts for facts in BACKEND_TABLE.values() if not facts.measured]  # one round, no warmup


def _backends_help() -> str:
    """--neuron-backend's help, from the backend table."""
    def one(facts: BackendFacts) -> str:
        needs = f"; needs {facts.requires}" if facts.requires else ""
        return f"{facts.name} ({facts.label}{needs})"

    measured = [one(f) for f in BACKEND_TABLE.values() if f.measured]
    return (f"profiler backend (default: {DEFAULT_BACKEND}): {', '.join(map(one, _EXACT))}; or "
            f"measured by torch.profiler: {', '.join(measured)}")


DISABLE_VARIABLE = "NEURONPROF_DISABLE"  # =1: the off switch, for CI matrices

OPTIONS = (
    # (flag, ini name, ini type, help)
    ("--neuron-disable", "neuron_disable", "bool",
     f"turn profiling and the gate off (also {DISABLE_VARIABLE}=1): marked tests run, unprofiled "
     "and ungated; the neuron_profile fixture is a no-op context manager"),
    ("--neuron-baseline", "neuron_baseline", "bool",
     "record or update the baselines of the profiled tests that run (they pass)"),
    ("--neuron-baseline-dir", "neuron_baseline_dir", "string",
     f"directory of baseline files (default: {DEFAULT_BASELINE_DIR}/ next to the ini file; without "
     f"one, the nearest {DEFAULT_BASELINE_DIR}/ above the test file)"),
    ("--neuron-baseline-max-size", "neuron_baseline_max_size", "string",
     "refuse baseline files larger than this, e.g. 512MB or 1GiB (default: "
     f"{DEFAULT_MAX_FILE_BYTES // 2**20}MiB)"),
    ("--neuron-backend", "neuron_backend", "string", _backends_help()),
    ("--neuron-hardware", "neuron_hardware", "string",
     f"hardware profile of the simulated backend (default: {DEFAULT_HARDWARE}); names the chip "
     "of the neuron backend. Several, comma-separated (trn2,trn3,inf2,h200): the simulated "
     "backend captures each test once and costs and gates it on every chip, each against its "
     "own baseline; a name listed twice is an error"),
    ("--neuron-execution", "neuron_execution", "string",
     f"how the simulated NeuronCore runs a region: {EAGER} (default: TorchNeuron's eager mode, "
     f"one launched kernel per op) or {GRAPH} (one neuronx-cc graph: fused epilogues, "
     "intermediates in SBUF, engines overlapping)"),
    ("--neuron-auto-cast", "neuron_auto_cast", "string",
     f"neuronx-cc's --auto-cast for {GRAPH} execution: {', '.join(AUTO_CASTS)} (default: "
     f"{DEFAULT_AUTO_CAST}, the compiler's default since Neuron 2.27; matmult before); "
     f"{EAGER} kernels keep the model's dtypes"),
    ("--neuron-rounds", "neuron_rounds", "string",
     "measured backends: rounds per test, compared with the baseline's for significance "
     f"(default: {per_backend(lambda f: f.rounds, measured_only=True)}; "
     f"{', '.join(f'the {f.name} backend always runs once' for f in _EXACT)})"),
    ("--neuron-warmup", "neuron_warmup", "string",
     "measured backends: warmup rounds before them, not compared "
     f"(default: {per_backend(lambda f: f.warmup, measured_only=True)})"),
    ("--neuron-cpu-threads", "neuron_cpu_threads", "string",
     "cpu backend: torch's intra-op threads while a region is measured, 0 to leave them "
     f"(default: {DEFAULT_CPU_THREADS}, the steadiest on shared machines)"),
    ("--neuron-threshold", "neuron_threshold", "string",
     "relative increase that counts as a regression, e.g. 0.1 or 10% (default: "
     f"{per_backend(lambda f: format_fraction(f.threshold))})"),
    ("--neuron-floor-us", "neuron_floor_us", "string",
     f"an increase must also exceed this many microseconds to count (default: {DEFAULT_FLOOR_US})"),
    ("--neuron-memory-threshold", "neuron_memory_threshold", "string",
     "relative growth of a test's peak device memory that counts as a regression, e.g. 0.05 or "
     f"5% (default: {format_fraction(DEFAULT_MEMORY_THRESHOLD)}; the growth must also be at least "
     f"{format_bytes(DEFAULT_MEMORY_FLOOR_BYTES)})"),
    ("--neuron-strict", "neuron_strict", "bool", "fail profiled tests that have no baseline"),
    ("--neuron-baseline-ref", "neuron_baseline_ref", "string",
     "gate against the baseline files as they are at this git ref (e.g. origin/main), read from "
     "git without a checkout; what this change re-recorded is listed as accepted, and a "
     "regression it accepted needs --neuron-reason"),
    ("--neuron-device-alias", "neuron_device_alias", "bool",
     "a simulated `neuron` device for the session (simulated backend): torch.device('neuron'), "
     ".to('neuron') and device='neuron' work, every op on it runs on shapes only (as on meta "
     "tensors) and is costed; reading a value fails, naming the line. It lasts for the process "
     "(torch cannot rename a device twice), and stays off where a PrivateUse1 backend "
     "(TorchNeuron's real device) is registered already, or with a measured backend"),
    ("--neuron-reason", "neuron_reason", "string",
     f"with --neuron-baseline: why the recorded numbers changed, kept in each entry written (at "
     f"most {MAX_ENTRY_REASON_CHARS} characters); a reviewer reads it in the diff, and under "
     "--neuron-baseline-ref it accepts the regressions this change recorded"),
)


# An ini file's own setting, no option: the reason lives in the diff (plugin/base_config.py).
REASON_KEY = "neuron_config_reason"
REASON_HELP = ("with --neuron-baseline-ref: why this change changes settings that decide verdicts "
               "(neuron_threshold, neuron_hardware, ...); counted only when new against the base")


def output_options() -> Iterator[tuple[str, str, str, str]]:
    """The options of the registered outputs (read when called), as OPTIONS rows: a path each."""
    for output in registry.SESSION_OUTPUTS:
        if output.flag is not None:
            yield output.flag, output.ini, "string", output.help


def all_options() -> tuple[tuple[str, str, str, str], ...]:
    """Every option of the plugin, in `pytest --help`'s order: OPTIONS, then the outputs'."""
    return (*OPTIONS, *output_options())


@dataclass(frozen=True)
class Options:
    record: bool
    baseline_dir: Path | None  # --neuron-baseline-dir or ini; None: found per test (plugin/locate.py)
    backend: str
    hardware: str  # the first (or only) chip
    strict: bool
    # the registered outputs whose option is given (outputs/registry.py): flag -> path
    output_paths: Mapping[str, Path] = field(default_factory=dict)
    rounds: int | None = None  # --neuron-rounds; None: the backend's default
    warmup: int | None = None  # --neuron-warmup; None: the backend's default
    cpu_threads: int | None = DEFAULT_CPU_THREADS  # --neuron-cpu-threads; None (0): unchanged
    ini_dir: Path | None = None  # the folder of the ini file pytest read
    rootdir: Path = Path(".")  # pytest's rootdir
    test_paths: tuple[Path, ...] = ()  # the paths pytest collects from (absolute)
    execution: str = DEFAULT_EXECUTION  # --neuron-execution: eager or graph
    auto_cast: str = DEFAULT_AUTO_CAST  # --neuron-auto-cast: neuronx-cc's, for graph execution
    baseline_max_bytes: int = DEFAULT_MAX_FILE_BYTES  # --neuron-baseline-max-size
    # --neuron-threshold and --neuron-floor-us (GatePolicy field -> value); the marker's go on top
    policy_overrides: Mapping[str, Any] = field(default_factory=dict)
    # --neuron-hardware with several chips (hardware first); () for one chip
    chips: tuple[str, ...] = ()
    baseline_ref: str | None = None  # --neuron-baseline-ref: gate against the files at this git ref
    reason: str = ""  # --neuron-reason: kept in each entry recorded

    @property
    def facts(self) -> BackendFacts:
        return backend_facts(self.backend)

    @property
    def policy(self) -> GatePolicy:
        """The session's gate policy: the backend's defaults, then the options'."""
        from ..gate.policy import resolve_policy

        return resolve_policy(self.backend, self.policy_overrides)


def parse_chips(source: str, value: Any, backend: str) -> tuple[str, ...]:
    """A hardware option, ini value or marker argument: one profile name, several separated by
    commas ("trn2,h200"), or (a marker) a list or tuple of names; each one checked. Raises
    ConfigError naming ``source`` for an unknown or repeated name (a repeat would cost and record
    the same variant twice), an empty list, and several chips on a measured backend, which times
    the one device it runs on."""
    if isinstance(value, (list, tuple)):
        names = [v.strip() if isinstance(v, str) else v for v in value]
    elif isinstance(value, str) and "," in value:
        names = [part.strip() for part in value.split(",")]
    else:  # one chip: checked as any other choice
        return (validate_choice(source, value, available_hardware()),)
    shown = ",".join(map(str, names))
    if not names or not all(names):
        raise ConfigError(f"{source}={shown!r}: an empty hardware name; give profile names "
                          f"separated by commas, e.g. trn2,h200 (choices: {', '.join(available_hardware())})")
    chips = tuple(validate_choice(source, name, available_hardware()) for name in names)
    repeated = sorted({c for c in chips if chips.count(c) > 1})
    if repeated:
        raise ConfigError(f"{source}={shown}: {', '.join(repeated)} is listed more than once; "
                          "list each chip once")
    if len(chips) > 1 and backend_facts(backend).measured:
        raise ConfigError(f"{source}={shown}: the {backend} backend measures the one device this "
                          "machine has, so it cannot run on several chips; give one chip, or use "
                          "--neuron-backend simulated to cost each test on every chip listed")
    return chips


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuronprof", "device-time profiling and regression gate (pytest-neuronprof)")
    for flag, ini, kind, help_text in all_options():
        # argparse %-formats an option's help (a bare "10%" crashed `pytest --help`); ini help
        # is printed as it is.
        option_help = help_text.replace("%", "%%")
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, dest=ini, help=option_help)
        else:
            group.addoption(flag, action="store", default=None, dest=ini, metavar="VALUE",
                            help=option_help)
        ini_type: Literal["bool", "string"] = "bool" if kind == "bool" else "string"
        parser.addini(ini, help=help_text, type=ini_type, default=None)
    parser.addini(REASON_KEY, help=REASON_HELP, type="string", default="")  # an ini file's own


def _option(config: pytest.Config, name: str) -> tuple[Any, Path]:
    """An option's value and the folder a relative path in it is relative to: the working
    directory for an option, the ini file's folder for an ini value."""
    value = config.getoption(name)
    if value is not None:
        return value, config.invocation_params.dir
    return config.getini(name), config.inipath.parent if config.inipath else config.rootpath


def _path_option(config: pytest.Config, name: str, default: Path | None) -> Path | None:
    value, base = _option(config, name)
    return (base / value) if value else default


def _given(value: Any) -> bool:
    return value not in (None, "")


PATH_OPTIONS = ("--neuron-baseline-dir",)  # and every registered output's (path_options)


def path_options() -> tuple[str, ...]:
    """The options whose value is a path."""
    return (*PATH_OPTIONS, *(flag for flag, *_ in output_options()))


def _test_paths_ancestor(config: pytest.Config) -> Path:
    base = config.invocation_params.dir
    paths = [base / str(arg).split("::", 1)[0] for arg in config.args] or [base]
    folders = [p if p.is_dir() else p.parent for p in paths if p.exists()] or [base]
    return Path(os.path.commonpath([str(p.resolve()) for p in folders]))


def check_split_path_options(config: pytest.Config) -> None:
    """pytest chooses its rootdir and ini file before it knows this plugin's options, so the value
    of ``--neuron-html ../perf-html`` (two arguments) counts as a test path when it is an existing
    folder: outside the project, it moves the rootdir up and the project's ini file (and every
    setting in it) is not read. Said as an error naming the option and the fix, instead of a
    session that silently runs without the project's settings."""
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    flags = path_options()
    split = [(flag, value) for flag, value in zip(args, args[1:])
             if flag in flags and isinstance(value, str) and not value.startswith("-")
             and (config.invocation_params.dir / value).exists()]
    if not split:
        return
    ini = find_ini(_test_paths_ancestor(config))
    if ini is None or (config.inipath is not None and ini.resolve() == config.inipath.resolve()):
        return
    flag, value = split[0]
    raise ConfigError(f"{flag} {value}: pytest took this existing path for a test path when it chose "
                      f"its rootdir ({config.rootpath}), so it did not read {ini}; write "
                      f"{flag}={value} (one argument)")


def check_ref_and_reason(record: bool, baseline_ref: str | None, reason: str) -> None:
    """--neuron-baseline-ref gates, --neuron-reason goes with recording: ConfigError for a mix
    that would silently do nothing."""
    if record and baseline_ref:
        raise ConfigError("--neuron-baseline-ref gates a run against the files at a git ref and "
                          "--neuron-baseline records into the working tree: give one of them")
    if reason and not record:
        raise ConfigError("--neuron-reason is kept in the entries --neuron-baseline records: "
                          "give both, e.g. pytest --neuron-baseline --neuron-reason 'why' tests/test_x.py")
    if reason and len(reason.strip()) > MAX_ENTRY_REASON_CHARS:
        raise ConfigError(f"--neuron-reason: give a reason of at most {MAX_ENTRY_REASON_CHARS} "
                          f"characters (got {len(reason.strip())})")
    problem = reason_problem(reason) if reason else None
    if problem:
        raise ConfigError(f"--neuron-reason {quoted(reason)}: no reason a person can read ({problem}); "
                          "say why the numbers changed, e.g. --neuron-reason 'wider MLP for quality, see #12'")


def device_alias(config: pytest.Config) -> str | None:
    """--neuron-device-alias (ini neuron_device_alias): the name of the backend the session
    uses, for which to turn the simulated neuron device on; None when the option is off."""
    if not _option(config, "neuron_device_alias")[0]:
        return None
    return str(_option(config, "neuron_backend")[0] or DEFAULT_BACKEND)


def disabled(config: pytest.Config) -> bool:
    """--neuron-disable, ini neuron_disable or NEURONPROF_DISABLE=1 (any value but "", "0",
    "false", "no", "off"). A run gated against a ref reads the ini part from the base instead
    (``base_config.disabled_at_base``, which the plugin asks then)."""
    return disabled_by_environment() or bool(_option(config, "neuron_disable")[0])


def disabled_by_environment() -> bool:
    """NEURONPROF_DISABLE: the job's own switch, whoever's ini file is read."""
    return os.environ.get(DISABLE_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def job_test_paths(config: pytest.Config) -> tuple[Path, ...]:
    """The test paths the CI job gave pytest, absolute and as written (links not followed): the
    positional arguments of its command line and of PYTEST_ADDOPTS, never the ini file's
    ``testpaths`` or ``addopts`` (a change's own); none given, the folder pytest ran in."""
    import argparse

    args = [*map(str, config.invocation_params.args), *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    try:  # pytest's own parser tells a path from an option's value
        given = config._parser.parse_known_args(args, namespace=argparse.Namespace()).file_or_dir
    except Exception:  # noqa: BLE001 - a private parser's API changed: what pytest collected
        given = [str(arg) for arg in config.args]
    base = config.invocation_params.dir
    paths = [Path(os.path.abspath(base / str(arg).split("::", 1)[0])) for arg in given or ()]
    return tuple(paths) or (Path(os.path.abspath(base)),)


def baseline_ref(config: pytest.Config) -> str | None:
    """--neuron-baseline-ref or ini neuron_baseline_ref, as given (checked where it is used)."""
    ref = config.getoption("neuron_baseline_ref") or config.getini("neuron_baseline_ref")
    return str(ref) if ref else None


def read_options(config: pytest.Config, source: Callable[[str], tuple[Any, Path]] | None = None) -> Options:
    """Raises ConfigError naming the option (and its ini twin) that is wrong. ``source``: where
    each value comes from (ini name -> (value, the folder a path in it is relative to));
    default: pytest's (the command line, else the ini file)."""
    check_split_path_options(config)

    def option(name: str) -> tuple[Any, Path]:
        return source(name) if source is not None else _option(config, name)

    threshold, _ = option("neuron_threshold")
    floor, _ = option("neuron_floor_us")
    rounds, _ = option("neuron_rounds")
    warmup, _ = option("neuron_warmup")
    threads, _ = option("neuron_cpu_threads")
    max_size, _ = option("neuron_baseline_max_size")
    memory_threshold, _ = option("neuron_memory_threshold")
    baseline_dir, baseline_folder = option("neuron_baseline_dir")
    record = bool(option("neuron_baseline")[0])
    baseline_ref = option("neuron_baseline_ref")[0] or None
    if baseline_ref is not None:  # refused before any git call or output echoes it
        from ..gate.gitref import check_ref

        check_ref(baseline_ref)
    reason = option("neuron_reason")[0] or ""
    check_ref_and_reason(record, baseline_ref, reason)
    backend = option("neuron_backend")[0] or DEFAULT_BACKEND
    hardware = option("neuron_hardware")[0] or DEFAULT_HARDWARE
    execution = option("neuron_execution")[0] or DEFAULT_EXECUTION
    auto_cast = option("neuron_auto_cast")[0] or DEFAULT_AUTO_CAST
    backend = validate_choice("--neuron-backend (ini neuron_backend)", backend, BACKENDS)
    chips = parse_chips("--neuron-hardware (ini neuron_hardware)", hardware, backend)
    threads = (parse_count("--neuron-cpu-threads (ini neuron_cpu_threads)", threads, 0)
               if _given(threads) else DEFAULT_CPU_THREADS)
    return Options(
        record=record,
        baseline_ref=baseline_ref,
        reason=reason.strip(),
        baseline_dir=(baseline_folder / baseline_dir) if baseline_dir else None,
        backend=backend,
        hardware=chips[0],
        chips=chips if len(chips) > 1 else (),
        policy_overrides={
            "threshold": parse_fraction("--neuron-threshold (ini neuron_threshold)", threshold)
            if _given(threshold) else None,
            "floor_us": parse_microseconds("--neuron-floor-us (ini neuron_floor_us)", floor)
            if _given(floor) else None,
            "memory_threshold": parse_fraction("--neuron-memory-threshold (ini neuron_memory_threshold)",
                                               memory_threshold) if _given(memory_threshold) else None,
        },
        strict=bool(option("neuron_strict")[0]),
        output_paths={flag: path for flag, ini, *_ in output_options()
                      if (path := _path_option(config, ini, None)) is not None},
        rounds=parse_count("--neuron-rounds (ini neuron_rounds)", rounds, 1) if _given(rounds) else None,
        warmup=parse_count("--neuron-warmup (ini neuron_warmup)", warmup, 0) if _given(warmup) else None,
        cpu_threads=threads or None,
        ini_dir=config.inipath.parent.resolve() if config.inipath else None,
        rootdir=config.rootpath,
        test_paths=tuple((config.invocation_params.dir / str(arg).split("::", 1)[0]).resolve()
                         for arg in config.args) or (config.invocation_params.dir.resolve(),),
        execution=validate_choice("--neuron-execution (ini neuron_execution)", execution, EXECUTIONS),
        auto_cast=validate_choice("--neuron-auto-cast (ini neuron_auto_cast)", auto_cast, AUTO_CASTS),
        baseline_max_bytes=parse_size("--neuron-baseline-max-size (ini neuron_baseline_max_size)", max_size)
        if _given(max_size) else DEFAULT_MAX_FILE_BYTES,
    )
