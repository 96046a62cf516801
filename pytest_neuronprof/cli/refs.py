"""A side of `neuronprof compare` (or the input of `show`) named by a git ref: ``REF`` (the
baseline directory the project's ini file names, at that ref) or ``REF:DIR`` (DIR relative to the
repository's top), read as the plugin reads ``--neuron-baseline-ref``: the same store, limits and
repository discovery (gate/gitref.py: the repository of the working directory, never one a data
directory could make). A path that exists is always a path."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ..defaults import DEFAULT_BASELINE_DIR, DEFAULT_MAX_FILE_BYTES
from ..errors import ConfigError
from ..gate.gitref import RefBaselineStore, check_ref, find_repository, resolve_commit
from ..inifiles import find_ini, parse_ini
from .inputs import BASELINES, SIZE_OPTION, Entry, InputError, Loaded, load

SIDE_HELP = ("a path (baseline directory, baseline file or --neuron-report file) when one exists; "
             "else a git ref: REF (the baseline directory your ini file names, at REF) or REF:DIR "
             "(DIR relative to the repository's top), read from git without a checkout")


def ini_baseline_dir(start: Path) -> Path:
    """The baseline directory a run in ``start`` uses: the ini file's ``neuron_baseline_dir``
    (relative to its folder), else ``baselines/`` beside it; without an ini file, ``start``'s."""
    ini = find_ini(start)
    if ini is None:
        return start / DEFAULT_BASELINE_DIR
    try:
        settings = parse_ini(ini.name, ini.read_text(encoding="utf-8")) or {}
    except Exception:  # pytest would refuse it too; the default is what is left
        settings = {}
    return ini.parent / (settings.get("neuron_baseline_dir") or DEFAULT_BASELINE_DIR)


def load_side(text: str, max_bytes: int = DEFAULT_MAX_FILE_BYTES, option: str = "neuronprof") -> Loaded:
    """``text`` as a path when it exists, else as ``REF`` or ``REF:DIR``."""
    if Path(text).exists():
        return load(text, max_bytes)
    ref, colon, folder = text.partition(":")
    try:
        check_ref(ref, option)
        repository = find_repository(Path.cwd(), option=option)
        commit = resolve_commit(repository, ref, option)
    except ConfigError as exc:
        raise InputError(f"{text}: no such file or directory, nor a git ref (REF or REF:DIR) "
                         f"that git knows here ({exc})") from None
    directory = repository.work_tree / PurePosixPath(folder) if colon else ini_baseline_dir(Path.cwd())
    store = RefBaselineStore(directory, ref, repository, max_bytes, SIZE_OPTION, commit=commit)
    shown = f"{ref} ({store.commit[:12]}):{repository.relative(directory, option)}"
    entries: dict[str, dict[str, Entry]] = {}
    for path in store.files():
        for nodeid, variants in store.read_file(path).items():
            for variant, summary in variants.items():
                entries.setdefault(nodeid, {})[variant] = Entry(summary, store.where(path))
    return Loaded(BASELINES, Path(shown), entries)
