"""Broken input, on purpose: Hypothesis feeds random, mutated and retyped files to the baseline
loader (``parse_baseline_text``, ``BaselineStore.read_file``), to the `neuronprof` reader of
baseline and --neuron-report files (``inputs.load`` and ``neuronprof show``), and random values to
the marker and option parsers.

The property everywhere: a bad input gives the project's own error (a NeuronProfError subclass)
whose message names the file or the argument, never another exception, and never hangs
(every example runs under a 10 s alarm, no_hang). Mutations start from real files: a baseline
recorded from a real profile and a report with a real regression verdict.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.cli import inputs
from pytest_neuronprof.cli import main as cli_main
from pytest_neuronprof.costmodel.profiles import available_hardware
from pytest_neuronprof.files import show_path
from pytest_neuronprof.gate.baseline import BaselineStore, parse_baseline_text, render_baseline
from pytest_neuronprof.errors import BaselineError, ConfigError, NeuronProfError
from pytest_neuronprof.gate.compare import GatePolicy, compare
from pytest_neuronprof.gate.outcome import TestOutcome as Outcome
from pytest_neuronprof.gate.summary import summarize
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.plugin.marker import MARKER_ARGS, make_plan
from pytest_neuronprof.plugin.options import Options

# No Hypothesis deadline: on a loaded 2-core CI machine a 2 s deadline flaked; a hang is caught
# by no_hang's 10 s alarm instead.
FUZZ = settings(max_examples=250, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _summary(hidden: int, hardware: str = "trn2"):
    model = torch.nn.Sequential(torch.nn.Linear(512, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 8))
    with NeuronProfiler(NeuronConfig(hardware=hardware)) as prof:
        model(torch.randn(128, 512)).sum().backward()
    return summarize(prof.result, prof.backend_version, torch.__version__)


BASE = _summary(256)
SLOWER = _summary(2048)
GOOD_BASELINE = render_baseline({
    "tests/test_mlp.py::test_forward": {"simulated:trn2": BASE, "simulated:trn1": _summary(64, "trn1")},
    "tests/test_mlp.py::test_other[1-a]": {"simulated:trn2": SLOWER},
})
_verdict = compare(BASE, SLOWER, GatePolicy(floor_us=0.0))
assert _verdict.failed and _verdict.regressions  # the report below holds a real regression
GOOD_REPORT = json_report([
    Outcome("tests/test_mlp.py::test_forward", ("tests/test_mlp.py", 12), _verdict, SLOWER, BASE),
    Outcome("tests/test_mlp.py::test_new", ("tests/test_mlp.py", 30),
                compare(BASE, BASE, GatePolicy()), BASE, BASE),
])


# --- strategies ------------------------------------------------------------------------------------

# Any JSON value, with the numbers a file can hold that a recorded one never does: huge ints,
# negative and fractional counts, NaN and Infinity (json writes them as bare tokens).
_SCALARS = (st.none() | st.booleans() | st.text(max_size=12)
            | st.integers(min_value=-(10 ** 20), max_value=10 ** 20)
            | st.sampled_from([0, 1, -1, 2 ** 63, 10 ** 400, -(10 ** 400)])
            | st.floats(allow_nan=True, allow_infinity=True))
JSON_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
NASTY_NUMBERS = st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 1024, -1, -0.5, 1.5, 1e308, 1e-320,
                                 math.nan, math.inf, -math.inf, True, "1", [1], None])
KEYS = st.sampled_from(["schema_version", "tests", "ops", "count", "device_time_us", "engine",
                        "flops", "bytes", "share", "module", "backend", "hardware",
                        "total_device_time_us", "samples", "rounds", "report_version", "verdict",
                        "current", "baseline", "location", "nodeid", "regressions", ""]) | st.text(max_size=8)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON document (the root included), as tuples of keys and indices."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, prefix + (key,))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, prefix + (index,))
    return found


def _parent(doc: Any, path: tuple) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


@st.composite
def json_mutations(draw: st.DrawFn, text: str) -> str:
    """The document of ``text`` with one to three values replaced, removed, renamed or added."""
    doc = json.loads(text)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        leaves = [p for p in paths if p and not isinstance(_parent(doc, p)[p[-1]], (dict, list))]
        # Half the time a leaf (a count, a time, a name): most of a file's values are leaves.
        path = draw(st.sampled_from(leaves if leaves and draw(st.booleans()) else paths))
        action = draw(st.sampled_from(["replace", "replace", "number", "delete", "rename", "add", "wrap"]))
        if action == "number":
            action, value = "replace", draw(NASTY_NUMBERS)
        else:
            value = draw(JSON_VALUES)
        if not path:
            doc = value if action == "replace" else [doc] if action == "wrap" else doc
            continue
        parent, last = _parent(doc, path), path[-1]
        if action == "replace":
            parent[last] = value
        elif action == "wrap":  # the right value, in the wrong container
            parent[last] = draw(st.sampled_from([[parent[last]], {"value": parent[last]}, str(parent[last])]))
        elif action == "delete":
            del parent[last]
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(KEYS)] = parent.pop(last)
        elif action == "add" and isinstance(parent[last], dict):
            parent[last][draw(KEYS)] = draw(JSON_VALUES)
    return json.dumps(doc, allow_nan=True, indent=draw(st.sampled_from([None, 2])))


@st.composite
def byte_mutations(draw: st.DrawFn, text: str) -> bytes:
    """``text`` as UTF-8, cut short, or with bytes flipped, inserted or deleted."""
    data = bytearray(text.encode())
    if draw(st.booleans()):
        return bytes(data[: draw(st.integers(0, len(data)))])
    rng = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
    for _ in range(draw(st.integers(1, 8))):
        at = rng.randrange(len(data))
        kind = rng.choice(["flip", "insert", "delete", "dup"])
        if kind == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            data.insert(at, draw(st.sampled_from(b'{}[]",:0-.eE\\\x00\xff\xc3 n')))
        elif kind == "delete":
            del data[at]
        else:
            data[at:at] = data[at: at + rng.randrange(1, 40)]
    return bytes(data)


# --- the checks --------------------------------------------------------------------------------------

@contextlib.contextmanager
def no_hang(seconds: float = 10.0):
    """A Hypothesis deadline reports a slow example once it ends; this ends one that would not
    (SIGALRM, main thread only, as pytest and xdist workers run tests)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def hung(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _load_baseline_text(path: Path, text: str) -> None:
    """parse_baseline_text returns or raises BaselineError naming the file; what it returns
    renders again (the plugin writes parsed entries back when it records)."""
    try:
        with no_hang():
            tests = parse_baseline_text(path, text)
    except BaselineError as exc:
        assert show_path(path) in str(exc)
        return
    render_baseline(tests)


def _store_read(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        with no_hang():
            BaselineStore(path.parent).read_file(path)
    except BaselineError as exc:
        assert show_path(path) in str(exc)


def _show(path: Path) -> None:
    """`neuronprof show` in every format: exit 0, or exit 2 with one line naming the file. Any
    other exception escapes main() and fails the example."""
    for fmt in ("text", "json", "markdown"):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), no_hang():
            code = cli_main(["show", str(path), "--format", fmt])
        if code == 2:
            message = err.getvalue()
            assert message.count("\n") == 1 and "Traceback" not in message, message
            assert path.name in message, message
            return  # the same file fails the same way in every format
        assert code == 0 and err.getvalue() == ""


def _inputs_load(path: Path) -> None:
    try:
        with no_hang():
            inputs.load(path)
    except NeuronProfError as exc:
        assert path.name in str(exc)
        return
    _show(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def test_the_seed_files_are_valid(folder: Path):
    """The mutations below start from files both readers accept."""
    assert set(parse_baseline_text(folder / "b.json", GOOD_BASELINE)) == {
        "tests/test_mlp.py::test_forward", "tests/test_mlp.py::test_other[1-a]"}
    (folder / "r.json").write_text(GOOD_REPORT)
    loaded = inputs.load(folder / "r.json")
    assert loaded.kind == inputs.REPORT and len(loaded.outcomes) == 2
    _show(folder / "r.json")


@FUZZ
@given(text=st.text(max_size=300))
def test_random_text_as_a_baseline(folder: Path, text: str):
    _load_baseline_text(folder / "b.json", text)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_as_a_baseline_file(folder: Path, data: bytes):
    _store_read(folder / "random.json", data)


@FUZZ
@given(data=byte_mutations(GOOD_BASELINE))
def test_byte_mutated_baseline_files(folder: Path, data: bytes):
    _store_read(folder / "mutated.json", data)


@FUZZ
@given(text=json_mutations(GOOD_BASELINE))
def test_value_type_and_key_mutated_baselines(folder: Path, text: str):
    _load_baseline_text(folder / "b.json", text)


@settings(FUZZ, max_examples=150)
@given(text=json_mutations(GOOD_BASELINE) | byte_mutations(GOOD_BASELINE).map(
    lambda b: b.decode("utf-8", "replace")))
def test_mutated_baselines_through_neuronprof_show(folder: Path, text: str):
    path = folder / "show.json"
    path.write_text(text, encoding="utf-8")
    _inputs_load(path)


@settings(FUZZ, max_examples=300)
@given(text=json_mutations(GOOD_REPORT))
def test_value_type_and_key_mutated_reports(folder: Path, text: str):
    path = folder / "report.json"
    path.write_text(text, encoding="utf-8")
    _inputs_load(path)


@FUZZ
@given(data=byte_mutations(GOOD_REPORT))
def test_byte_mutated_reports(folder: Path, data: bytes):
    path = folder / "report-bytes.json"
    path.write_bytes(data)
    _inputs_load(path)


@pytest.mark.parametrize("depth", [900, 1_000, 100_000])
@pytest.mark.parametrize("where", ["top", "schema_version", "op"])
def test_deeply_nested_json_is_a_broken_file_not_a_recursion_error(folder: Path, depth: int, where: str):
    nested = "[" * depth + "]" * depth
    if where == "top":
        text = nested
    elif where == "schema_version":
        text = '{"schema_version": ' + nested + ', "tests": {}}'
    else:
        text = GOOD_BASELINE.replace('"engine": "Tensor"', '"engine": ' + nested, 1)
    for name, check in (("b.json", lambda p: _load_baseline_text(p, text)),
                        ("r.json", lambda p: (p.write_text(text), _inputs_load(p)))):
        check(folder / name)


@pytest.mark.parametrize("value", ["10" + "0" * 400, "1" + "0" * 5000, "-1", "1.5", "1e400", "NaN",
                                   "Infinity", "true", '"1"', "[1]", "null"])
def test_every_number_field_rejects_what_is_not_a_count_or_time(folder: Path, value: str):
    """Each numeric field of an op and of an entry, set to a huge, negative, fractional,
    non-finite or non-number value: a BaselineError naming the field (huge ints raised
    OverflowError before)."""
    fields = ["count", "device_time_us", "flops", "bytes", "share"]
    doc = json.loads(GOOD_BASELINE)
    entry = doc["tests"]["tests/test_mlp.py::test_forward"]["simulated:trn2"]
    op = next(iter(entry["ops"]))
    for field in fields + ["total_device_time_us"]:
        target = entry if field == "total_device_time_us" else entry["ops"][op]
        marker = "@@VALUE@@"
        saved, target[field] = target[field], marker
        text = json.dumps(doc).replace(f'"{marker}"', value)
        target[field] = saved
        fractional_ok = field in ("device_time_us", "share", "total_device_time_us") and value == "1.5"
        if fractional_ok:
            parse_baseline_text(Path("b.json"), text)
            continue
        with pytest.raises(BaselineError, match=r"broken baseline file b\.json") as info:
            parse_baseline_text(Path("b.json"), text)
        assert field in str(info.value) or "not valid JSON" in str(info.value)


# --- marker arguments and option values ---------------------------------------------------------------

MARKER_VALUES = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63)
                 | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=10)
                 | st.lists(st.integers(0, 3), max_size=2)
                 | st.dictionaries(st.text(max_size=10), st.floats() | st.text(max_size=5) | st.none(), max_size=2)
                 | st.sampled_from(["trn2", "trn9", "h200", 0.1, 1, 10, "aten::mm"]))


