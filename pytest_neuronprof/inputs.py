"""Reading what the `neuronprof` command works on: a baseline directory, one baseline file, or a
``--neuron-report`` file, into one shape: {nodeid: {variant: Entry}}.

Baseline files are validated by ``baseline.parse_baseline_text`` (the plugin's own reader), so
the command and the plugin accept and reject exactly the same files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .baseline import parse_baseline_text
from .files import show_path
from .errors import NeuronProfError
from .report import REPORT_VERSION, TestOutcome
from .summary import ProfileSummary

BASELINES, REPORT = "baselines", "report"


class InputError(NeuronProfError):
    """A path given to the `neuronprof` command that is missing or is not what it should be."""


@dataclass(frozen=True)
class Entry:
    summary: ProfileSummary
    source: str  # the file it was read from, as shown to users
    location: tuple[str, int] | None = None  # (test file, 1-based line), known from reports only


@dataclass
class Loaded:
    kind: str  # BASELINES or REPORT
    path: Path
    entries: dict[str, dict[str, Entry]]  # nodeid -> variant -> Entry
    outcomes: list[TestOutcome] = field(default_factory=list)  # a report's tests, as written

    def count(self) -> int:
        return sum(len(variants) for variants in self.entries.values())


def _baseline_entries(path: Path, text: str) -> dict[str, dict[str, Entry]]:
    shown = show_path(path)
    return {nodeid: {variant: Entry(summary, shown) for variant, summary in variants.items()}
            for nodeid, variants in parse_baseline_text(path, text).items()}


# What `neuronprof` reads of one test of a --neuron-report file (report.TestOutcome.to_json),
# checked before it becomes objects: a wrong type deep inside (a list for "ops", a string for a
# time) surfaced as an AttributeError in loading or a TypeError in `show` (fuzzing found them).
# str: a string; _NUM: a finite number; _INT: a whole number; {key: spec}: an object with at
# least those keys ("key?": checked when present and not empty); (_MAP, spec): an object of
# specs; [spec]: a list of specs; (spec, spec): a list of exactly those; (None, spec): null or.
_NUM, _INT, _MAP = "a number", "a whole number", "an object"
_OP_SPEC = {"count": _INT, "device_time_us": _NUM, "engine": str, "flops": _INT, "bytes": _INT,
            "share": _NUM, "module": str}
_SUMMARY_SPEC = {"backend": str, "hardware": str, "cost_model_version": str, "torch_version": str,
                 "total_device_time_us": _NUM, "ops": (_MAP, _OP_SPEC),
                 "samples?": {"total_device_time_us": [_NUM], "ops": (_MAP, [_NUM])}}
_FINDING_SPEC = {"kind": str, "op": str, "module": str, "baseline": _NUM, "current": _NUM,
                 "threshold": _NUM, "reason": str}
_TEST_SPEC = {"nodeid": str, "location": (str, _INT),
              "verdict": {"status": str, "message": str, "regressions": [_FINDING_SPEC],
                          "improvements": [_FINDING_SPEC], "allowed": [_FINDING_SPEC]},
              "current": _SUMMARY_SPEC, "baseline": (None, _SUMMARY_SPEC)}
_FLOAT_MAX = 1.7976931348623157e308


def _shape_problem(value: Any, spec: Any, where: str) -> str | None:
    """Where ``value`` departs from ``spec``, or None."""
    def wrong(expected: str) -> str:
        return f"{where} should be {expected}, got {type(value).__name__}"

    if spec is str:
        return None if isinstance(value, str) else wrong("a string")
    if spec in (_NUM, _INT):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                spec == _INT and not isinstance(value, int)):
            return wrong(spec)
        return None if -_FLOAT_MAX <= value <= _FLOAT_MAX else f"{where} is {value!r:.40}"
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return wrong("an object")
        for key, inner in spec.items():
            if key.endswith("?"):
                key = key[:-1]
                if not value.get(key):
                    continue
            elif key not in value:
                return f"{where} has no {key!r}"
            problem = _shape_problem(value[key], inner, f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return wrong("a list")
        return next((p for i, v in enumerate(value)
                     if (p := _shape_problem(v, spec[0], f"{where}[{i}]"))), None)
    first, second = spec
    if first is _MAP:
        if not isinstance(value, dict):
            return wrong("an object")
        return next((p for k, v in value.items()
                     if (p := _shape_problem(v, second, f"{where}[{k!r}]"))), None)
    if first is None:
        return None if value is None else _shape_problem(value, second, where)
    if not isinstance(value, list) or len(value) != len(spec):
        return wrong(f"a list of {len(spec)}")
    return next((p for i, (v, s) in enumerate(zip(value, spec))
                 if (p := _shape_problem(v, s, f"{where}[{i}]"))), None)


def _report_outcomes(path: Path, data: dict[str, Any]) -> list[TestOutcome]:
    shown = show_path(path)
    version = data.get("report_version")
    if version != REPORT_VERSION:
        raise InputError(f"{shown}: report_version {version!r} is not supported (this "
                         f"pytest-neuronprof reads {REPORT_VERSION}); re-run pytest with --neuron-report")
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise InputError(f"{shown}: a --neuron-report file needs a 'tests' object")
    outcomes = []
    for nodeid, test in sorted(tests.items()):
        problem = _shape_problem(test, _TEST_SPEC, "test")
        if problem:
            raise InputError(f"{shown}: the entry of test {nodeid!r} is malformed ({problem}); "
                             "re-run pytest with --neuron-report")
        try:
            outcomes.append(TestOutcome.from_json(test))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise InputError(f"{shown}: the entry of test {nodeid!r} is malformed "
                             f"({type(exc).__name__}: {exc}); re-run pytest with --neuron-report") from None
    return outcomes


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{show_path(path)}: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"cannot read {show_path(path)}: {exc.strerror or exc}") from None


def load_file(path: Path) -> Loaded:
    """One baseline file or one report, told apart by their version keys."""
    text = _read(path)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise InputError(f"{show_path(path)}: not valid JSON ({reason}); expected a baseline file "
                         "or a --neuron-report file") from None
    if isinstance(data, dict) and "report_version" in data:
        outcomes = _report_outcomes(path, data)
        entries: dict[str, dict[str, Entry]] = {}
        for o in outcomes:
            entries.setdefault(o.nodeid, {})[o.current.variant] = Entry(o.current, show_path(path),
                                                                       o.location)
        return Loaded(REPORT, path, entries, outcomes)
    if isinstance(data, dict) and "schema_version" in data:
        return Loaded(BASELINES, path, _baseline_entries(path, text))
    raise InputError(f"{show_path(path)}: neither a baseline file (schema_version) nor a "
                     "--neuron-report file (report_version)")


def load_directory(path: Path) -> Loaded:
    files = sorted(p for p in path.rglob("*.json") if p.is_file())
    if not files:
        raise InputError(f"{show_path(path)}: no baseline files (*.json) in this directory")
    entries: dict[str, dict[str, Entry]] = {}
    for file in files:
        for nodeid, variants in _baseline_entries(file, _read(file)).items():
            for variant, entry in variants.items():
                seen = entries.setdefault(nodeid, {}).get(variant)
                if seen is not None:  # the plugin would only ever read one of them
                    raise InputError(f"{nodeid} [{variant}] is in both {seen.source} and "
                                     f"{entry.source}; keep one")
                entries[nodeid][variant] = entry
    return Loaded(BASELINES, path, entries)


def load(path: str | Path) -> Loaded:
    """A baseline directory, a baseline file or a report. Raises NeuronProfError naming the path."""
    path = Path(path)
    if path.is_dir():
        return load_directory(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    return load_file(path)
