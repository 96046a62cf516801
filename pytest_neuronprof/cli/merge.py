"""Combining baseline directories recorded by sharded CI jobs into one.

Entries are written through ``BaselineStore.save`` (the plugin's own writer: file lock, re-read,
``render_baseline``, ``atomic_write_text``), so a merged directory is byte-identical to one the
plugin would record, and entries already in OUT that no input has are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..defaults import DEFAULT_MAX_FILE_BYTES
from ..formatting import record_command
from ..gate.baseline import BaselineStore, ValidFile
from ..safetext import plain
from .inputs import REPORT, SIZE_OPTION, Entry, InputError, load

FIRST, LAST = "first", "last"


@dataclass
class MergeResult:
    written: list[Path]  # files created or changed
    entries: int  # test/variant entries taken from the inputs
    resolved: list[str] = field(default_factory=list)  # conflicts settled by --prefer, for people


def combine(inputs: Sequence[Path], prefer: str | None = None, max_bytes: int = DEFAULT_MAX_FILE_BYTES,
            valid: list[ValidFile] | None = None) -> tuple[dict[str, dict[str, Entry]], list[str]]:
    """All inputs' entries; the same test and variant with different content is a conflict,
    refused unless ``prefer`` says which side wins. ``valid``: each input baseline file's
    ValidFile is added to it."""
    combined: dict[str, dict[str, Entry]] = {}
    resolved: list[str] = []
    for path in inputs:
        loaded = load(path, max_bytes, digests=valid is not None)
        if loaded.kind == REPORT:
            raise InputError(f"{path} is a --neuron-report file; merge takes baseline directories "
                             f"(or baseline files), as recorded with `{record_command()}`")
        for nodeid, variants in loaded.entries.items():
            for variant, entry in variants.items():
                seen = combined.setdefault(nodeid, {}).get(variant)
                if seen is not None and seen.summary.to_json_once() != entry.summary.to_json_once():
                    if prefer is None:
                        raise InputError(
                            f"conflicting baselines for {plain(nodeid)} [{plain(variant)}]: {seen.source} and "
                            f"{entry.source} differ; re-record one of them, or pass --prefer first "
                            "or --prefer last to choose")
                    keep, drop = (seen, entry) if prefer == FIRST else (entry, seen)
                    resolved.append(f"{plain(nodeid)} [{plain(variant)}]: kept {keep.source} over {drop.source} "
                                    f"(--prefer {prefer})")
                    if prefer == FIRST:
                        continue
                combined[nodeid][variant] = entry
        if valid is not None:
            valid.extend(loaded.valid)
    return combined, resolved


def merge_baselines(out: Path, inputs: Sequence[Path], prefer: str | None = None,
                    max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> MergeResult:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: the output of merge must be a directory")
    valid: list[ValidFile] = []
    combined, resolved = combine(inputs, prefer, max_bytes, valid)
    entries = [(nodeid, entry.summary) for nodeid, variants in sorted(combined.items())
               for _, entry in sorted(variants.items())]
    store = BaselineStore(out, max_bytes, SIZE_OPTION)
    # A broken file in OUT stops the merge before anything is written; OUT's entries that the
    # inputs replace are not kept meanwhile (a second copy of a large merge). A file of OUT with
    # the bytes of an input file, all of whose entries the inputs replace, is not parsed again:
    # those bytes validated as the input (merging into an OUT that already has them).
    store.validate_all(replaced={(nodeid, variant) for nodeid, variants in combined.items()
                                 for variant in variants}, known=valid)
    return MergeResult(store.save(entries), len(entries), resolved)