OPTIONS = Options(record=False, baseline_dir=Path("baselines"), backend="simulated",
                  hardware="trn2", strict=False)


@settings(FUZZ, max_examples=300)
@given(kwargs=st.dictionaries(st.sampled_from(MARKER_ARGS) | st.sampled_from(["treshold", "hw", "op"]),
                              MARKER_VALUES, max_size=3))
def test_marker_arguments_are_accepted_or_named(kwargs: dict[str, Any]):
    """make_plan, which the plugin calls with a marker's kwargs: a plan, or a ConfigError that
    names the bad argument (and, for unknown names, the valid ones)."""
    try:
        plan = make_plan(OPTIONS, kwargs)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("neuron_profile"), message
        unknown = sorted(set(kwargs) - set(MARKER_ARGS))
        if unknown:
            assert all(name in message for name in unknown) and "valid: threshold" in message
        else:
            assert any(f"{name}=" in message or f"{name}[" in message for name in kwargs), message
        if message.startswith("neuron_profile hardware=") and ": unknown;" in message:
            assert f"valid choices: {', '.join(available_hardware())}" in message
        return
    assert plan.hardware in ("h200", "inf2", "trn1", "trn2", "trn3")
    assert 0 <= plan.policy.threshold < math.inf


@settings(FUZZ, max_examples=300)
@given(text=st.text(max_size=12) | st.floats(allow_nan=True).map(str)
       | st.integers(-1000, 1000).map(lambda i: f"{i}%"))
