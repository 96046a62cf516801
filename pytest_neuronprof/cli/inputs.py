"""Reading what the `neuronprof` command works on: a baseline directory, one baseline file, or a
``--neuron-report`` file, into one shape: {nodeid: {variant: Entry}}.

Baseline files are validated by ``baseline.parse_baseline_text`` (the plugin's own reader), so
the command and the plugin accept and reject exactly the same files; every file is read by
``baseline.read_regular_bytes`` (regular files only, at most ``--max-size``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..defaults import DEFAULT_MAX_FILE_BYTES
from ..errors import NeuronProfError
from ..files import show_path
from ..gate.baseline import (BaselineStore, ValidFile, content_digest, parse_baseline_document,
                             parse_baseline_text, parse_streamed, read_regular_bytes)
from ..gate.compare import Status
from ..gate.decode import DuplicateKeyError, load_json
from ..jsontext import gc_paused
from ..gate.outcome import TestOutcome
from ..gate.summary import ProfileSummary
from ..outputs.json_report import MODULES_REPORT_VERSION, POLICY_REPORT_VERSION, READABLE_REPORT_VERSIONS
from ..safetext import plain, quoted

BASELINES, REPORT = "baselines", "report"
SIZE_OPTION = "--max-size"  # raises the limit on the size of every file read


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
    # The baseline files read, by their bytes' digests (asked for by `neuronprof merge`, so that
    # OUT's files with the same bytes need not be parsed again: ``BaselineStore.validate_all``).
    valid: list[ValidFile] = field(default_factory=list)
    # A report's top-level fields but its tests (its version, the plugin block that wrote it)
    header: dict[str, Any] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(variants) for variants in self.entries.values())


def _baseline_entries(path: Path, parsed: dict[str, dict[str, ProfileSummary]]) -> dict[str, dict[str, Entry]]:
    shown = show_path(path)
    return {nodeid: {variant: Entry(summary, shown) for variant, summary in variants.items()}
            for nodeid, variants in parsed.items()}


def _report_outcomes(path: Path, data: dict[str, Any]) -> list[TestOutcome]:
    shown = show_path(path)
    version = data.get("report_version")
    if type(version) is not int or version not in READABLE_REPORT_VERSIONS:
        newer = type(version) is int and version > max(READABLE_REPORT_VERSIONS)
        raise InputError(f"{shown}: report_version {version!r} is not supported (this "
                         f"pytest-neuronprof reads {', '.join(map(str, READABLE_REPORT_VERSIONS))}); "
                         + ("a newer pytest-neuronprof wrote it: upgrade this one (pip install -U "
                            "pytest-neuronprof), or read it with the version that wrote it"
                            if newer else "re-run pytest with --neuron-report"))
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise InputError(f"{shown}: a --neuron-report file needs a 'tests' object")

    def malformed(nodeid: str) -> Callable[[str], InputError]:
        return lambda problem: InputError(f"{shown}: the entry of test {quoted(nodeid)} is malformed "
                                          f"({problem}); re-run pytest with --neuron-report")

    return [TestOutcome.from_json(test, malformed(nodeid), legacy=version < MODULES_REPORT_VERSION,
                                  policy_known=version >= POLICY_REPORT_VERSION)
            for nodeid, test in sorted(tests.items())]


def _read(path: Path, max_bytes: int, digest: bool) -> tuple[str, int, bytes | None]:
    """The text of ``path``, its size in bytes and (when asked for) the digest of its bytes."""
    data = read_regular_bytes(path, max_bytes, lambda problem: InputError(f"{show_path(path)}: {problem}"),
                              SIZE_OPTION)
    if data is None:
        raise InputError(f"{show_path(path)}: no such file or directory")
    try:
        return data.decode("utf-8"), len(data), content_digest(data) if digest else None
    except UnicodeDecodeError:
        raise InputError(f"{show_path(path)}: not UTF-8 text") from None


def load_file(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES, digests: bool = False) -> Loaded:
    """One baseline file or one report, told apart by their version keys. ``digests``: a
    baseline file's ValidFile in ``Loaded.valid``."""
    text, size, digest = _read(path, max_bytes, digests)

    def baselines(parsed: dict[str, dict[str, ProfileSummary]]) -> Loaded:
        valid = [] if digest is None else [ValidFile.of(size, digest, parsed)]
        return Loaded(BASELINES, path, _baseline_entries(path, parsed), valid=valid)

    parsed = parse_streamed(path, text)  # a baseline file as the plugin writes it, test by test
    if parsed is not None:
        return baselines(parsed)
    constants: list[str] = []  # NaN, Infinity: a report may hold them, a baseline file may not

    def constant(name: str) -> float:
        constants.append(name)
        return float(name)

    try:
        with gc_paused():
            data = load_json(text, parse_constant=constant)
    except DuplicateKeyError as exc:
        raise InputError(f"{show_path(path)}: {exc}: a file with two entries where one belongs (a "
                         "bad merge?) would silently lose one; keep one of them") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise InputError(f"{show_path(path)}: not valid JSON ({reason}); expected a baseline file "
                         "or a --neuron-report file") from None
    if isinstance(data, dict) and "report_version" in data:
        outcomes = _report_outcomes(path, data)
        entries: dict[str, dict[str, Entry]] = {}
        for o in outcomes:
            if o.verdict.status == Status.NOT_GATED:  # a base's entry the run did not produce
                continue
            entries.setdefault(o.nodeid, {})[o.current.variant] = Entry(o.current, show_path(path),
                                                                       o.location)
        return Loaded(REPORT, path, entries, outcomes,
                      header={key: value for key, value in data.items() if key != "tests"})
    if isinstance(data, dict) and "schema_version" in data:
        if constants:  # the plugin's own reader decodes it again, to refuse them as it does
            del data
            return baselines(parse_baseline_text(path, text))
        del text  # decoded once, as the plugin's reader decodes it: validated from the tree
        return baselines(parse_baseline_document(path, data))
    raise InputError(f"{show_path(path)}: neither a baseline file (schema_version) nor a "
                     "--neuron-report file (report_version)")


def load_directory(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES, digests: bool = False) -> Loaded:
    """``digests``: the ValidFile of each baseline file read in ``Loaded.valid``."""
    store = BaselineStore(path, max_bytes, SIZE_OPTION)
    valid: list[ValidFile] | None = [] if digests else None
    files = store.files()  # special files among them are refused by name, not skipped
    if not files:
        raise InputError(f"{show_path(path)}: no baseline files (*.json) in this directory")
    entries: dict[str, dict[str, Entry]] = {}
    for file in files:
        shown = show_path(file)
        found = {nodeid: {variant: Entry(summary, shown) for variant, summary in variants.items()}
                 for nodeid, variants in store.read_file(file, valid=valid).items()}  # a report there is skipped
        for nodeid, variants in found.items():
            for variant, entry in variants.items():
                seen = entries.setdefault(nodeid, {}).get(variant)
                if seen is not None:  # the plugin would only ever read one of them
                    raise InputError(f"{plain(nodeid)} [{plain(variant)}] is in both {seen.source} and "
                                     f"{entry.source}; keep one")
                entries[nodeid][variant] = entry
    return Loaded(BASELINES, path, entries, valid=valid or [])


def load(path: str | Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES, digests: bool = False) -> Loaded:
    """A baseline directory, a baseline file or a report, no file larger than ``max_bytes``.
    Raises NeuronProfError naming the path. ``digests``: see ``Loaded.valid``."""
    path = Path(path)
    if path.is_dir():
        return load_directory(path, max_bytes, digests)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    return load_file(path, max_bytes, digests)