def test_threshold_option_values_are_parsed_or_named(text: str):
    from pytest_neuronprof.values import parse_fraction

    try:
        value = parse_fraction("--neuron-threshold (ini neuron_threshold)", text)
    except ConfigError as exc:
        assert str(exc).startswith(f"--neuron-threshold (ini neuron_threshold)={text!r}: expected")
        return
    assert math.isfinite(value) and value >= 0


@settings(FUZZ, max_examples=300)
@given(text=st.text(max_size=6) | st.sampled_from(["\u00b2", "1\u00b9", "\u0661\u0662", " 7 ", "+3"]))
def test_count_values_are_parsed_or_named(text: str):
    """hotspots=, rounds=, --neuron-rounds: a whole number or a ConfigError naming the option;
    "\u00b2" (a digit that is not decimal) once escaped as int()'s ValueError, found by
    test_marker_arguments_are_accepted_or_named under xdist."""
    from pytest_neuronprof.values import parse_count

    try:
        value = parse_count("neuron_profile hotspots", text, 0)
    except ConfigError as exc:
        assert str(exc).startswith(f"neuron_profile hotspots={text!r}: expected a whole number")
        return
    assert value == int(text.strip()) and value >= 0


@settings(FUZZ, max_examples=100)
@given(name=st.text(min_size=1, max_size=10))
def test_unknown_hardware_names_are_named_with_the_choices(name: str):
    from pytest_neuronprof.costmodel.profiles import available_hardware

    assume(name not in available_hardware())
    with pytest.raises(ConfigError) as info:
        NeuronProfiler(NeuronConfig(hardware=name))
    assert repr(name) in str(info.value) or name in str(info.value)
    assert all(choice in str(info.value) for choice in available_hardware())
